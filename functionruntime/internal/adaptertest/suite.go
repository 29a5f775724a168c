package adaptertest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"golang.org/x/sys/unix"
)

// Run runs the conformance suite against a, one subtest per behaviour.
// The quotes in the comments are rules of the contract.
func Run(t *testing.T, a *Adapter) {
	for _, st := range []struct {
		name string
		fn   func(*testing.T, *Adapter)
	}{
		{"Kind", testKind},
		{"ValidateHandler", testValidateHandler},
		{"StartFailures", testStartFailures},
		{"StartRejectsBadWorkingDir", testStartRejectsBadWorkingDir},
		{"StartMissingInterpreter", testStartMissingInterpreter},
		{"SymlinkInsideWorkingDirIsAllowed", testSymlinkInside},
		{"EnvironmentIsIsolated", testEnvironmentIsIsolated},
		{"InvocationEnvironment", testInvocationEnvironment},
		{"WorkingDirectory", testWorkingDirectory},
		{"WorkingDirectoryAfterLoad", testWorkingDirectoryAfterLoad},
		{"Failures", testFailures},
		{"OutputsFile", testOutputsFile},
		{"TimeoutKillsGroupAndNextInvokeRestarts", testTimeout},
		{"CancelKillsWorker", testCancel},
		{"HandlerIgnoringTermIsKilled", testIgnoringTerm},
		{"InvokeWithDoneContext", testInvokeWithDoneContext},
		{"CrashDuringInvocation", testCrash},
		{"KilledBetweenInvocationsRestarts", testKilledBetween},
		{"FailedRestartIsWorkerFailed", testFailedRestart},
		{"RestartRefusesAReplacedWorkingDir", testRestartRefusesReplacedDir},
		{"BackgroundChildDoesNotHangAndDiesAtClose", testBackgroundChild},
		{"CloseDuringInvocationAndAfter", testClose},
		{"WorkerSurvivesExitOfStartingThread", testStartingThreadExit},
		{"StartHonoursContext", testStartHonoursContext},
		{"HandlerOutputGoesToInvocationLogs", testLogs},
		{"MegabyteLogLineIsTruncated", testBigLine},
		{"CommandLineIsShort", testCommandLineIsShort},
		{"WorkerDiesWithServer", testWorkerDiesWithServer},
		{"ServerKillLeavesNoHandlerProcess", testServerKill},
	} {
		t.Run(st.name, func(t *testing.T) { st.fn(t, a) })
	}
}

func testKind(t *testing.T, a *Adapter) {
	if got := a.New(Options{}).Kind(); got != a.Kind {
		t.Fatalf("Kind() = %q, want %s", got, a.Kind)
	}
}

// Rule: ValidateHandler accepts the adapter's handler syntax only: nothing
// that could name a path outside the working directory or carry code.
func testValidateHandler(t *testing.T, a *Adapter) {
	ad := a.New(Options{})
	for _, h := range a.ValidHandlers {
		if err := ad.ValidateHandler(h); err != nil {
			t.Errorf("ValidateHandler(%q) = %v, want nil", h, err)
		}
	}
	for _, h := range a.InvalidHandlers {
		if err := ad.ValidateHandler(h); err == nil {
			t.Errorf("ValidateHandler(%q) = nil, want an error", h)
		}
	}
}

