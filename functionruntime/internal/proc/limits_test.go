//go:build linux

package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/fnbridge/fnbridge/internal/procstat"
	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

var errTestCrash = errors.New("crashed")

func startLimited(t *testing.T, script string, l Limits) *Process {
	t.Helper()
	p, err := Start(Config{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(),
		Env: []string{"PATH=/usr/bin:/bin"}, Logger: zerolog.Nop(), Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(100 * time.Millisecond) })
	return p
}

// Limits are in force in the worker process itself, before its first
// instruction.
func TestLimitsAppliedBeforeTheInterpreter(t *testing.T) {
	l := Limits{Memory: 256 << 20, OpenFiles: 100, FileSize: 1 << 20, CPU: 5 * time.Second}
	p := startLimited(t, `{ cat /proc/$$/limits; echo "oom $(cat /proc/$$/oom_score_adj)"; } >&4`, l)
	out, _ := io.ReadAll(p.Responses())
	text := strings.Join(strings.Fields(string(out)), " ")
	for _, want := range []string{
		"Max cpu time 5 6 seconds",
		"Max file size 1048576 1048576 bytes",
		// Max data size: TestMemoryIsBoundOnce.
		"Max open files 100 100 files",
		"oom 1000",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("worker limits lack %q:\n%s", want, out)
		}
	}
}

// The shell that applies the limits leaves the environment as it was:
// it exports PWD on its own, which a worker must not see unless its
// registration set it.
func TestLaunchKeepsTheEnvironment(t *testing.T) {
	for _, env := range [][]string{{"A=1"}, {"A=1", "PWD=/nonexistent"}} {
		var logs proctest.Logs
		p, err := Start(Config{Path: "/usr/bin/env", Dir: t.TempDir(), Env: env,
			Logger: logs.Logger("r"), Limits: Limits{OpenFiles: 100}})
		if err != nil {
			t.Fatal(err)
		}
		<-p.Exited()
		p.Terminate(0)
		if got := logs.Messages(); strings.Join(got, " ") != strings.Join(env, " ") {
			t.Errorf("worker environment = %q, want %q", got, env)
		}
	}
}

// testSession is the smallest Session: a process speaking one line per
// invocation on fds 3 and 4.
type testSession struct{ Base }

// shSession starts a testSession: /bin/sh running script under l.
func shSession(t *testing.T, script string, l Limits) (Session, error) {
	p, err := Start(Config{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(),
		Env: []string{"PATH=/usr/bin:/bin"}, Logger: zerolog.Nop(), Limits: l})
	if err != nil {
		return nil, err
	}
	return &testSession{Base{P: p, Tmp: t.TempDir()}}, nil
}

func supervise(t *testing.T, script string, l Limits) *Supervisor {
	t.Helper()
	return superviseStart(t, func(context.Context) (Session, error) { return shSession(t, script, l) })
}

