package proc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// scratchPrefix starts every worker scratch directory; the creating
// server's PID follows, so a later server can tell which directories were
// left behind by a server that died without cleaning up (SIGKILL).
const scratchPrefix = "fnbridge-"

var sweepOnce sync.Map // base NUL kind → *sync.Once

// shmDir is where scratch directories go when TMPDIR is not set: a
// memory file system, because each Bash invocation creates, writes and
// removes its own small files there (stdout, outputs, the payload file),
// and on a disk file system that costs up to a quarter of a warm call.
// Their size is bounded by the handler's file_size limit.
var shmDir = "/dev/shm"

// scratchBase is TMPDIR when it is set, else shmDir when it is a writable
// directory, else the system temp directory.
func scratchBase() string {
	if os.Getenv("TMPDIR") != "" {
		return os.TempDir()
	}
	if st, err := os.Stat(shmDir); err == nil && st.IsDir() && syscall.Access(shmDir, 2 /* W_OK */) == nil {
		return shmDir
	}
	return os.TempDir()
}

// ScratchDir creates a worker's scratch directory in scratchBase,
// named fnbridge-<kind>-<server pid>-<random>. The first call per kind in
// a process also removes the directories of that kind whose server PID is
// no longer alive, so a SIGKILLed server leaks them only until the next
// server starts.
func ScratchDir(kind string) (string, error) { return PrivateDir(scratchBase(), kind) }

// PrivateDir creates a 0700 directory fnbridge-<kind>-<server pid>-<random>
// in base, sweeping base for those of dead servers on the first call per
// kind, as ScratchDir does.
func PrivateDir(base, kind string) (string, error) {
	once, _ := sweepOnce.LoadOrStore(base+"\x00"+kind, &sync.Once{})
	once.(*sync.Once).Do(func() { SweepScratch(base, kind) })
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%s-%d-", scratchPrefix, kind, os.Getpid()))
	if err != nil {
		return "", err
	}
	// Absolute, because workers use it after a handler may have changed
	// directory (a relative TMPDIR would otherwise point elsewhere).
	abs, err := filepath.Abs(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return abs, nil
}

// SweepScratch removes dir's scratch directories of kind whose creating
// server is dead. A PID that is alive (even if reused by another process)
// keeps its directories: removing too little is safe, too much is not.
func SweepScratch(dir, kind string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := scratchPrefix + kind + "-"
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}