// Rule: a broken handler fails Start "with an error whose text is a useful
// fatal_error", naming the handler.
func testStartFailures(t *testing.T, a *Adapter) {
	for _, tc := range a.StartFailures {
		t.Run(tc.Name, func(t *testing.T) {
			f := a.NewFixture(t, tc.Handler.Handler, tc.Files)
			if tc.Setup != nil {
				tc.Setup(t, f.Dir)
			}
			err := f.StartErr(t)
			for _, w := range append(tc.Want, tc.Handler.Handler) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Start error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func testStartRejectsBadWorkingDir(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.Lifecycle.Handler, a.Lifecycle.Files)
	f.Spec.Dir = "relative/dir"
	if err := f.StartErr(t); !strings.Contains(err.Error(), "not absolute") {
		t.Fatalf("Start error = %v, want 'not absolute'", err)
	}
	f.Spec.Dir = f.Dir + "/missing"
	if err := f.StartErr(t); !strings.Contains(err.Error(), "working directory") {
		t.Fatalf("Start error = %v, want a working directory error", err)
	}
}

// A missing interpreter is reported by Start, naming it.
func testStartMissingInterpreter(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.Lifecycle.Handler, a.Lifecycle.Files)
	missing := "no-such-" + a.Kind + "-interpreter"
	f.A = a.New(Options{Interpreter: missing})
	if err := f.StartErr(t); !strings.Contains(err.Error(), missing) {
		t.Fatalf("Start error = %v, want it to name the interpreter", err)
	}
}

// A symlink that stays inside the working directory is fine.
func testSymlinkInside(t *testing.T, a *Adapter) {
	c := a.SymlinkInside
	f := a.NewFixture(t, c.Handler.Handler, c.Files)
	if c.Setup != nil {
		c.Setup(t, f.Dir)
	}
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, c.Input).Output); got != c.Output {
		t.Fatalf("output = %q, want %q", got, c.Output)
	}
}

// Rule: workers get "the registration env plus a minimal base (PATH, LANG,
// HOME)" and "NEVER the server's own environment". Each base variable is
// seen once at its default and once overridden by the registration.
func testEnvironmentIsIsolated(t *testing.T, a *Adapter) {
	t.Setenv("FNBRIDGE_TEST_SECRET", "hunter2")
	for k, v := range a.Env.ServerVars {
		t.Setenv(k, v)
	}
	for _, reg := range []map[string]string{
		{"GREETING": "Hello world", "LANG": "en_US.UTF-8"},
		{"GREETING": "Hello world", "PATH": "/bin:/usr/bin"},
	} {
		f := a.NewFixture(t, a.Env.Handler.Handler, a.Env.Files)
		f.Spec.Env = reg
		w := f.Start(t)
		env, err := a.Env.Parse(f.MustInvoke(t, w, a.Text("")).Output)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := env["FNBRIDGE_TEST_SECRET"]; ok {
			t.Fatalf("handler sees the server's secret variable: %v", env)
		}
		if env[proc.OutputsEnv] == "" {
			t.Fatalf("%s not set", proc.OutputsEnv)
		}
		delete(env, proc.OutputsEnv)
		for _, k := range a.Env.Added {
			delete(env, k)
		}
		want := map[string]string{"PATH": proc.DefaultPath, "LANG": proc.DefaultLang, "HOME": f.Dir}
		for k, v := range reg {
			want[k] = v
		}
		if !reflect.DeepEqual(env, want) {
			t.Fatalf("handler environment = %v, want %v", env, want)
		}
	}
}

