package python_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
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
	f := newFixture(t, "h.lifecycle", map[string]string{"h.py": handlerPy})
	return f, f.start(t)
}

// waitSleeping waits until the handler's {"sleep": n} branch is running.
func waitSleeping(t *testing.T, f *fixture) {
	t.Helper()
	proctest.Eventually(t, 10*time.Second, "handler running", func() bool {
		_, err := os.Stat(filepath.Join(f.dir, "sleeping"))
		return err == nil
	})
}

// Rule: "cancellation and timeouts (ctx done) kill the worker's whole
// process group ..., return ctx.Err() ..., and the next Invoke
// transparently starts a fresh worker".
func TestTimeoutKillsGroupAndNextInvokeRestarts(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := w.Invoke(ctx, f.invocation("slow", `{"sleep": 60}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("Invoke returned after %v: the timeout did not stop the handler", elapsed)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("process group %d still exists after the timeout", pid)
	}
	if pid2 := f.pidOf(t, w); pid2 == pid {
		t.Fatalf("next invocation ran in the killed worker %d", pid)
	}
}

func TestCancelKillsWorker(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := w.Invoke(ctx, f.invocation("cancelled", `{"sleep": 60}`))
		done <- err
	}()
	// Cancel once the handler is certainly running: its sleep shows in /proc.
	waitSleeping(t, f)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want Canceled", err)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("worker group %d survived cancellation", pid)
	}
	if got := string(f.mustInvoke(t, w, `"again"`).Output); got != `"again"` {
		t.Fatalf("after cancel: %s", got)
	}
}

// Rule: TERM first, "then KILL after the grace".
func TestHandlerIgnoringTermIsKilled(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := w.Invoke(ctx, f.invocation("stubborn", `"ignore_term_and_sleep"`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want DeadlineExceeded", err)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("worker %d that ignores SIGTERM survived", pid)
	}
}

func TestInvokeWithDoneContext(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Invoke(ctx, f.invocation("late", `"pid"`)); !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want Canceled", err)
	}
	if got := f.pidOf(t, w); got != pid {
		t.Fatalf("an already-cancelled invocation replaced the worker (%d → %d)", pid, got)
	}
}

// Rule: "a worker that dies DURING an invocation ⇒ error wrapping
// functionruntime.ErrWorkerCrashed".
func TestCrashDuringInvocation(t *testing.T) {
	for _, event := range []string{`"crash"`, `"sigkill"`} {
		f, w := lifecycleFixture(t)
		pid := f.pidOf(t, w)
		_, err := f.invoke(t, w, event)
		if !errors.Is(err, functionruntime.ErrWorkerCrashed) {
			t.Fatalf("%s: error = %v, want ErrWorkerCrashed", event, err)
		}
		if event == `"crash"` && !strings.Contains(err.Error(), "exit status 3") {
			t.Fatalf("crash error %q does not say how the worker ended", err)
		}
		if pid2 := f.pidOf(t, w); pid2 == pid {
			t.Fatalf("%s: dead worker reused", event)
		}
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
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	if err := os.WriteFile(filepath.Join(f.dir, "h.py"), []byte("def lifecycle(:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	proctest.Eventually(t, 5*time.Second, "worker dead", func() bool { return proctest.ProcessDead(pid) })
	_, err := f.invoke(t, w, `"pid"`)
	if !errors.Is(err, functionruntime.ErrWorkerFailed) || !strings.Contains(err.Error(), "SyntaxError") {
		t.Fatalf("error = %v, want ErrWorkerFailed naming the SyntaxError", err)
	}
}

// Rule: "A handler that forks a background child and returns must not hang
// the invocation ... and the child is killed when the worker's group is
// killed at Close". Rule: "no orphans (... syscall.Kill(-pgid, 0)
// returning ESRCH)".
func TestBackgroundChildDoesNotHangAndDiesAtClose(t *testing.T) {
	f, w := lifecycleFixture(t)
	pgid := f.pidOf(t, w)
	var children []int
	for _, ev := range []string{`"spawn"`, `"spawn_inherit"`, `"spawn_orphan"`} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := w.Invoke(ctx, f.invocation("bg", ev))
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		child, _ := strconv.Atoi(string(res.Output))
		if proctest.ProcessDead(child) {
			t.Fatalf("%s: background child %d is not running", ev, child)
		}
		if g, _ := unix.Getpgid(child); g != pgid {
			t.Fatalf("%s: child %d is in group %d, want the worker's %d", ev, child, g, pgid)
		}
		// The protocol pipes never reach a handler's children, even when
		// it asks to inherit every descriptor.
		if pipes, err := proctest.ExtraPipes(child); err != nil || len(pipes) > 0 {
			t.Fatalf("%s: child %d holds pipes %v (%v), want none beyond stdin/stdout/stderr", ev, child, pipes, err)
		}
		children = append(children, child)
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
		t.Fatalf("process group %d not empty after Close: kill(-pgid, 0) did not return ESRCH", pgid)
	}
}

func TestCloseDuringInvocationAndAfter(t *testing.T) {
	f, w := lifecycleFixture(t)
	pid := f.pidOf(t, w)
	done := make(chan error, 1)
	go func() {
		_, err := f.invoke(t, w, `{"sleep": 60}`)
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
	if _, err := f.invoke(t, w, `"pid"`); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Invoke after Close = %v, want 'closed'", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Rule: workers "die with the server (Pdeathsig SIGKILL; note Pdeathsig is
// tied to the OS thread that forked)". A goroutine that starts a worker
// from a locked thread and exits tears that thread down; the worker must
// survive it.
func TestWorkerSurvivesExitOfStartingThread(t *testing.T) {
	f := newFixture(t, "h.lifecycle", map[string]string{"h.py": handlerPy})
	type started struct {
		w   functionruntime.Worker
		tid int
		err error
	}
	ch := make(chan started, 1)
	var s started
	for s.w == nil && s.err == nil {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			if unix.Gettid() == os.Getpid() {
				// The main thread is wedged, not torn down; try another.
				runtime.UnlockOSThread()
				ch <- started{}
				return
			}
			w, err := f.a.Start(context.Background(), f.spec)
			ch <- started{w, unix.Gettid(), err}
		}()
		s = <-ch
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() { _ = s.w.Close() })
	proctest.Eventually(t, 10*time.Second, "starting thread exited", func() bool {
		_, err := os.Stat("/proc/self/task/" + strconv.Itoa(s.tid))
		return os.IsNotExist(err)
	})
	// Had the worker been forked on the dead thread, Pdeathsig would have
	// killed it and this invocation would crash.
	pid := f.pidOf(t, s.w)
	if got := f.pidOf(t, s.w); got != pid {
		t.Fatalf("worker changed from %d to %d", pid, got)
	}
}

// Start honours its context: an import that hangs is killed with its group.
func TestStartHonoursContext(t *testing.T) {
	f := newFixture(t, "slow.handle", map[string]string{
		"slow.py": "import os, time\nopen('pid.tmp', 'w').write(str(os.getpid())); os.rename('pid.tmp', 'pid')\ntime.sleep(60)\ndef handle(e): pass\n",
	})
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
