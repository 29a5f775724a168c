package python_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/fnbridge/fnbridge/functionruntime/python"
	"github.com/fnbridge/fnbridge/internal/procstat"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// lateRequestRole makes the test binary play the server of
// TestRequestAfterServerDeathNotRun.
const lateRequestRole = "FNBRIDGE_PYTHON_LATE_REQUEST_DIR"

// latePy clears its worker's parent-death signal at import, so only the
// lifeline can tell the worker that its server is gone (as on a system
// without that signal).
const latePy = `
import ctypes, os
ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG, 0

def run(event):
    if event == "pid":
        return os.getpid()
    open("ran", "w").close()
    return "ran"
`

// serveLateRequest plays the server: it starts late.run, prints the
// worker's pid, and on a line from stdin sends a request it never
// sees answered, since the test kills it.
func serveLateRequest(dir string) {
	fail := func(err error) { fmt.Println("error:", err); os.Exit(1) }
	w, err := python.New(python.Options{}).Start(context.Background(), functionruntime.WorkerSpec{
		RunUID: "helper", Dir: dir, Handler: "late.run", Logger: zerolog.Nop(),
	})
	if err != nil {
		fail(err)
	}
	res, err := w.Invoke(context.Background(), functionruntime.Invocation{ID: "1", Input: []byte(`"pid"`), Logger: zerolog.Nop()})
	if err != nil {
		fail(err)
	}
	fmt.Println(string(res.Output))
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fail(err)
	}
	_, err = w.Invoke(context.Background(), functionruntime.Invocation{ID: "2", Input: []byte(`"run"`), Logger: zerolog.Nop()})
	fail(fmt.Errorf("late request answered: %v", err))
}

// Rule: a request the server wrote just before it died is not started
// after its death. The worker group is stopped while the server writes
// the request and dies; then only the worker resumes (the guardian stays
// stopped), so nothing but the worker's own lifeline check can keep it
// from running the handler.
func TestRequestAfterServerDeathNotRun(t *testing.T) {
	adaptertest.Require(t, "python3")
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc and prctl")
	}
	dir := t.TempDir()
	adaptertest.WriteFiles(t, dir, map[string]string{"late.py": latePy})
	h := adaptertest.StartHelper(t, []string{lateRequestRole + "=" + dir}, true)
	cmd := h.Cmd
	line, err := h.Out.ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper printed %q", line)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(-pid, syscall.SIGCONT)
	})

	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "worker group stopped", func() bool {
		n := 0
		for _, st := range procstat.All() {
			if st.PGID == pid && !st.Dead() {
				if st.State != 'T' {
					return false
				}
				n++
			}
		}
		return n >= 2 // the worker and its guardian
	})
	if _, err := h.Stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "request written to the stopped worker", func() bool {
		return pendingRequest(pid)
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "worker gone after its server died", func() bool {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // if re-parented to us
		return proctest.ProcessDead(pid)
	})
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Fatal("the worker ran a request its server wrote just before dying")
	}
}

// pendingRequest reports whether a read-only pipe of pid (its request
// pipe) holds unread bytes, looked at through /proc without consuming them.
func pendingRequest(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if target, err := os.Readlink(dir + e.Name()); err != nil || !strings.HasPrefix(target, "pipe:") {
			continue
		}
		info, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		flags := -1
		for _, l := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "flags:\t"); ok {
				f, _ := strconv.ParseInt(v, 8, 64)
				flags = int(f)
			}
		}
		if flags < 0 || flags&syscall.O_ACCMODE != syscall.O_RDONLY {
			continue
		}
		fd, err := unix.Open(dir+e.Name(), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		n, err := unix.IoctlGetInt(fd, 0x541B) // FIONREAD on Linux
		_ = unix.Close(fd)
		if err == nil && n > 0 {
			return true
		}
	}
	return false
}