// Rule (fnbridge, docs/ARCHITECTURE.md): the per-invocation environment
// (InvokeFunction metadata fnbridge-env-bin, Invocation.Env) is exported
// for that invocation only, to the function and the processes it starts;
// a value is data, never evaluated; afterwards a name the registration
// set has the registration's value again.
func testInvocationEnvironment(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.Env.Handler.Handler, a.Env.Files)
	f.Spec.Env = map[string]string{"TRACESTATE": "from=registration"}
	w := f.Start(t)
	invoke := func(env map[string]string) map[string]string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		inv := f.Invocation("inv-1", []byte(a.Text("")))
		inv.Env = env
		res, err := w.Invoke(ctx, inv)
		if err != nil {
			t.Fatalf("Invoke with env %q: %v", env, err)
		}
		got, err := a.Env.Parse(res.Output)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	set := map[string]string{
		functionruntime.EnvKey:         `user 42 $(touch pwned) "ü" ` + "`touch pwned`",
		functionruntime.EnvTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		functionruntime.EnvTracestate:  "vendor=per-invocation",
	}
	for round := 0; round < 2; round++ {
		got := invoke(set)
		for k, v := range set {
			if got[k] != v {
				t.Fatalf("round %d: %s = %q, want %q (environment %v)", round, k, got[k], v, got)
			}
		}
		got = invoke(nil)
		for _, k := range []string{functionruntime.EnvKey, functionruntime.EnvTraceparent} {
			if v, ok := got[k]; ok {
				t.Fatalf("round %d: the next invocation sees %s=%q, want it unset", round, k, v)
			}
		}
		if got[functionruntime.EnvTracestate] != "from=registration" {
			t.Fatalf("round %d: after the invocation TRACESTATE = %q, want the registration's value back", round, got[functionruntime.EnvTracestate])
		}
	}
	// An empty value is a value: a keyed invocation's key may be "".
	if got := invoke(map[string]string{functionruntime.EnvKey: ""}); !hasEnv(got, functionruntime.EnvKey) {
		t.Fatalf("an empty %s is not set: %v", functionruntime.EnvKey, got)
	}
	if _, err := os.Stat(filepath.Join(f.Dir, "pwned")); err == nil {
		t.Fatal("a value was evaluated as code")
	}
}

func hasEnv(env map[string]string, k string) bool {
	_, ok := env[k]
	return ok
}

// Rule: "Workers run with cwd = the registered working directory", and
// "Both adapters operate beneath the registered working directory": every
// invocation starts there, whatever directory the last one moved to.
func testWorkingDirectory(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.Cwd.Handler, a.Cwd.Files)
	w := f.Start(t)
	for i, input := range []string{"", "/", ""} {
		if got, want := string(f.MustInvoke(t, w, a.Text(input)).Output), a.WantCwd(f.Dir); got != want {
			t.Fatalf("invocation %d: output = %s, want %s", i+1, got, want)
		}
	}
}

// Rule: "Both adapters operate beneath the registered working directory":
// the first invocation of a worker too (after a restart as well, which
// starts the worker the same way), when the handler's file changed
// directory as it was loaded (a Python import, a Bash source).
func testWorkingDirectoryAfterLoad(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.CwdAtLoad.Handler, a.CwdAtLoad.Files)
	w := f.Start(t)
	for i := 1; i <= 2; i++ {
		if got, want := string(f.MustInvoke(t, w, a.Text("")).Output), a.WantCwd(f.Dir); got != want {
			t.Fatalf("invocation %d: output = %s, want %s", i, got, want)
		}
	}
}

// Rule: a failing handler fails that invocation with a HandlerError,
// terminal (do not retry) only when the handler asks for it; the worker
// survives and serves the next call.
func testFailures(t *testing.T, a *Adapter) {
	for _, tc := range a.Failures {
		t.Run(tc.Name, func(t *testing.T) {
			f := a.NewFixture(t, tc.Handler.Handler, tc.Files)
			w := f.Start(t)
			for i, c := range tc.Calls {
				_, err := f.Invoke(t, w, c.Input)
				var he *functionruntime.HandlerError
				if !errors.As(err, &he) {
					t.Fatalf("call %d: error = %v, want a HandlerError", i, err)
				}
				if *he != c.Want {
					t.Fatalf("call %d: HandlerError = %+v, want %+v", i, *he, c.Want)
				}
			}
		})
	}
}

