package proc

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// probeWaitDelay bounds how long Probe still collects output after the
// command's group was killed, should a descendant that left the group keep
// stdout open.
const probeWaitDelay = time.Second

// Probe runs path with args once and returns its stdout. Unlike a worker
// it inherits the server's environment and working directory: it exists
// to ask a launcher (a pyenv or asdf shim, which reads the server's
// environment) what it resolves to. It is owned like a worker: forked from
// the spawn thread in its own process group with the parent-death signal,
// killed with its whole group when ctx ends, and, once it exited, its group
// is killed (whatever it left running in the background) and reaped before
// Probe returns. A non-zero exit is an error that quotes the end of stderr.
// Of each stream only the first maxProbeOutput bytes are kept.
func Probe(ctx context.Context, path string, args ...string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stdout, stderr := cappedBuffer{max: maxProbeOutput}, cappedBuffer{max: maxProbeOutput}
	cmd := exec.Command(path, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = probeWaitDelay
	var err error
	onSpawnThread(func() { err = cmd.Start() })
	if err != nil {
		return nil, err
	}
	pgid := cmd.Process.Pid

	// The group is only signalled while its leader is unreaped, so the
	// group id cannot have been reused by then.
	var mu sync.Mutex
	reaped := false
	kill := func() {
		mu.Lock()
		defer mu.Unlock()
		if !reaped {
			signalGroup(pgid, syscall.SIGKILL)
		}
	}
	stop := context.AfterFunc(ctx, kill)
	defer stop()
	if waitExitedNoReap(pgid) {
		kill() // what the command left behind in its group
	}
	err = cmd.Wait()
	mu.Lock()
	reaped = true
	mu.Unlock()
	done := make(chan struct{})
	close(done)
	waitGroupEmpty(pgid, time.Now().Add(reapWait), done)

	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s killed: %w", path, ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, LastLinesSuffix(lastLines(stderr.Bytes(), 3)))
	}
	return stdout.Bytes(), nil
}

// maxProbeOutput bounds what Probe keeps of each stream: the answer it
// waits for is short, and a program that prints without end must not fill
// the server's memory.
const maxProbeOutput = 1 << 20

// cappedBuffer keeps the first max bytes written to it and drops the rest
// (still reporting them written, so the program is not stopped by EPIPE).
// The buffer is a field, not embedded: its ReadFrom would let io.Copy
// bypass Write.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }

// lastLines returns up to n of the last non-empty lines of b.
func lastLines(b []byte, n int) []string {
	var out []string
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			out = append(out, string(l))
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}
