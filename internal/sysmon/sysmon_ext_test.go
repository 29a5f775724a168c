package sysmon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fnbridge/fnbridge/internal/sysmon"
)

func TestPlan(t *testing.T) {
	cases := []struct {
		name    string
		environ []string
		want    []string // nil: no re-execution
	}{
		{"no GODEBUG: the setting alone, and a marker saying so",
			[]string{"PATH=/bin"},
			[]string{"PATH=/bin", "GODEBUG=" + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG=unset"}},
		{"the user's GODEBUG settings are kept, ours after them",
			[]string{"GODEBUG=http2debug=1,madvdontneed=1", "HOME=/h"},
			[]string{"HOME=/h", "GODEBUG=http2debug=1,madvdontneed=1," + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG==http2debug=1,madvdontneed=1"}},
		{"an empty GODEBUG is remembered as set",
			[]string{"GODEBUG="},
			[]string{"GODEBUG=" + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG=="}},
		{"of two GODEBUG entries the first counts, as for the runtime; both go",
			[]string{"GODEBUG=gctrace=1", "GODEBUG=schedtrace=5"},
			[]string{"GODEBUG=gctrace=1," + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG==gctrace=1"}},
		{"schedtrace named by the user: left alone", []string{"GODEBUG=gctrace=1,schedtrace=1000"}, nil},
		{"schedtrace=0 is how to turn it off", []string{"GODEBUG=schedtrace=0"}, nil},
		{"already re-executed: never again", []string{"GODEBUG=" + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG=unset"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sysmon.Plan(tc.environ); !slices.Equal(got, tc.want) {
				t.Errorf("Plan(%q) = %q, want %q", tc.environ, got, tc.want)
			}
		})
	}
}

// report is what the helper process prints after Apply.
type report struct {
	PID        int
	Args       []string
	GODEBUG    *string // as the program (and its children) see it
	Marker     bool
	StartedEnv string   // GODEBUG in /proc/self/environ: what the runtime started with
	ChildEnv   []string // GODEBUG and marker lines of a child's environment
	Comm       []string // the names of the process's threads, the main one first
	Pdeathsig  int      // the parent-death signal after Apply
}

// The helper's main goroutine stays on the main thread, as cmd/bridge's
// does, so that Apply runs there.
func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	if os.Getenv("SYSMON_TEST_HELPER") == "1" {
		helper()
		return
	}
	os.Exit(m.Run())
}

func helper() {
	if os.Getenv("SYSMON_TEST_OFF_MAIN") == "1" {
		// Apply on another thread must refuse rather than lose the
		// parent-death signal.
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // a thread of its own, not the main one
			for syscall.Gettid() == os.Getpid() {
				runtime.UnlockOSThread()
				runtime.Gosched()
				runtime.LockOSThread()
			}
			done <- sysmon.Apply()
		}()
		err := <-done
		os.Stdout.WriteString(fmt.Sprint(err == sysmon.ErrNotMainThread) + "\n")
		return
	}
	if err := sysmon.Apply(); err != nil {
		os.Stderr.WriteString("Apply: " + err.Error() + "\n")
		os.Exit(2)
	}
	r := report{PID: os.Getpid(), Args: os.Args}
	if v, ok := os.LookupEnv("GODEBUG"); ok {
		r.GODEBUG = &v
	}
	_, r.Marker = os.LookupEnv("FNBRIDGE_SYSMON_GODEBUG")
	started, _ := os.ReadFile("/proc/self/environ")
	for _, kv := range bytes.Split(started, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("GODEBUG=")); ok {
			r.StartedEnv = string(v)
		}
	}
	if main, err := os.ReadFile("/proc/self/comm"); err == nil {
		r.Comm = append(r.Comm, strings.TrimSpace(string(main)))
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/comm")
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil {
			r.Comm = append(r.Comm, strings.TrimSpace(string(b)))
		}
	}
	var sig int32
	_ = unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0)
	r.Pdeathsig = int(sig)
	out, _ := exec.Command("env").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "GODEBUG=") || strings.HasPrefix(line, "FNBRIDGE_SYSMON") {
			r.ChildEnv = append(r.ChildEnv, line)
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func runHelper(t *testing.T, godebug *string, env ...string) report {
	t.Helper()
	out := startHelper(t, godebug, env...)
	var r report
	if err := json.Unmarshal(out.stdout, &r); err != nil {
		t.Fatalf("helper output %q: %v", out.stdout, err)
	}
	if r.PID != out.pid {
		t.Errorf("the helper ran as pid %d, started as %d: the re-execution must keep the process", r.PID, out.pid)
	}
	if !slices.Equal(r.Args, out.args) {
		t.Errorf("arguments after Apply = %q, want %q", r.Args, out.args)
	}
	if r.Marker {
		t.Error("the marker is still in the environment after Apply")
	}
	want := filepath.Base(os.Args[0])
	if len(want) > 15 { // the kernel keeps 15 bytes of a name
		want = want[:15]
	}
	if len(r.Comm) < 2 {
		t.Errorf("thread names %q: want the process's and its threads'", r.Comm)
	}
	for i, c := range r.Comm {
		if c != want {
			t.Errorf("thread %d of %d is named %q after Apply, want %q as before it", i, len(r.Comm), c, want)
		}
	}
	if r.Pdeathsig != int(syscall.SIGTERM) {
		t.Errorf("parent-death signal after Apply = %d, want SIGTERM (%d) as the parent set it", r.Pdeathsig, syscall.SIGTERM)
	}
	return r
}

// helperRun is what startHelper saw of one helper process.
type helperRun struct {
	pid    int
	args   []string
	stdout []byte
}

// startHelper runs the test binary as the helper, with a parent-death
// signal as supervisors set one, and returns its output.
func startHelper(t *testing.T, godebug *string, env ...string) helperRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "extra-arg")
	cmd.Env = append([]string{"SYSMON_TEST_HELPER=1", "PATH=" + os.Getenv("PATH")}, env...)
	if godebug != nil {
		cmd.Env = append(cmd.Env, "GODEBUG="+*godebug)
	}
	// The signal comes when the thread that started the child ends: this
	// goroutine keeps its thread until the helper is done.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v, stderr %q", err, stderr.String())
	}
	return helperRun{pid: cmd.Process.Pid, args: cmd.Args, stdout: stdout.Bytes()}
}

func TestApplyRestartsWithTheSettingAndGivesTheUserTheirEnvironment(t *testing.T) {
	t.Run("no GODEBUG", func(t *testing.T) {
		r := runHelper(t, nil)
		if r.StartedEnv != sysmon.Setting {
			t.Errorf("the runtime started with GODEBUG %q, want %q", r.StartedEnv, sysmon.Setting)
		}
		if r.GODEBUG != nil {
			t.Errorf("GODEBUG after Apply = %q, want it unset as it was", *r.GODEBUG)
		}
		if len(r.ChildEnv) != 0 {
			t.Errorf("a child inherited %q", r.ChildEnv)
		}
	})
	t.Run("the user's GODEBUG", func(t *testing.T) {
		user := "madvdontneed=1"
		r := runHelper(t, &user)
		if want := user + "," + sysmon.Setting; r.StartedEnv != want {
			t.Errorf("the runtime started with GODEBUG %q, want %q", r.StartedEnv, want)
		}
		if r.GODEBUG == nil || *r.GODEBUG != user {
			t.Errorf("GODEBUG after Apply = %v, want %q", r.GODEBUG, user)
		}
		if want := []string{"GODEBUG=" + user}; !slices.Equal(r.ChildEnv, want) {
			t.Errorf("a child's environment has %q, want %q", r.ChildEnv, want)
		}
	})
	t.Run("a marker Apply did not set is dropped", func(t *testing.T) {
		user := "madvdontneed=1"
		r := runHelper(t, &user, "FNBRIDGE_SYSMON_GODEBUG=1")
		if want := user + "," + sysmon.Setting; r.StartedEnv != want {
			t.Errorf("the runtime started with GODEBUG %q, want %q", r.StartedEnv, want)
		}
		if r.GODEBUG == nil || *r.GODEBUG != user {
			t.Errorf("GODEBUG after Apply = %v, want the user's %q", r.GODEBUG, user)
		}
	})
	t.Run("schedtrace=0 turns it off", func(t *testing.T) {
		off := "schedtrace=0"
		r := runHelper(t, &off)
		if r.StartedEnv != off || r.GODEBUG == nil || *r.GODEBUG != off {
			t.Errorf("started with %q, GODEBUG %v: want %q untouched, no re-execution", r.StartedEnv, r.GODEBUG, off)
		}
	})
}

func TestApplyRefusesOffTheMainThread(t *testing.T) {
	out := startHelper(t, nil, "SYSMON_TEST_OFF_MAIN=1")
	if got := strings.TrimSpace(string(out.stdout)); got != "true" {
		t.Errorf("Apply on another thread: the helper printed %q, want ErrNotMainThread (true) and no re-execution", got)
	}
}