// Rule: "Outputs: file named by env FNBRIDGE_OUTPUTS with key=value lines
// (fresh empty file per invocation; parse; bad lines ⇒ clear error)".
func testOutputsFile(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.Outputs.Handler, a.Outputs.Files)
	w := f.Start(t)
	res := f.MustInvoke(t, w, a.Text("order_id=A-17\nurl=https://x/?a=b\r\n\nstatus=old\nstatus=new\neq=a=b\n"))
	want := map[string]string{"order_id": "A-17", "url": "https://x/?a=b", "status": "new", "eq": "a=b"}
	if !reflect.DeepEqual(res.Outputs, want) {
		t.Fatalf("outputs = %v, want %v", res.Outputs, want)
	}
	if string(res.Output) != a.OutputsResult {
		t.Fatalf("output = %q, want %q", res.Output, a.OutputsResult)
	}
	if res := f.MustInvoke(t, w, a.Text("")); res.Outputs != nil {
		t.Fatalf("outputs of a later invocation = %v, want none (fresh file)", res.Outputs)
	}
	// How long a key may be is the server's OutputLimits alone (63 bytes
	// by default, OUTPUTS_INVALID): the adapter had a bound of its own,
	// 256, that contradicted it with another message and another class.
	long := strings.Repeat("k", 300)
	if res := f.MustInvoke(t, w, a.Text(long+"=v\n")); res.Outputs[long] != "v" {
		t.Fatalf("outputs = %v, want the 300-byte key passed on for the server to bound", res.Outputs)
	}
	for _, tc := range []struct{ in, want string }{
		{"ok=1\njust text\n", "FNBRIDGE_OUTPUTS line 2: missing '='"},
		{"no equals sign\n", "line 1: missing '='"},
		{"=v\n", "empty output key"},
		{"9lives=v\n", `invalid output key "9lives"`},
		{"bad key=1\n", `invalid output key "bad key"`},
	} {
		_, err := f.Invoke(t, w, a.Text(tc.in))
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.Type != "InvalidOutputs" || !he.Terminal || !strings.Contains(he.Message, tc.want) {
			t.Fatalf("outputs %q: error = %v, want a terminal InvalidOutputs %q (the server's OUTPUTS_INVALID is terminal too)", tc.in, err, tc.want)
		}
	}
}

// Rule (fnbridge): a worker's command line, which ps and audit logs show
// to every user of the host, names its handler and stays short: the
// bootstrap (tens of KiB, near the kernel's 128 KiB bound on one argument)
// is read from a file, not passed on it.
func testCommandLineIsShort(t *testing.T, a *Adapter) {
	f, w := lifecycle(t, a)
	pid := f.PidOf(t, w)
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	_, function, _ := strings.Cut(a.Lifecycle.Handler, ".")
	if len(cmdline) > 1024 || !bytes.Contains(cmdline, []byte("\x00"+function+"\x00")) {
		t.Fatalf("worker command line is %d bytes (want at most 1024, with the function %q as an argument): %.300q",
			len(cmdline), function, cmdline)
	}
}

func lifecycle(t *testing.T, a *Adapter) (*Fixture, functionruntime.Worker) {
	f := a.NewFixture(t, a.Lifecycle.Handler, a.Lifecycle.Files)
	return f, f.Start(t)
}

// waitSleeping waits until the lifecycle handler's "sleep" event runs.
func waitSleeping(t *testing.T, f *Fixture) {
	t.Helper()
	proctest.Eventually(t, 10*time.Second, "handler running", func() bool {
		_, err := os.Stat(filepath.Join(f.Dir, "sleeping"))
		return err == nil
	})
}

// cancelWhenSleeping invokes event (a lifecycle event that creates
// "sleeping") as invocation id, cancels it once the file is there, and
// wants the invocation to end with Canceled.
func cancelWhenSleeping(t *testing.T, f *Fixture, w functionruntime.Worker, id, event string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := w.Invoke(ctx, f.Invocation(id, []byte(event)))
		done <- err
	}()
	waitSleeping(t, f)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want Canceled", err)
	}
}

// Rule: "cancellation and timeouts (ctx done) kill the worker's whole
// process group ..., return ctx.Err() ..., and the next Invoke
// transparently starts a fresh worker (re-import/re-source)".
func testTimeout(t *testing.T, a *Adapter) {
	f, w := lifecycle(t, a)
	pid := f.PidOf(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := w.Invoke(ctx, f.Invocation("slow", []byte(a.Text("sleep"))))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("Invoke returned after %v: the timeout did not stop the handler", elapsed)
	}
	if !proctest.GroupGone(pid) {
		t.Fatalf("process group %d still exists after the timeout", pid)
	}
	if pid2 := f.PidOf(t, w); pid2 == pid {
		t.Fatalf("next invocation ran in the killed worker %d", pid)
	}
	// The fresh worker loaded the file again.
	if n := len(f.Logs.Records(a.LoadLine)); n != 2 {
		t.Fatalf("file loaded %d times, want 2", n)
	}
}

