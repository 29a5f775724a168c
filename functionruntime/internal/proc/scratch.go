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

var sweepOnce sync.Map // kind → *sync.Once

// ScratchDir creates a worker's scratch directory in the temp directory,
// named fnbridge-<kind>-<server pid>-<random>. The first call per kind in
// a process also removes the directories of that kind whose server PID is
// no longer alive, so a SIGKILLed server leaks them only until the next
// server starts.
func ScratchDir(kind string) (string, error) {
	once, _ := sweepOnce.LoadOrStore(kind, &sync.Once{})
	once.(*sync.Once).Do(func() { SweepScratch(os.TempDir(), kind) })
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%s-%d-", scratchPrefix, kind, os.Getpid()))
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