// superviseStart supervises the session start makes, restarting with it.
func superviseStart(t *testing.T, start func(context.Context) (Session, error)) *Supervisor {
	t.Helper()
	first, err := start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := NewSupervisor(SupervisorConfig{Name: "test worker", Start: start, Grace: 100 * time.Millisecond,
		ErrCrashed: errTestCrash, ErrFailed: errors.New("failed")}, first)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// invokeLine sends one line and reads one answer; "fail" is a handler
// error, end of file a crash.
func invokeLine(s *Supervisor) (pid int, err error) {
	l := zerolog.Nop()
	err = s.Do(context.Background(), &l, func(sess Session) error {
		p := sess.Proc()
		pid = p.Pid()
		if _, err := p.Requests().Write([]byte("go\n")); err != nil {
			return &ProtocolError{Err: err}
		}
		buf := make([]byte, 64)
		n, err := p.Responses().Read(buf)
		if err != nil {
			return &ProtocolError{Err: err}
		}
		if strings.HasPrefix(string(buf[:n]), "fail") {
			return errors.New("handler failed")
		}
		return nil
	})
	return pid, err
}

// A worker killed by SIGXFSZ fails the invocation with a LimitError that
// still wraps the crash, and the file it wrote stopped at the limit.
func TestFileSizeLimitKillsTheWorker(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	s := supervise(t, `while read x <&3; do echo m >&2; exec yes >`+out+`; done`, Limits{FileSize: 64 << 10})
	pid1, err := invokeLine(s)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitFileSize || !errors.Is(err, errTestCrash) {
		t.Fatalf("err = %v, want a file_size LimitError wrapping the crash", err)
	}
	if st, err := os.Stat(out); err != nil || st.Size() > 64<<10 {
		t.Fatalf("output file: %v, size %d > limit", err, st.Size())
	}
	pid2, _ := invokeLine(s)
	if pid2 == pid1 {
		t.Fatal("the next invocation did not get a fresh worker")
	}
}

// A bounded fork loop under a process limit: forks fail at the worker's
// cgroup, the invocation fails naming the limit, and the worker is
// replaced.
func TestProcessLimitFailsTheInvocation(t *testing.T) {
	if _, enforced := Mechanisms(); !enforced {
		t.Skip("no writable pids cgroup here")
	}
	s := supervise(t, `while read x <&3; do echo m >&2
		i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null
		echo fail >&4; done`, Limits{Processes: 16})
	pid1, err := invokeLine(s)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitProcesses {
		t.Fatalf("err = %v, want a processes LimitError", err)
	}
	if pid2, _ := invokeLine(s); pid2 == pid1 {
		t.Fatal("the next invocation did not get a fresh worker")
	}
}

// Descendants that leave the worker's group are still in its cgroup:
// Terminate kills them and removes the cgroup.
func TestTerminateEmptiesAndRemovesTheCgroup(t *testing.T) {
	p := startLimited(t, `setsid sleep 300 & echo $! >&4; read x <&3`, Limits{Processes: 16, Memory: 64 << 20})
	if p.cg == nil {
		t.Skip("no worker cgroup here")
	}
	buf := make([]byte, 32)
	n, _ := p.Responses().Read(buf)
	escaped, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatal(err)
	}
	p.Terminate(100 * time.Millisecond)
	if procstat.Alive(escaped) {
		t.Fatalf("setsid'ed descendant %d survived Terminate", escaped)
	}
	for _, dir := range p.cg.dirs {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s not removed: %v", dir, err)
		}
	}
}