func testCancel(t *testing.T, a *Adapter) {
	f, w := lifecycle(t, a)
	pid := f.PidOf(t, w)
	cancelWhenSleeping(t, f, w, "cancelled", a.Text("sleep"))
	if !proctest.GroupGone(pid) {
		t.Fatalf("worker group %d survived cancellation", pid)
	}
	if got := string(f.MustInvoke(t, w, a.Text("again")).Output); got != a.Text("again") {
		t.Fatalf("after cancel: %q", got)
	}
}

// Rule: TERM first, "then KILL after the grace". Invoke returns only
// once the group is gone, so a retry of the invocation never runs beside
// the attempt it replaces (the README's error classes say so).
func testIgnoringTerm(t *testing.T, a *Adapter) {
	f, w := lifecycle(t, a)
	pid := f.PidOf(t, w)
	// Cancelled once SIGTERM is ignored (a fixed timeout could end the
	// invocation before, and TERM alone would do).
	cancelWhenSleeping(t, f, w, "stubborn", a.Text("ignore_term"))
	if !proctest.GroupGone(pid) {
		t.Fatalf("worker group %d that ignores SIGTERM survived", pid)
	}
}

// An invocation whose context is already done fails without touching the
// worker.
func testInvokeWithDoneContext(t *testing.T, a *Adapter) {
	f, w := lifecycle(t, a)
	pid := f.PidOf(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Invoke(ctx, f.Invocation("late", []byte(a.Text("pid")))); !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want Canceled", err)
	}
	if got := f.PidOf(t, w); got != pid {
		t.Fatalf("an already-cancelled invocation replaced the worker (%d → %d)", pid, got)
	}
}

// Rule: "a worker that dies DURING an invocation ⇒ error wrapping
// functionruntime.ErrWorkerCrashed".
func testCrash(t *testing.T, a *Adapter) {
	for _, c := range a.Crashes {
		t.Run(c.Event, func(t *testing.T) {
			f, w := lifecycle(t, a)
			pid := f.PidOf(t, w)
			_, err := f.Invoke(t, w, a.Text(c.Event))
			if !errors.Is(err, functionruntime.ErrWorkerCrashed) || !strings.Contains(err.Error(), c.Want) {
				t.Fatalf("error = %v, want ErrWorkerCrashed saying %q", err, c.Want)
			}
			if pid2 := f.PidOf(t, w); pid2 == pid {
				t.Fatalf("dead worker reused")
			}
		})
	}
}

// Rule: "A worker that dies between invocations (or is killed externally)
// is restarted on the next Invoke".
func testKilledBetween(t *testing.T, a *Adapter) {
	f, w := lifecycle(t, a)
	pid := f.PidOf(t, w)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 5*time.Second, "worker dead", func() bool { return proctest.ProcessDead(pid) })
	if pid2 := f.PidOf(t, w); pid2 == pid {
		t.Fatalf("invocation went to the killed worker")
	}
}

