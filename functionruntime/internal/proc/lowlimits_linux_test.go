//go:build linux

package proc

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// The launch shell joins the worker's cgroup before it lowers its own
// descriptor limit: dash moves a redirected descriptor to 10 or above
// while it writes cgroup.procs, which a limit of 10 or less refuses, and
// the worker would never start.
func TestLowOpenFilesLimitJoinsTheCgroup(t *testing.T) {
	if _, enforced := Mechanisms(); !enforced {
		t.Skip("no writable pids cgroup here")
	}
	p, err := Start(Config{Path: "/bin/cat", Args: []string{"/proc/self/limits"}, Dir: t.TempDir(),
		Logger: zerolog.Nop(), Limits: Limits{OpenFiles: 8, Processes: 16}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(100 * time.Millisecond) })
	<-p.Exited()
	p.SyncLogs()
	text := strings.Join(strings.Fields(strings.Join(p.RecentLines(30), "\n")), " ")
	if !strings.Contains(text, "Max open files 8 8 files") {
		t.Fatalf("worker %s printed %q: want it running under open_files 8", p.ExitDescription(), text)
	}
}

// memoryCgroup reports whether workers get a memory cgroup here.
func memoryCgroup() bool {
	_, mem := Enforced()
	return mem
}

// Where the worker's memory cgroup bounds memory, no process of it gets
// the data rlimit as well, which a child would hit first (failing with
// its own ENOMEM, the limit unnamed); without the cgroup the rlimit is
// all there is.
func TestMemoryIsBoundOnce(t *testing.T) {
	p := startLimited(t, `exec cat /proc/$$/limits >&4`, Limits{Memory: 32 << 20})
	out, _ := io.ReadAll(p.Responses())
	text := strings.Join(strings.Fields(string(out)), " ")
	var own syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_DATA, &own); err != nil {
		t.Fatal(err)
	}
	want := "Max data size 33554432 33554432 bytes"
	if memoryCgroup() {
		want = "Max data size " + rlimitText(own.Cur) + " " + rlimitText(own.Max) + " bytes"
	}
	if !strings.Contains(text, want) {
		t.Fatalf("worker limits lack %q (memory cgroup: %v):\n%s", want, memoryCgroup(), out)
	}
}

func rlimitText(v uint64) string {
	if v == ^uint64(0) {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

// A child past the worker's memory is killed by the cgroup, and the
// invocation fails naming the memory limit.
func TestChildPastTheMemoryLimitFailsTheInvocation(t *testing.T) {
	if !memoryCgroup() {
		t.Skip("no memory cgroup here")
	}
	s := supervise(t, `while read x <&3; do echo m >&2
		sh -c 'x=$(head -c 100000000 /dev/zero | tr "\0" x); echo ${#x}' >&2 && echo ok >&4 || echo fail >&4; done`, Limits{Memory: 32 << 20})
	pid1, err := invokeLine(s)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitMemory {
		t.Fatalf("err = %v, want a memory LimitError", err)
	}
	if pid2, _ := invokeLine(s); pid2 == pid1 {
		t.Fatal("the next invocation did not get a fresh worker")
	}
}

// emfile is a handler's failure to open a file.
type emfile struct{}

func (emfile) Error() string { return "OSError: [Errno 24] Too many open files" }
func (emfile) HandlerFailure() (string, string, int) {
	return "OSError", "[Errno 24] Too many open files", 1
}

// A limit error carries the limits the worker ran under: an open_files
// above the server's hard limit is the hard limit there.
func TestLimitErrorCarriesTheLimitsInForce(t *testing.T) {
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil || cur.Max == ^uint64(0) || cur.Max >= 1<<40 {
		t.Skipf("no finite hard RLIMIT_NOFILE here (%v, %d)", err, cur.Max)
	}
	asked := Limits{OpenFiles: int64(cur.Max) + 1000, FileSize: 1 << 20}
	s := supervise(t, `read x <&3`, asked)
	l := zerolog.Nop()
	err := s.Do(t.Context(), &l, func(Session) error { return emfile{} })
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitOpenFiles {
		t.Fatalf("err = %v, want an open_files LimitError", err)
	}
	if want := (Limits{OpenFiles: int64(cur.Max), FileSize: 1 << 20}); le.InForce != want {
		t.Fatalf("limits in force %+v, want %+v", le.InForce, want)
	}
}

// handlerFailure is a handler's failure of type typ and message msg.
type handlerFailure struct{ typ, msg string }

func (f handlerFailure) Error() string { return f.typ + ": " + f.msg }
func (f handlerFailure) HandlerFailure() (string, string, int) {
	return f.typ, f.msg, 1
}

// Only the worker's own OSError names its open_files limit: a message
// that merely quotes one (an upstream's error relayed) is retried as any
// failure is, not made terminal. Where the memory cgroup bounds the
// worker, a MemoryError is no limit of its (the cgroup's limit kills);
// without it, RLIMIT_DATA is the limit a MemoryError shows.
func TestLimitsNamedOnlyForTheirOwnSigns(t *testing.T) {
	s := supervise(t, `while read x <&3; do :; done`, Limits{OpenFiles: 64, Memory: 256 << 20})
	l := zerolog.Nop()
	do := func(f handlerFailure) error {
		return s.Do(t.Context(), &l, func(Session) error { return f })
	}
	var le *LimitError
	if err := do(handlerFailure{"RuntimeError", "upstream said: [Errno 24] Too many open files on their side"}); errors.As(err, &le) {
		t.Errorf("a relayed [Errno 24]: %v, want no LimitError", err)
	}
	if err := do(handlerFailure{"OSError", "[Errno 24] Too many open files: 'f'"}); !errors.As(err, &le) || le.Limit != LimitOpenFiles {
		t.Errorf("the worker's own EMFILE: %v, want an open_files LimitError", err)
	}
	err := do(handlerFailure{"MemoryError", ""})
	if memoryCgroup() {
		if errors.As(err, &le) {
			t.Errorf("MemoryError under the memory cgroup: %v, want no LimitError", err)
		}
	} else if !errors.As(err, &le) || le.Limit != LimitMemory {
		t.Errorf("MemoryError under RLIMIT_DATA: %v, want a memory LimitError", err)
	}
}
