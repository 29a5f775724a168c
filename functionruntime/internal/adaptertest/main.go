package adaptertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/rs/zerolog"
)

// helperEnv selects a helper-process role when the test binary re-executes
// itself; helperDir names the working directory the helper uses.
const (
	helperEnv    = "FNBRIDGE_ADAPTERTEST_HELPER"
	helperDir    = "FNBRIDGE_ADAPTERTEST_DIR"
	helperInline = "FNBRIDGE_ADAPTERTEST_INLINE" // "1": the helper's worker runs inline
)

// Main is the TestMain of an adapter package: in a helper process started
// by the server-death tests it plays the server and never returns;
// otherwise it runs the tests.
func Main(m *testing.M, a *Adapter) {
	switch os.Getenv(helperEnv) {
	case "server":
		serveLifecycle(a)
	case "servers":
		serveOrphans(a)
	}
	os.Exit(m.Run())
}

func helperFail(err error) {
	fmt.Println("error:", err)
	os.Exit(1)
}

// serveLifecycle plays a server: it starts the lifecycle handler, prints
// the worker's pid, and waits to be killed.
func serveLifecycle(a *Adapter) {
	w, err := a.New(Options{}).Start(context.Background(), functionruntime.WorkerSpec{
		RunUID: "helper", Dir: os.Getenv(helperDir), Handler: a.Lifecycle.Handler, Logger: zerolog.Nop(),
		Inline: os.Getenv(helperInline) == "1",
	})
	if err != nil {
		helperFail(err)
	}
	res, err := w.Invoke(context.Background(), functionruntime.Invocation{ID: "1", Input: []byte(a.Text("pid")), Logger: zerolog.Nop()})
	if err != nil {
		helperFail(err)
	}
	fmt.Println(string(res.Output))
	select {}
}

// serveOrphans plays a server with two workers of the orphans handler: it
// runs "bg" on the first and prints its output, then runs "long" on the
// second until it is killed.
func serveOrphans(a *Adapter) {
	spec := functionruntime.WorkerSpec{
		RunUID: "helper", Dir: os.Getenv(helperDir), Handler: a.Orphans.Handler, Logger: zerolog.Nop(),
		Inline: os.Getenv(helperInline) == "1",
	}
	ad := a.New(Options{})
	idle, err := ad.Start(context.Background(), spec)
	if err != nil {
		helperFail(err)
	}
	res, err := idle.Invoke(context.Background(), functionruntime.Invocation{ID: "1", Input: []byte(a.Text("bg")), Logger: zerolog.Nop()})
	if err != nil {
		helperFail(err)
	}
	text, err := a.Decode(res.Output)
	if err != nil {
		helperFail(err)
	}
	fmt.Println(text)
	busy, err := ad.Start(context.Background(), spec)
	if err != nil {
		helperFail(err)
	}
	_, err = busy.Invoke(context.Background(), functionruntime.Invocation{ID: "2", Input: []byte(a.Text("long")), Logger: zerolog.Nop()})
	helperFail(fmt.Errorf("long invocation returned: %v", err))
}

// Helper is a re-executed test binary playing a server.
type Helper struct {
	Cmd   *exec.Cmd
	Stdin io.WriteCloser // nil unless asked for
	Out   *bufio.Reader  // its stdout
}

// StartHelper re-executes the test binary with env added to its
// environment, and with a pipe to its stdin when stdin is set. It is
// killed and reaped at cleanup.
func StartHelper(t *testing.T, env []string, stdin bool) *Helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// The killed helper cannot remove its worker scratch directories: keep
	// them inside the test's temporary directory.
	cmd.Env = append(append(os.Environ(), env...), "TMPDIR="+t.TempDir())
	// Pdeathsig: a test binary that dies (go test -timeout panics, and
	// skips the cleanup) takes the helper with it, and the helper's
	// workers follow it; the "server" helper would otherwise block forever.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	h := &Helper{Cmd: cmd}
	if stdin {
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		h.Stdin = in
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	h.Out = bufio.NewReader(out)
	return h
}

// startHelper starts the helper of a in role with working directory dir.
func startHelper(t *testing.T, a *Adapter, role, dir string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	env := []string{helperEnv + "=" + role, helperDir + "=" + dir}
	if a.Inline {
		env = append(env, helperInline+"=1")
	}
	h := StartHelper(t, env, false)
	return h.Cmd, h.Out
}

// Rule: workers "die with the server (Pdeathsig SIGKILL)".
func testWorkerDiesWithServer(t *testing.T, a *Adapter) {
	Require(t, a.Interpreter)
	dir := t.TempDir()
	WriteFiles(t, dir, a.Lifecycle.Files)
	cmd, out := startHelper(t, a, "server", dir)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper printed %q", line)
	}
	if proctest.ProcessDead(pid) {
		t.Fatalf("worker %d not running", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "worker killed with its server", func() bool { return proctest.ProcessDead(pid) })
	// It may have been re-parented to this process: reap it.
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
}

// Rule (contract): workers "die with the server (Linux parent-death
// signal)"; no orphan interpreter process survives a SIGKILLed server.
// That covers what an invocation in flight started, a background child an
// earlier invocation left and whatever an idle worker keeps ready, not
// just the worker processes themselves.
func testServerKill(t *testing.T, a *Adapter) {
	Require(t, a.Interpreter)
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep command")
	}
	dir := t.TempDir()
	WriteFiles(t, dir, a.Orphans.Files)
	cmd, out := startHelper(t, a, "servers", dir)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	idle := parsePids(t, line)
	long := filepath.Join(dir, "long")
	proctest.Eventually(t, 20*time.Second, "long invocation running", func() bool {
		_, err := os.Stat(long)
		return err == nil
	})
	b, err := os.ReadFile(long)
	if err != nil {
		t.Fatal(err)
	}
	busy := parsePids(t, string(b))
	t.Cleanup(func() {
		for _, g := range []int{idle[0], busy[0]} {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
	})
	// The "bg" subshell, if it is not the worker, has ended; its worker
	// and child run on.
	for _, pid := range []int{idle[0], idle[2], busy[0], busy[1], busy[2]} {
		if proctest.ProcessDead(pid) {
			t.Fatalf("process %d is not running before the server is killed", pid)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		var left []int
		for _, g := range []int{idle[0], busy[0]} {
			var ws syscall.WaitStatus
			for { // reap what was re-parented to this process
				if pid, err := syscall.Wait4(-g, &ws, syscall.WNOHANG, nil); err != nil || pid <= 0 {
					break
				}
			}
			left = append(left, proctest.LiveInGroup(g)...)
		}
		for _, pid := range slices.Concat(idle, busy) {
			if !proctest.ProcessDead(pid) && !slices.Contains(left, pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("3s after the server was SIGKILLed these processes of its %s workers are alive: %v "+
				"(idle worker, subshell, bg child: %v; busy worker, subshell, sleep: %v)", a.Kind, left, idle, busy)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// parsePids parses "worker subshell child" pids.
func parsePids(t *testing.T, s string) []int {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 3 {
		t.Fatalf("want three pids, got %q", s)
	}
	pids := make([]int, len(f))
	for i, x := range f {
		pid, err := strconv.Atoi(x)
		if err != nil {
			t.Fatalf("want three pids, got %q", s)
		}
		pids[i] = pid
	}
	return pids
}
