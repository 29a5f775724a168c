package bash_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"golang.org/x/sys/unix"
)

func lifecycleFixture(t *testing.T) (*fixture, functionruntime.Worker) {
	f := newFixture(t, "h.lifecycle", map[string]string{"h.sh": handlerSh})
	return f, f.start(t)
}

// waitSleeping waits until the handler's sleep branch is running.
func waitSleeping(t *testing.T, f *fixture) {
	t.Helper()
	proctest.Eventually(t, 10*time.Second, "handler running", func() bool {
		_, err := os.Stat(filepath.Join(f.dir, "sleeping"))
		return err == nil
	})
}

// Rule: "cancellation and timeouts (ctx done) kill the worker's whole
// process group ..., return ctx.Err() ..., and the next Invoke
// transparently starts a fresh worker (re-import/re-source)".
func TestTimeoutKillsGroupAndNextInvokeRestarts(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := w.Invoke(ctx, f.invocation("slow", []byte("sleep")))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("Invoke returned after %v", elapsed)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("process group %d (worker, subshell, sleep) still exists", pid)
	}
	if pid2 := f.pidOf(t, w); pid2 == pid {
		t.Fatalf("next invocation ran in the killed worker")
	}
	// The fresh worker sourced the file again.
	if n := len(f.logs.Records("sourcing h.sh, on stderr")); n != 2 {
		t.Fatalf("file sourced %d times, want 2", n)
	}
}

func TestCancelKillsWorker(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := w.Invoke(ctx, f.invocation("cancelled", []byte("sleep")))
		done <- err
	}()
	waitSleeping(t, f)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want Canceled", err)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("worker group %d survived cancellation", pid)
	}
	if got := string(f.mustInvoke(t, w, "again").Output); got != "again" {
		t.Fatalf("after cancel: %q", got)
	}
}

// Rule: TERM first, "then KILL after the grace".
func TestHandlerIgnoringTermIsKilled(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := w.Invoke(ctx, f.invocation("stubborn", []byte("ignore_term"))); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want DeadlineExceeded", err)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("group %d that ignores SIGTERM survived", pid)
	}
}

// Rule: "a worker that dies DURING an invocation ⇒ error wrapping
// functionruntime.ErrWorkerCrashed".
func TestCrashDuringInvocation(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	_, err := f.invoke(t, w, "crash")
	if !errors.Is(err, functionruntime.ErrWorkerCrashed) || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("error = %v, want ErrWorkerCrashed saying the worker was killed", err)
	}
	if pid2 := f.pidOf(t, w); pid2 == pid {
		t.Fatalf("dead worker reused")
	}
}

// Rule: "A worker that dies between invocations (or is killed externally)
// is restarted on the next Invoke".
func TestKilledBetweenInvocationsRestarts(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 5*time.Second, "worker dead", func() bool { return proctest.ProcessDead(pid) })
	if pid2 := f.pidOf(t, w); pid2 == pid {
		t.Fatalf("invocation went to the killed worker")
	}
}

// Rule: "a restart that fails (e.g. file deleted, syntax broken meanwhile)
// ⇒ error wrapping functionruntime.ErrWorkerFailed".
func TestFailedRestartIsWorkerFailed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(dir string) error
		want    string
	}{
		{"file deleted", func(dir string) error { return os.Remove(filepath.Join(dir, "h.sh")) }, "h.sh not found"},
		{"syntax broken", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "h.sh"), []byte("lifecycle() {\n"), 0o644)
		}, "syntax error"},
		{"replaced by an escaping symlink", func(dir string) error {
			_ = os.Remove(filepath.Join(dir, "h.sh"))
			return os.Symlink("/etc/profile", filepath.Join(dir, "h.sh"))
		}, "outside the working directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, w := lifecycleFixture(t)
			pid := f.pidOf(t, w)
			if err := tc.breakIt(f.dir); err != nil {
				t.Fatal(err)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			proctest.Eventually(t, 5*time.Second, "worker dead", func() bool { return proctest.ProcessDead(pid) })
			_, err := f.invoke(t, w, "pid")
			if !errors.Is(err, functionruntime.ErrWorkerFailed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want ErrWorkerFailed containing %q", err, tc.want)
			}
		})
	}
}

// Rule: "A handler that forks a background child and returns must not hang
// the invocation ... and the child is killed when the worker's group is
// killed at Close"; "no orphans (... syscall.Kill(-pgid, 0) returning
// ESRCH)".
func TestBackgroundChildDoesNotHangAndDiesAtClose(t *testing.T) {
	f, w := lifecycleFixture(t)
	pgid := f.pidOf(t, w)
	var children []int
	for _, ev := range []string{"spawn", "spawn_quiet"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := w.Invoke(ctx, f.invocation("bg", []byte(ev)))
		cancel()
		if err != nil {
			t.Fatalf("%s: %v (a background child holding stdout must not hang the invocation)", ev, err)
		}
		child, _ := strconv.Atoi(string(res.Output))
		if proctest.ProcessDead(child) {
			t.Fatalf("%s: background child %d is not running", ev, child)
		}
		if g, _ := unix.Getpgid(child); g != pgid {
			t.Fatalf("%s: child %d is in group %d, want %d", ev, child, g, pgid)
		}
		// The protocol pipes never reach a handler's children.
		if pipes, err := proctest.ExtraPipes(child); err != nil || len(pipes) > 0 {
			t.Fatalf("%s: child %d holds pipes %v (%v), want none beyond stdin/stdout/stderr", ev, child, pipes, err)
		}
		children = append(children, child)
	}
	// The worker still serves invocations with the children around.
	if got := f.pidOf(t, w); got != pgid {
		t.Fatalf("worker changed")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range children {
		if !proctest.ProcessDead(c) {
			t.Fatalf("background child %d survived Close", c)
		}
	}
	if !proctest.GroupGone(pgid) {
		t.Fatalf("process group %d not empty after Close", pgid)
	}
}

func TestCloseDuringInvocationAndAfter(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	done := make(chan error, 1)
	go func() {
		_, err := f.invoke(t, w, "sleep")
		done <- err
	}()
	waitSleeping(t, f)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("in-flight invocation error = %v, want 'closed'", err)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("worker group survived Close")
	}
	if _, err := f.invoke(t, w, "pid"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Invoke after Close = %v, want 'closed'", err)
	}
}

// Start honours its context: a file that hangs while being sourced is
// killed with its group.
func TestStartHonoursContext(t *testing.T) {
	f := newFixture(t, "slow.run", map[string]string{"slow.sh": "echo $$ >pid.tmp && mv pid.tmp pid\nsleep 60\nrun() { :; }\n"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		w   functionruntime.Worker
		err error
	}
	done := make(chan result, 1)
	go func() {
		w, err := f.a.Start(ctx, f.spec)
		done <- result{w, err}
	}()
	var pid int
	proctest.Eventually(t, 30*time.Second, "handler loading", func() bool {
		b, err := os.ReadFile(filepath.Join(f.dir, "pid"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	cancel()
	r := <-done
	if r.err == nil {
		_ = r.w.Close()
		t.Fatal("Start succeeded")
	}
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("error = %v, want Canceled", r.err)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("worker group %d of the abandoned start still exists", pid)
	}
}
