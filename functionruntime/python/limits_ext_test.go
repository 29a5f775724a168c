package python_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
)

// limitsPy reports the descriptors the worker holds beyond stdio and
// whether its guardian runs (fds), or opens files until it cannot (fill).
const limitsPy = `
import os, resource

def held(fd):
    try:
        os.readlink("/proc/self/fd/%d" % fd)
        return True
    except OSError:  # listdir's own, closed by now
        return False

def guardian():
    # The worker's guardian (started before the handshake), or None.
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if f.read().startswith(b"fnbridge-python-guardian") and os.getpgid(int(pid)) == os.getpgid(0):
                    return int(pid)
        except (OSError, ValueError):
            pass
    return None

def fds(event):
    return {"fds": sorted(fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 2 and held(fd)),
            "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "guardian": guardian()}

def fill(event):
    opened = []
    try:
        while True:
            opened.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as e:
        return {"opened": len(opened), "errno": e.errno}
    finally:
        for fd in opened:
            os.close(fd)
`

type fdReport struct {
	FDs      []int `json:"fds"`
	Soft     int   `json:"soft"`
	Guardian int   `json:"guardian"`
}

type fillReport struct {
	Opened int `json:"opened"`
	Errno  int `json:"errno"`
}

// fdsOf starts a worker under open_files open and reports its descriptors,
// then how many files the handler could open.
func fdsOf(t *testing.T, open int64) (fdReport, fillReport) {
	t.Helper()
	f := conformance.NewFixture(t, "lim.fds", map[string]string{"lim.py": limitsPy})
	f.Spec.Limits = functionruntime.DefaultWorkerLimits()
	f.Spec.Limits.OpenFiles = open
	w := f.Start(t)
	var r fdReport
	if err := json.Unmarshal(f.MustInvoke(t, w, "null").Output, &r); err != nil {
		t.Fatal(err)
	}
	if r.Guardian != 0 {
		// A guardian that works blocks reading the lifeline; one that
		// could not read it kills the group and is gone instead.
		proctest.Eventually(t, 5*time.Second, "the guardian blocks reading the lifeline", func() bool {
			wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", r.Guardian))
			return strings.Contains(string(wchan), "pipe")
		})
	}
	f.Spec.Handler = "lim.fill"
	var fr fillReport
	if err := json.Unmarshal(f.MustInvoke(t, f.Start(t), "null").Output, &fr); err != nil {
		t.Fatal(err)
	}
	return r, fr
}

// leakAbove gives this process an inheritable descriptor at fd, as a
// server started by a careless parent has, until the test ends.
func leakAbove(t *testing.T, fd int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := unix.Dup3(int(r.Fd()), fd, 0); err != nil { // no O_CLOEXEC
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
}

// A low open_files still starts the worker: its protocol descriptors (and
// the copy of its log pipe, when the lowest open_files leaves room for
// one) move as high as the limit lets them, not to 64, which would be
// past it.
// What leaked to it from above the limit is closed all the same.
func TestLowOpenFilesLimitStartsTheWorker(t *testing.T) {
	leakAbove(t, 300)
	for _, n := range []int64{functionruntime.MinWorkerOpenFiles, 20, 66} {
		r, fill := fdsOf(t, n)
		if r.Soft != int(n) {
			t.Fatalf("open_files %d: the worker's soft limit is %d", n, r.Soft)
		}
		if r.Guardian == 0 {
			t.Fatalf("open_files %d: the worker's guardian is not running", n)
		}
		// The copy of the log pipe (see TestClosedStdoutAndStderrComeBack)
		// where the limit leaves room for it.
		want := 4
		if n == functionruntime.MinWorkerOpenFiles {
			want = 3
		}
		if len(r.FDs) != want {
			t.Fatalf("open_files %d: the worker holds %v beyond stdio, want its 3 protocol descriptors and %d more", n, r.FDs, want-3)
		}
		for _, fd := range r.FDs {
			if fd >= int(n) {
				t.Fatalf("open_files %d: descriptor %d at or past the limit (%v)", n, fd, r.FDs)
			}
		}
		if fill.Opened < 1 || fill.Errno != int(unix.EMFILE) {
			t.Fatalf("open_files %d: the handler opened %d files and then got errno %d, want EMFILE after at least one", n, fill.Opened, fill.Errno)
		}
	}
}

// Where the limit allows, the protocol descriptors stay at 64 and above,
// out of the way of the low descriptors handlers open or dup2 onto.
func TestProtocolDescriptorsStayHighUnderTheDefaultLimit(t *testing.T) {
	leakAbove(t, 2000)
	r, _ := fdsOf(t, functionruntime.DefaultWorkerOpenFiles)
	if len(r.FDs) == 0 {
		t.Fatal("no descriptors above stdio")
	}
	for _, fd := range r.FDs {
		if fd < 64 || fd >= 2000 {
			t.Fatalf("descriptor %d below 64 or leaked (%v)", fd, r.FDs)
		}
	}
}