// Rule: "a restart that fails (e.g. file deleted, syntax broken meanwhile)
// ⇒ error wrapping functionruntime.ErrWorkerFailed".
func testFailedRestart(t *testing.T, a *Adapter) {
	for _, tc := range a.BreakRestart {
		t.Run(tc.Name, func(t *testing.T) {
			f, w := lifecycle(t, a)
			pid := f.PidOf(t, w)
			if err := tc.Break(f.Dir); err != nil {
				t.Fatal(err)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			proctest.Eventually(t, 5*time.Second, "worker dead", func() bool { return proctest.ProcessDead(pid) })
			_, err := f.Invoke(t, w, a.Text("pid"))
			if !errors.Is(err, functionruntime.ErrWorkerFailed) || !strings.Contains(err.Error(), tc.Want) {
				t.Fatalf("error = %v, want ErrWorkerFailed containing %q", err, tc.Want)
			}
		})
	}
}

// A worker restarts only in the directory the registration was accepted
// in (WorkerSpec.CheckDir): one replaced since by a symlink to another
// directory, with the same handler there, fails the restart as
// ErrWorkerFailed, and no code runs in the other directory. An allowed
// root is checked at registration only; this keeps a restart from moving.
func testRestartRefusesReplacedDir(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.Lifecycle.Handler, a.Lifecycle.Files)
	fi, err := os.Stat(f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	f.Spec.DirInfo = fi
	w := f.Start(t)
	pid := f.PidOf(t, w)
	other := t.TempDir()
	WriteFiles(t, other, a.Lifecycle.Files)
	if err := os.Rename(f.Dir, f.Dir+".orig"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, f.Dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(f.Dir); _ = os.Rename(f.Dir+".orig", f.Dir) })
	_ = syscall.Kill(pid, syscall.SIGKILL)
	proctest.Eventually(t, 5*time.Second, "worker dead", func() bool { return proctest.ProcessDead(pid) })
	_, err = f.Invoke(t, w, a.Text("pid"))
	if want := "is no longer the directory registered there"; !errors.Is(err, functionruntime.ErrWorkerFailed) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want ErrWorkerFailed containing %q", err, want)
	}
	if procs, _ := filepath.Glob(filepath.Join(other, "*")); len(procs) != len(a.Lifecycle.Files) {
		t.Errorf("the other directory holds %v: something ran there", procs)
	}
}