// A grandchild that called setsid and exited is re-parented to the server
// and reaped there, although no process-group wait reaches it.
func TestSetsidOrphansAreReaped(t *testing.T) {
	p := startLimited(t, `i=0; while [ $i -lt 50 ]; do (setsid true &); i=$((i+1)); done; echo done >&4; read x <&3`, Limits{})
	buf := make([]byte, 8)
	if _, err := p.Responses().Read(buf); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		z := setsidZombies()
		if z == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d setsid'ed zombies still parented to the server", z)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A descendant that left the worker's group without a session of its own
// (`timeout` calls setpgid, and so leads a group its child shares) is
// reaped once it exits: killed with the worker's cgroup, or, without one,
// when it ends on its own after the worker.
func TestSetpgidDescendantsAreReaped(t *testing.T) {
	testtool.Require(t, "", "timeout", "to make a descendant leave the group")
	for _, c := range []struct {
		name   string
		limits Limits
	}{
		{"in a cgroup", Limits{Processes: 16, Memory: 64 << 20}},
		{"without a cgroup", Limits{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startLimited(t, `timeout 1 sleep 300 & echo $! >&4; read x <&3`, c.limits)
			if c.limits.Processes != 0 && p.cg == nil {
				t.Skip("no worker cgroup here")
			}
			buf := make([]byte, 32)
			n, _ := p.Responses().Read(buf)
			pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
			if err != nil {
				t.Fatal(err)
			}
			var child int // timeout's sleep, in timeout's group
			for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				for _, st := range procstat.All() {
					if st.PPID == pid {
						child = st.PID
					}
				}
			}
			if child == 0 {
				t.Fatalf("timeout's child (of %d) not found within 5s", pid)
			}
			p.Terminate(100 * time.Millisecond)
			deadline := time.Now().Add(10 * time.Second)
			for {
				var left []string
				for _, q := range []int{pid, child} {
					if st, err := procstat.Read(q); err == nil && q != 0 {
						left = append(left, fmt.Sprintf("%d (%c, parent %d)", q, st.State, st.PPID))
					}
				}
				if len(left) == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("timeout and its child still there: %v", left)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func setsidZombies() int {
	n := 0
	for _, st := range procstat.All() {
		if st.PPID == os.Getpid() && st.Dead() && st.PGID == st.PID {
			if sid, err := unix.Getsid(st.PID); err == nil && sid == st.PID {
				n++
			}
		}
	}
	return n
}

// RLIMIT_CPU's soft limit sends SIGXCPU, which names the limit.
func TestCPULimitKillsTheWorker(t *testing.T) {
	s := supervise(t, `while read x <&3; do echo m >&2; while :; do :; done; done`, Limits{CPU: time.Second})
	_, err := invokeLine(s)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitCPU {
		t.Fatalf("err = %v, want a cpu LimitError", err)
	}
}

// An invocation whose context ends once its answer is in keeps that
// answer, but the worker's pipes carry the interruption's deadlines for
// good: the next invocation gets a fresh worker instead of failing as a
// crash that never happened.
func TestContextEndingAfterTheAnswerCostsNoCrash(t *testing.T) {
	s := supervise(t, `while read x <&3; do echo "$$" >&4; done`, Limits{})
	l := zerolog.Nop()
	ctx, cancel := context.WithCancel(context.Background())
	var first int
	err := s.Do(ctx, &l, func(sess Session) error {
		p := sess.Proc()
		first = p.Pid()
		if _, err := p.Requests().Write([]byte("go\n")); err != nil {
			return &ProtocolError{Err: err}
		}
		if _, err := p.Responses().Read(make([]byte, 64)); err != nil {
			return &ProtocolError{Err: err}
		}
		cancel()
		// Return only once the interruption has reached the pipes, as it
		// may when the context ends just before the call returns.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, err := p.Requests().Write(nil); errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
		}
		t.Error("the interruption never reached the pipes")
		return nil
	})
	if err != nil {
		t.Fatalf("the answered invocation: %v", err)
	}
	pid, err := invokeLine(s)
	if err != nil || pid == first {
		t.Fatalf("next invocation: pid %d (first %d), %v; want a fresh worker and no error", pid, first, err)
	}
}

// Limits near the largest int64 are rounded up to whole KiB, blocks and
// seconds without overflowing into a negative ulimit, which the shell
// refuses ("Illegal option -9"), failing every registration.
func TestLaunchRoundsHugeLimitsWithoutOverflow(t *testing.T) {
	_, argv, _, _, err := launch(Config{Path: "/bin/true", Limits: Limits{Memory: math.MaxInt64, FileSize: math.MaxInt64 - 1, CPU: math.MaxInt64}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	script := strings.Join(argv, " ")
	if strings.Contains(script, " -9") || !strings.Contains(script, "ulimit -d ") || !strings.Contains(script, "ulimit -t ") {
		t.Fatalf("launch script %q: want positive ulimits for -d, -f and -t", script)
	}
}

// A limit above the server's own hard limit is lowered to it (ulimit
// could not raise it and the worker would never start), and the server
// says so in a warning naming the limit as the configuration does: the
// function would otherwise hit EMFILE below the open_files it was given.
func TestLimitAboveTheHardLimitIsLoweredWithAWarning(t *testing.T) {
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil || cur.Max == ^uint64(0) || cur.Max >= math.MaxInt64/2 {
		t.Skipf("no finite hard RLIMIT_NOFILE here (%v, %d)", err, cur.Max)
	}
	asked := int64(cur.Max) + 1000
	var logs bytes.Buffer
	cfg := Config{Path: "/bin/sh", Args: []string{"-c", "ulimit -n"}, Limits: Limits{OpenFiles: asked}, Logger: zerolog.New(&logs)}
	_, _, inForce, lowered, err := launch(cfg, nil)
	want := fmt.Sprintf("open_files %d lowered to %d, the hard limit the server runs under", asked, cur.Max)
	if err != nil || len(lowered) != 1 || lowered[0] != want {
		t.Fatalf("launch: lowered %q (%v), want [%q]", lowered, err, want)
	}
	if inForce.OpenFiles != int64(cur.Max) {
		t.Fatalf("launch: open_files in force %d, want the hard limit %d", inForce.OpenFiles, cur.Max)
	}
	loweredWarned.Delete(want) // once per process: -count=N warned already
	warnLowered(cfg.Logger, lowered)
	warnLowered(cfg.Logger, lowered)
	if n := strings.Count(logs.String(), `"level":"warn"`); n != 1 || !strings.Contains(logs.String(), want) {
		t.Fatalf("logged %q: want one warning naming %q", logs.String(), want)
	}
}