// Rule: "A handler that forks a background child and returns must not hang
// the invocation ... and the child is killed when the worker's group is
// killed at Close"; "no orphans (... syscall.Kill(-pgid, 0) returning
// ESRCH)".
func testBackgroundChild(t *testing.T, a *Adapter) {
	f, w := lifecycle(t, a)
	pgid := f.PidOf(t, w)
	var children []int
	for _, ev := range a.Spawns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := w.Invoke(ctx, f.Invocation("bg", []byte(a.Text(ev))))
		cancel()
		if err != nil {
			t.Fatalf("%s: %v (a background child holding stdout must not hang the invocation)", ev, err)
		}
		child, _ := strconv.Atoi(string(res.Output))
		if proctest.ProcessDead(child) {
			t.Fatalf("%s: background child %d is not running", ev, child)
		}
		if g, _ := unix.Getpgid(child); g != pgid {
			t.Fatalf("%s: child %d is in group %d, want the worker's %d", ev, child, g, pgid)
		}
		// The protocol pipes never reach a program a handler's children
		// run, even when it asks to inherit every descriptor. (Once it
		// runs: a child forked by an inline bash invocation holds the
		// worker's descriptors until it execs, as its package doc says.)
		proctest.Eventually(t, 5*time.Second, "background child runs sleep", func() bool {
			comm, _ := os.ReadFile("/proc/" + strconv.Itoa(child) + "/comm")
			return strings.TrimSpace(string(comm)) == "sleep"
		})
		if pipes, err := proctest.ExtraPipes(child); err != nil || len(pipes) > 0 {
			t.Fatalf("%s: child %d holds pipes %v (%v), want none beyond stdin/stdout/stderr", ev, child, pipes, err)
		}
		children = append(children, child)
	}
	// The worker still serves invocations with the children around.
	if got := f.PidOf(t, w); got != pgid {
		t.Fatalf("worker changed from %d to %d", pgid, got)
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

// Close ends an invocation in flight, kills the group, refuses later
// invocations and may be called again.
func testClose(t *testing.T, a *Adapter) {
	f, w := lifecycle(t, a)
	pid := f.PidOf(t, w)
	done := make(chan error, 1)
	go func() {
		_, err := f.Invoke(t, w, a.Text("sleep"))
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
	if _, err := f.Invoke(t, w, a.Text("pid")); err == nil || !strings.Contains(err.Error(), "closed") {
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
func testStartingThreadExit(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.Lifecycle.Handler, a.Lifecycle.Files)
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
			w, err := f.A.Start(context.Background(), f.Spec)
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
	pid := f.PidOf(t, s.w)
	if got := f.PidOf(t, s.w); got != pid {
		t.Fatalf("worker changed from %d to %d", pid, got)
	}
}

// Start honours its context: a handler that hangs while loading is killed
// with its group.
func testStartHonoursContext(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.SlowStart.Handler, a.SlowStart.Files)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		w   functionruntime.Worker
		err error
	}
	done := make(chan result, 1)
	go func() {
		w, err := f.A.Start(ctx, f.Spec)
		done <- result{w, err}
	}()
	var pid int
	proctest.Eventually(t, 30*time.Second, "handler loading", func() bool {
		b, err := os.ReadFile(filepath.Join(f.Dir, "pid"))
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

// Rule: what a handler prints goes to the logs, never to the output,
// captured "line by line" into the invocation's logger: "every line
// carries run_uid and invocation_id". Lines written while loading go to
// the registration's logger.
func testLogs(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.Logs.Handler, a.Logs.Files)
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, a.Text("")).Output); got != a.LogsResult {
		t.Fatalf("output = %q, want %q: printed text leaked into the output", got, a.LogsResult)
	}
	// No waiting: Invoke returns only after the invocation's lines were logged.
	for i, msg := range a.Lines {
		recs := f.Logs.Records(msg)
		if len(recs) != 1 {
			t.Fatalf("%d records for %q, want 1; handler lines: %q", len(recs), msg, f.Logs.Messages())
		}
		if r := recs[0]; r["message"] != msg || r["run_uid"] != "run-1" || r["invocation_id"] != "inv-1" || r["source"] != "handler" {
			t.Fatalf("record for %q = %v", msg, r)
		}
		if r := recs[0]; i < len(a.Levels) && r["level"] != a.Levels[i] {
			t.Errorf("record for %q has level %v, want %s", msg, r["level"], a.Levels[i])
		}
	}
	for _, msg := range a.LoadLines {
		var found []map[string]any
		for _, r := range f.Logs.Records(msg) {
			if r["message"] == msg {
				found = append(found, r)
			}
		}
		if len(found) != 1 || found[0]["run_uid"] != "run-1" || found[0]["invocation_id"] != nil || found[0]["source"] != "handler" {
			t.Fatalf("load-time line %q = %v, want one record on the registration logger, without invocation_id", msg, found)
		}
	}
}

// Rule: "A handler that prints megabytes to stderr in one line must not
// block or blow memory"; "long lines are split/truncated to a max".
func testBigLine(t *testing.T, a *Adapter) {
	f := a.NewFixture(t, a.BigLine.Handler, a.BigLine.Files)
	w := f.Start(t)
	const size = 8 << 20
	if got := string(f.MustInvoke(t, w, a.BigLineInput(size)).Output); got != a.BigLineResult {
		t.Fatalf("output = %q, want %q", got, a.BigLineResult)
	}
	recs := f.Logs.Records("xxxx")
	if len(recs) != 1 {
		t.Fatalf("%d records for the long line, want 1", len(recs))
	}
	msg, _ := recs[0]["message"].(string)
	if len(msg) != proc.DefaultMaxLogLine || strings.Trim(msg, "x") != "" {
		t.Fatalf("logged %d bytes, want the first %d", len(msg), proc.DefaultMaxLogLine)
	}
	if got := recs[0]["truncated_bytes"]; got != float64(size-proc.DefaultMaxLogLine) {
		t.Fatalf("truncated_bytes = %v, want %d", got, size-proc.DefaultMaxLogLine)
	}
	if recs[0]["invocation_id"] != "inv-1" {
		t.Fatalf("long line not attributed to the invocation: %v", recs[0]["invocation_id"])
	}
}
