package python_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc/steptest"
	"github.com/fnbridge/fnbridge/internal/procstat"
)

// stepsPy is the test module steps.py. mark(name) appends to the file
// "ran-<name>" in the working directory, so a test can tell which step
// closures ran.
const stepsPy = `
import contextvars, json, os, signal, subprocess, threading
import fnbridge

def mark(name):
    with open("ran-" + name, "a") as f:
        f.write("x")

def provision(event):
    def step(i):
        mark("step%d" % i)
        if i == 3 and os.path.exists("fail-once"):
            os.remove("fail-once")
            raise ConnectionError("flaky network")
        return {"step": i}
    before = fnbridge.invocation_id()  # outside steps: runs on every attempt
    return [fnbridge.run("step%d" % i, step, i) for i in range(1, 5)] + [before]

def terminal_step(event):
    def fail(code):
        mark("terminal")
        raise fnbridge.TerminalError("no such plan", code=code)
    try:
        fnbridge.run("plan", fail, 404)
    except fnbridge.TerminalError as e:
        if event == "catch":
            return [type(e).__name__, e.code, e.message]
        raise

def unserializable_step(event):
    try:
        fnbridge.run("bad", lambda: {1, 2})
    except fnbridge.TerminalError as e:
        return [e.code, e.message]

def nest(d):
    v = 1
    for _ in range(d):
        v = [v]
    return v

def depth(v):
    n = 0
    while isinstance(v, list):
        v, n = v[0], n + 1
    return n

def deep_steps(event):
    # The deepest list json encodes here, then steps returning lists up
    # to that deep: each is journaled and read back (first run and
    # replay alike), or refused terminally; never an error that fails
    # every attempt.
    lo, hi = 1, 2
    while True:
        try:
            json.dumps(nest(hi))
        except RecursionError:
            break
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            json.dumps(nest(mid))
            lo = mid
        except RecursionError:
            hi = mid
    out = []
    for d in range(lo - 6, lo + 1):
        try:
            v = fnbridge.run("deep%d" % (d - lo), nest, d)
            out.append("ok" if depth(v) == d else "changed")
        except fnbridge.TerminalError as e:
            out.append("refused" if "RecursionError" in e.message else e.message)
    return out

def huge_int_call(event):
    return fnbridge.call("Big", "number") == 10 ** 5000

def step_failure_swallowed(event):
    def boom():
        raise ValueError("boom")
    try:
        fnbridge.run("boom", boom)
    except ValueError:
        pass
    try:
        fnbridge.sleep(0)
    except Exception:
        mark("swallowed")
    return "must not be the result"

def round_trip(event):
    out = {"id": fnbridge.invocation_id(), "random": [fnbridge.random(), fnbridge.random()],
           "uuid": str(fnbridge.uuid4())}
    out["sleep"] = fnbridge.sleep(1.5)
    out["call"] = fnbridge.call("Greeter", "greet", {"name": "you"}, key="k1", idempotency_key="i1",
                                headers={"h": "v"})
    try:
        fnbridge.call("Fail", "now")
    except fnbridge.TerminalError as e:
        out["call_failure"] = [e.code, e.message]
    out["send"] = fnbridge.send("Mailer", "mail", [1, 2], key="k2", delay=2)
    a = fnbridge.call_async("A", "a", "first")
    b = fnbridge.call_async("B", "b", "second")
    t = fnbridge.sleep_async(0.25)
    out["all"] = fnbridge.wait_all(b, t, a)
    out["later"] = [a.result(), b.result()]
    return out

def wait_then_suspend(event):
    timer = fnbridge.sleep_async(60)
    reply = fnbridge.call_async("Svc", "h", {"x": 1})
    first = fnbridge.wait_any(timer, reply)
    mark("first-reply" if first is reply else "first-timer")
    result = {"reply": reply.result()}
    try:
        fnbridge.wait_all(timer)  # suspends while the timer is pending
    except Exception:
        mark("swallowed")
    mark("after")
    result["timer"] = timer.result()
    return result

def suspend_ignored(event):
    try:
        fnbridge.sleep(60)
    except BaseException as e:
        again = None
        try:
            fnbridge.invocation_id()
        except fnbridge.Suspended as s:
            again = str(s)
        mark("ignored")
        return again

def threads(event):
    errors = []
    def other():
        try:
            fnbridge.sleep(0)
        except RuntimeError as e:
            errors.append(str(e))
    def step():
        t = threading.Thread(target=contextvars.copy_context().run, args=(other,))
        t.start()
        t.join()
        try:
            fnbridge.random()
        except RuntimeError as e:
            errors.append(str(e))
        return "stepped"
    value = fnbridge.run("outer", step)
    plain = []
    t = threading.Thread(target=lambda: plain.append(catch(fnbridge.invocation_id)))
    t.start()
    t.join()
    return {"value": value, "errors": errors, "plain_thread": plain}

def start_bg_step():
    # A step run in a background thread, executing (its worker's pid in
    # bg.pid) when this returns.
    def upload():
        with open("bg.pid", "w") as f:
            f.write(str(os.getpid()))
        threading.Event().wait(60)
        return "uploaded"
    t = threading.Thread(target=contextvars.copy_context().run, args=(fnbridge.run, "upload", upload), daemon=True)
    t.start()
    while not os.path.exists("bg.pid"):
        threading.Event().wait(0.01)

def bg_fail(event):
    # The function fails beside a background step: the attempt is over,
    # and the step must not run on.
    start_bg_step()
    raise ValueError("failed beside a background step")

def bg_ok(event):
    # The function returns beside one: the attempt is over, and the step
    # must not run on in the worker that serves the next invocations.
    start_bg_step()
    return "accepted"

def bg_ok_bad_output(event):
    # bg_ok, whose outputs then fail the invocation.
    bg_ok(event)
    fnbridge.set_output("k", "\ud800")
    return "accepted"

def id_in_forked_step(event):
    # A step's function forks (multiprocessing's default on Linux before
    # Python 3.14) and the child asks for the invocation id while the
    # step's start, sent ahead, is unanswered on the parent's connection.
    def step():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                signal.alarm(10)
                out = fnbridge.invocation_id()
            except BaseException as e:
                out = "%s: %s" % (type(e).__name__, e)
            os.write(w, out.encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            got = f.read()
        os.waitpid(pid, 0)
        return got
    return fnbridge.run("charge", step)

def after_env(event):
    # What a process a step's function starts finds: the number of the
    # step's start sent ahead, and which process sent it.
    before = os.environ.get("FNBRIDGE_CONTEXT_AFTER")
    seen = fnbridge.run("a", lambda: subprocess.run(["sh", "-c", 'printf %s "$FNBRIDGE_CONTEXT_AFTER"'],
                                                    capture_output=True, text=True).stdout)
    return [before, seen, "%d:1" % os.getpid()]

def fail_plain(event):
    fnbridge.run("a", lambda: "a")
    with open("worker.pids", "a") as f:
        f.write("%d\n" % os.getpid())
    raise ValueError("plain failure")

def catch(fn, *args):
    try:
        fn(*args)
    except RuntimeError as e:
        return str(e)
    return "no error"

kept = []

def future_kept(event):
    # A settled future kept in a global by an earlier invocation.
    if not kept:
        f = fnbridge.call_async("Svc", "h", "old value")
        f.result()
        kept.append(f)
        return "kept"
    return catch(kept[0].result)

def conflict(event):
    return catch(fnbridge.invocation_id)

def function_mode(event):
    return [catch(fnbridge.run, "x", lambda: 1), catch(fnbridge.sleep, 1), os.environ.get("FNBRIDGE_CONTEXT")]

def env(event):
    child = subprocess.run(["sh", "-c", 'echo "$FNBRIDGE_CONTEXT $FNBRIDGE_CONTEXT_TOKEN"'],
                           capture_output=True, text=True).stdout.strip()
    return [os.environ.get("FNBRIDGE_CONTEXT"), os.environ.get("FNBRIDGE_CONTEXT_TOKEN"), child]

def env_key(event):
    child = subprocess.run(["sh", "-c", 'printf %s "${FNBRIDGE_KEY-unset}"'], capture_output=True, text=True).stdout
    return [os.environ.get("FNBRIDGE_CONTEXT"), os.environ.get("FNBRIDGE_KEY"), child]

def hold(event):
    fnbridge.run("hold", lambda: mark("hold"))

class _LazyMapping(dict):
    # json's C encoder calls items(): a lazy mapping whose load fails
    def items(self):
        raise LookupError("lazy load failed")

def escaped_step(event):
    if event == "call":
        return fnbridge.call("Svc", "h", {"x": 1})
    out = []
    try:
        fnbridge.run("a", lambda: _LazyMapping(x=1))
    except LookupError:
        out.append("a: LookupError")
    try:
        out.append(fnbridge.run("b", lambda: "B"))
    except Exception as e:
        out.append("b: %s: %s" % (type(e).__name__, e))
    return out

def live_after_replay(event):
    one = fnbridge.run("one", lambda: mark("one") or 1)
    if event == "fail":
        raise ConnectionError("the attempt fails after step one")
    two = fnbridge.run("two", lambda: mark("two") or 2)
    three = fnbridge.run("three", lambda: mark("three") or 3)
    return [one, two, three]

def guarded_hold(event):
    try:
        fnbridge.run("hold", lambda: mark("hold"))
    except fnbridge.TerminalError as e:
        return [e.code, e.message]

def big_values(event):
    # Answers larger than the worker's 64 KiB read buffer, then small ones.
    big = fnbridge.run("big", lambda: "\u00e9" * 100000 + "end")
    small = fnbridge.run("small", lambda: {"n": 1})
    return [len(big), big[-3:], small, fnbridge.run("bigger", lambda: ["x" * 70000, 2])[1]]

def encodings(event):
    loop = []
    loop.append(loop)
    out = [fnbridge.run("utf8", lambda: {"t": "h\u00e9llo \u2713", "f": 0.5, "l": (1, None, True)}),
           fnbridge.run("surrogate", lambda: "\ud800")]
    for name, bad in (("loop", loop), ("nan", float("nan")), ("set", {1})):
        try:
            fnbridge.run(name, lambda: bad)
        except fnbridge.TerminalError as e:
            out.append(e.message)
    return out

def context_socket(event):
    # The worker's sockets (the context connection is its only one) after
    # a context call and a step.
    fnbridge.invocation_id()
    fnbridge.run("s", lambda: event)
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink("/proc/self/fd/" + fd))
        except OSError:  # the directory's own descriptor, closed by now
            pass
    return sorted(l for l in links if l.startswith("socket:"))

def unreachable(event):
    return [catch(fnbridge.invocation_id), catch(fnbridge.random)]

class Deadline(Exception):
    pass

def interrupted(event):
    # A signal handler's exception cuts a context call short: the call's
    # answer must never be read as a later call's.
    import signal
    def on_alarm(signum, frame):
        raise Deadline("too slow")
    signal.signal(signal.SIGALRM, on_alarm)
    # Long enough for the call to be in flight when it fires, on a loaded
    # host too: the endpoint holds it until the worker hangs up.
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        fnbridge.run("held", lambda: "never")
    except Deadline:
        mark("deadline")
    later = catch(fnbridge.invocation_id)
    if "was interrupted by steps.Deadline" in later:
        mark("refused")
    return later

def terminal_code(event):
    import http
    codes = {"enum": http.HTTPStatus.NOT_FOUND, "huge": 2 ** 70, "bool": True, "zero": 0, "text": "404"}
    if event.startswith("step-"):
        def fail():
            raise fnbridge.TerminalError("in a step", code=codes[event[5:]])
        fnbridge.run("fail", fail)
    if event == "sdk":  # the Restate Python SDK's spelling
        e = fnbridge.TerminalError("no", status_code=http.HTTPStatus.CONFLICT)
        assert e.status_code == e.code == 409
        raise e
    raise fnbridge.TerminalError("no", code=codes[event])

def id_in_step(event):
    return fnbridge.run("charge", lambda: {"idempotency_key": fnbridge.invocation_id()})

async def fetch(n=1):
    import asyncio
    await asyncio.sleep(0)
    mark("fetch%d" % n)
    fnbridge.set_output("fetched%d" % n, "yes")
    return n

def async_step(event):
    return [fnbridge.run("async", fetch, 2), fnbridge.run("returned", lambda: fetch(3))]

async def async_handler_step(event):
    import asyncio
    await asyncio.sleep(0)
    return [fnbridge.run("async", fetch, 2), fnbridge.run("returned", lambda: fetch(3))]

async def task_step(event):
    import asyncio
    try:
        fnbridge.run("task", lambda: asyncio.ensure_future(fetch(4)))
    except fnbridge.TerminalError as e:
        return [e.code, e.message]

def id_from_pool(event):
    from concurrent.futures import ThreadPoolExecutor
    def step():
        with ThreadPoolExecutor(4) as ex:
            got = [ex.submit(contextvars.copy_context().run, fnbridge.invocation_id) for _ in range(8)]
            return sorted({f.result() for f in got})
    return fnbridge.run("fan out", step) + [fnbridge.invocation_id()]

def exit_in_step(event):
    import sys
    try:
        fnbridge.run("x", lambda: sys.exit(3))
    except SystemExit:
        mark("caught")
    fnbridge.run("y", lambda: mark("after"))

def bad_arguments(event):
    out = []
    t = fnbridge.sleep_async(0)
    def step():
        try:
            t.result()
        except RuntimeError as e:
            out.append(str(e))
    for call in (lambda: fnbridge.send("S", "h", headers="abc"),
                 lambda: fnbridge.call("S", "h", headers={"a": 1}),
                 lambda: fnbridge.sleep(1e300),
                 lambda: fnbridge.send("S", "h", delay=1e300),
                 lambda: fnbridge.call("S", "h", key="caf\udce9"),
                 lambda: fnbridge.run("step\udce9", lambda: 1),
                 lambda: fnbridge.send("S", "h", headers={"x-id": "\udcff"}),
                 lambda: fnbridge.run("\u00e9" * 8193, lambda: out.append("the step ran"))):
        try:
            call()
        except (TypeError, ValueError) as e:
            out.append("%s: %s" % (type(e).__name__, e))
    try:
        fnbridge.run("inner", step)
    except RuntimeError:
        pass
    return out

def first_arrived(event):
    a = fnbridge.sleep_async(0.1)
    b = fnbridge.sleep_async(0.2)
    b.result()
    first = fnbridge.wait_any(a, b)
    return {"first": "a" if first is a else "b", "none": fnbridge.wait_all(),
            "kwargs": fnbridge.run("greet", lambda name, fn: name + fn, name="bob", fn="!")}
`

// steps is one registration of steps.<fn> and a context endpoint.
type steps struct {
	*steptest.Server
	f *adaptertest.Fixture
	w functionruntime.Worker
}

func newSteps(t *testing.T, fn string) *steps {
	t.Helper()
	f := conformance.NewFixture(t, "steps."+fn, map[string]string{"steps.py": stepsPy})
	return &steps{Server: steptest.New(t), f: f, w: f.Start(t)}
}

// invoke runs one invocation attempt, with the step context of a unless
// a is nil.
func (s *steps) invoke(t *testing.T, a *stepctx.Attempt, input string) (functionruntime.Result, error) {
	t.Helper()
	return s.Invoke(t, s.f, s.w, a, input)
}

// marks reads the "ran-" marker files: how often each closure ran.
func marks(t *testing.T, dir string) map[string]int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "ran-*"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(filepath.Base(f), "ran-")] = len(b)
		_ = os.Remove(f)
	}
	return out
}

// Rule: recorded steps return their journaled result without running
// their closure; a retryable exception of a step fails the attempt
// (nothing journaled for it), and the next attempt resumes there.
func TestStepsResumeWhereTheyFailed(t *testing.T) {
	s := newSteps(t, "provision")
	j := &stepctxtest.Journal{ID: "inv_prov"}
	adaptertest.WriteFiles(t, s.f.Dir, map[string]string{"fail-once": ""})

	a := s.Open(t, j)
	_, err := s.invoke(t, a, `{}`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "ConnectionError", Message: "flaky network"})
	if got, want := marks(t, s.f.Dir), map[string]int{"step1": 1, "step2": 1, "step3": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first attempt ran %v, want %v", got, want)
	}
	var sf *stepctx.StepFailedError
	if !errors.As(a.Err(), &sf) || sf.Name != "step3" || !strings.Contains(sf.Message, "ConnectionError: flaky network") {
		t.Fatalf("attempt ended with %v, want step3's retryable failure", a.Err())
	}
	if n := len(j.Entries()); n != 3 {
		t.Fatalf("journal has %d entries after the failed attempt, want 3 (step3 open)", n)
	}

	j.Restart()
	res, err := s.invoke(t, s.Open(t, j), `{}`)
	steptest.MustOutput(t, res, err, `[{"step":1},{"step":2},{"step":3},{"step":4},"inv_prov"]`)
	if got, want := marks(t, s.f.Dir), map[string]int{"step3": 1, "step4": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("second attempt ran %v, want only steps 3 and 4 (1 and 2 replayed)", got)
	}
	entries := j.Entries()
	if len(entries) != 4 {
		t.Fatalf("journal has %d entries, want 4", len(entries))
	}
	for i, e := range entries {
		if e.Kind != "run" || e.Result == nil || string(e.Result.Value) != `{"step":`+string(rune('1'+i))+`}` {
			t.Fatalf("entry %d = %+v, want run step%d with compact JSON", i, e, i+1)
		}
	}
}

// Rule: a TerminalError raised by a step is journaled as the step's
// failure (code and message) and raised again on replay without running
// the step.
func TestStepsTerminalErrorJournaledAndReplayed(t *testing.T) {
	s := newSteps(t, "terminal_step")
	j := &stepctxtest.Journal{}
	_, err := s.invoke(t, s.Open(t, j), `"raise"`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "fnbridge.TerminalError", Terminal: true, Message: "no such plan"})
	e := j.Entries()
	if len(e) != 1 || e[0].Result == nil || e[0].Result.Failure == nil || *e[0].Result.Failure != (stepctx.Failure{Code: 404, Message: "no such plan"}) {
		t.Fatalf("journal = %+v, want the run's terminal failure 404", e)
	}
	for _, input := range []string{`"catch"`, `"raise"`} {
		j.Restart()
		res, err := s.invoke(t, s.Open(t, j), input)
		if input == `"catch"` {
			steptest.MustOutput(t, res, err, `["TerminalError",404,"no such plan"]`)
		} else {
			steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "fnbridge.TerminalError", Terminal: true, Message: "no such plan"})
		}
	}
	if got := marks(t, s.f.Dir); got["terminal"] != 1 {
		t.Fatalf("the failing step ran %d times, want once", got["terminal"])
	}
}

// Rule: a step's return value that JSON cannot encode is a terminal
// failure of the step (a retry could only repeat it).
func TestStepsUnserializableResultIsTerminal(t *testing.T) {
	s := newSteps(t, "unserializable_step")
	j := &stepctxtest.Journal{}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, res, err, `[500,"fnbridge.run('bad'): the step's return value is not JSON-serializable: TypeError: Object of type set is not JSON serializable"]`)
	if e := j.Entries(); len(e) != 1 || e[0].Result.Failure == nil || e[0].Result.Failure.Code != 500 {
		t.Fatalf("journal = %+v, want a terminal failure", e)
	}
}

// A step value the encoder takes is read back on the first run and on
// every replay, however deep it nests, or refused terminally; a callee's
// output that is valid JSON is read whatever its integers' length. Before,
// a list nested one or two levels short of the encoder's limit, and a
// 5,001-digit integer, failed every attempt: the answer that carries them
// back was beyond json.loads' defaults.
func TestStepsValuesReadBackAtTheLimits(t *testing.T) {
	s := newSteps(t, "deep_steps")
	j := &stepctxtest.Journal{}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	if err != nil {
		t.Fatalf("deep steps: %v", err)
	}
	var first []string
	if err := json.Unmarshal(res.Output, &first); err != nil || len(first) != 7 || first[0] != "ok" {
		t.Fatalf("deep steps: %s (%v), want 7 outcomes, the shallowest ok", res.Output, err)
	}
	for _, o := range first {
		if o != "ok" && o != "refused" {
			t.Fatalf("deep steps: %s, want each step ok or refused terminally", res.Output)
		}
	}
	j.Restart()
	again, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, again, err, string(res.Output))

	big := "1" + strings.Repeat("0", 5000)
	s = newSteps(t, "huge_int_call")
	j = &stepctxtest.Journal{CallResult: func(stepctx.CallRequest) stepctx.Result { return stepctx.Result{Value: []byte(big)} }}
	res, err = s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, res, err, `true`)
}

// Rule: once a step failed retryably the attempt is over: later calls
// raise Suspended, and a function that swallowed the step's exception
// still ends without a result, retryably.
func TestStepsNothingAfterAFailedStep(t *testing.T) {
	s := newSteps(t, "step_failure_swallowed")
	j := &stepctxtest.Journal{}
	_, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, Message: `step 'boom' failed and will be retried: ValueError: boom`})
	if got := marks(t, s.f.Dir); got["swallowed"] != 0 {
		t.Fatal("a context call after the failed step raised an Exception, want Suspended (a BaseException)")
	}
}

// wantBackgroundStepStopped fails the test unless the worker that ran the
// background step of start_bg_step (its pid in bg.pid) is gone once the
// invocation's answer (what) is in.
func wantBackgroundStepStopped(t *testing.T, s *steps, what string) {
	t.Helper()
	b, rerr := os.ReadFile(filepath.Join(s.f.Dir, "bg.pid"))
	pid, _ := strconv.Atoi(string(b))
	if rerr != nil || pid == 0 {
		t.Fatalf("bg.pid: %q %v", b, rerr)
	}
	if st, err := procstat.Read(pid); err == nil && !st.Dead() {
		t.Fatalf("the worker (pid %d) running the ended attempt's background step still runs after the %s was answered", pid, what)
	}
}

// Rule (issue 10): once an attempt ends, no code of it runs. A step a
// background thread still executes when the function fails is stopped,
// with its worker, before the failure is answered, so Restate's retry
// never runs beside it; a failure that leaves no step running keeps the
// worker.
func TestStepsFailedAttemptsBackgroundStepIsStopped(t *testing.T) {
	s := newSteps(t, "bg_fail")
	_, err := s.invoke(t, s.Open(t, &stepctxtest.Journal{}), `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "ValueError", Message: "failed beside a background step"})
	wantBackgroundStepStopped(t, s, "failure")

	p := newSteps(t, "fail_plain")
	for range 2 {
		_, err := p.invoke(t, p.Open(t, &stepctxtest.Journal{}), `null`)
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "ValueError", Message: "plain failure"})
	}
	if pids, _ := os.ReadFile(filepath.Join(p.f.Dir, "worker.pids")); len(strings.Fields(string(pids))) != 2 || strings.Fields(string(pids))[0] != strings.Fields(string(pids))[1] {
		t.Fatalf("workers of two plain failures: %q, want the same one twice", pids)
	}
}

// Rule (issue 10): once an attempt ends, no code of it runs. A step a
// background thread still executes when the function returns is stopped
// with its worker once the result is in; the result stands, the step
// stays open in the journal, and the log says why.
func TestStepsSucceededAttemptsBackgroundStepIsStopped(t *testing.T) {
	s := newSteps(t, "bg_ok")
	j := &stepctxtest.Journal{}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, res, err, `"accepted"`)
	wantBackgroundStepStopped(t, s, "result")
	if e := j.Entries(); len(e) != 1 || e[0].Name != "upload" || e[0].Result != nil {
		t.Fatalf("journal = %+v, want upload started and never completed", e)
	}
	found := false
	for _, m := range s.f.Logs.Messages() {
		found = found || strings.Contains(m, "the function returned while fnbridge.run was still in flight")
	}
	if !found {
		t.Errorf("logs = %q, want the worker's end explained", s.f.Logs.Messages())
	}
}

// ... and so is it when the invocation then fails on its outputs.
func TestStepsBackgroundStepIsStoppedWhenOutputsFail(t *testing.T) {
	s := newSteps(t, "bg_ok_bad_output")
	_, err := s.invoke(t, s.Open(t, &stepctxtest.Journal{}), `null`)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "InvalidOutputs" {
		t.Fatalf("invoke = %v, want the outputs' failure", err)
	}
	wantBackgroundStepStopped(t, s, "failure")
}

// tcpSteps serves a context endpoint on a loopback TCP port, as for a
// remote runtime, until the returned func shuts it down.
func tcpSteps(t *testing.T, addr string) (*steptest.Server, func()) {
	t.Helper()
	l, err := stepctx.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &steptest.Server{Srv: stepctx.NewServer(stepctx.Config{}), Addr: stepctx.URL(l)}
	served := make(chan error, 1)
	go func() { served <- srv.Srv.Serve(l) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Srv.Shutdown(ctx)
			<-served
		})
	}
	t.Cleanup(stop)
	return srv, stop
}

// Rule: a connection kept from an earlier attempt that the endpoint
// closed since (here it restarted) is not reused: over TCP a step's start
// sent ahead on it would be lost without an error, and a forked child's
// call, which waits for that start, would wait in vain and be refused.
func TestStepsDeadKeptTCPConnectionIsNotReused(t *testing.T) {
	s := newSteps(t, "id_in_forked_step")
	first, stop := tcpSteps(t, "tcp://127.0.0.1:0")
	res, err := first.Invoke(t, s.f, s.w, first.Open(t, &stepctxtest.Journal{ID: "inv_one"}), `null`)
	steptest.MustOutput(t, res, err, `"inv_one"`)
	stop()
	second, _ := tcpSteps(t, first.Addr)
	res, err = second.Invoke(t, s.f, s.w, second.Open(t, &stepctxtest.Journal{ID: "inv_two"}), `null`)
	steptest.MustOutput(t, res, err, `"inv_two"`)
}

// Rule: a forked child of a step's function may ask for the invocation
// id, on a fresh attempt (whose step start went ahead unanswered on the
// parent's connection) as on a replaying one.
func TestStepsForkedChildOfAStep(t *testing.T) {
	s := newSteps(t, "id_in_forked_step")
	for _, replaying := range []bool{false, true} {
		a := s.Open(t, &stepctxtest.Journal{ID: "inv_fork", AlwaysReplaying: replaying})
		res, err := s.invoke(t, a, `null`)
		steptest.MustOutput(t, res, err, `"inv_fork"`)
	}
}

// Rule: a Future settled in another invocation (kept in a global) is
// refused, as by wait_all: its value was journaled there, not here.
func TestStepsFutureOfAnotherAttemptRefused(t *testing.T) {
	s := newSteps(t, "future_kept")
	res, err := s.invoke(t, s.Open(t, &stepctxtest.Journal{}), `null`)
	steptest.MustOutput(t, res, err, `"kept"`)
	res, err = s.invoke(t, s.Open(t, &stepctxtest.Journal{}), `null`)
	if err != nil || !strings.Contains(string(res.Output), "fnbridge.Future.result: <fnbridge.Future call") || !strings.Contains(string(res.Output), "belongs to another invocation attempt") {
		t.Fatalf("output = %s (%v), want the earlier invocation's future refused", res.Output, err)
	}
}

// Rule (Pipelined steps): a process a step's function starts on a fresh
// attempt gets FNBRIDGE_CONTEXT_AFTER, "<pid>:<k>" of the step's start
// sent ahead, so that the endpoint serves its calls after that start; the
// next invocation on the worker starts without it.
func TestStepsChildrenNameTheStartSentAhead(t *testing.T) {
	s := newSteps(t, "after_env")
	for range 2 {
		res, err := s.invoke(t, s.Open(t, &stepctxtest.Journal{}), `null`)
		var got []*string
		if err != nil || json.Unmarshal(res.Output, &got) != nil || len(got) != 3 || got[0] != nil || got[1] == nil || *got[1] != *got[2] {
			t.Fatalf("output = %s (%v), want [null, \"<pid>:1\", \"<pid>:1\"]", res.Output, err)
		}
	}
}

// Rule: sleep, call, send, call_async, sleep_async, wait_all, result,
// invocation_id, random and uuid4 round-trip through the endpoint, and
// the random values are the same on every attempt.
func TestStepsRoundTrip(t *testing.T) {
	s := newSteps(t, "round_trip")
	j := &stepctxtest.Journal{ID: "inv_rt", Seed: 42, CallResult: func(r stepctx.CallRequest) stepctx.Result {
		if r.Service == "Fail" {
			return stepctx.Result{Failure: &stepctx.Failure{Code: 409, Message: "taken"}}
		}
		return stepctx.Result{Value: append(append([]byte(`{"echo":`), r.Input...), '}')}
	}}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		ID          string
		Random      []float64
		UUID        string
		Sleep       any
		Call        map[string]any
		CallFailure []any `json:"call_failure"`
		Send        string
		All         []any
		Later       []any
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	if out.ID != "inv_rt" || len(out.Random) != 2 || out.Random[0] == out.Random[1] || out.Random[0] < 0 || out.Random[0] >= 1 ||
		len(out.UUID) != 36 || out.UUID[14] != '4' || out.Sleep != nil || out.Send != "inv_send_1" {
		t.Fatalf("output = %s", res.Output)
	}
	if !reflect.DeepEqual(out.Call, map[string]any{"echo": map[string]any{"name": "you"}}) ||
		!reflect.DeepEqual(out.CallFailure, []any{409.0, "taken"}) ||
		!reflect.DeepEqual(out.All, []any{map[string]any{"echo": "second"}, nil, map[string]any{"echo": "first"}}) ||
		!reflect.DeepEqual(out.Later, []any{map[string]any{"echo": "first"}, map[string]any{"echo": "second"}}) {
		t.Fatalf("output = %s", res.Output)
	}
	e := j.Entries()
	if len(e) != 7 {
		t.Fatalf("journal has %d entries, want 7: %+v", len(e), e)
	}
	if e[0].Kind != "sleep" || e[0].Duration != 1500*time.Millisecond {
		t.Errorf("entry 0 = %+v, want a 1.5s sleep", e[0])
	}
	want := stepctx.CallRequest{Service: "Greeter", Handler: "greet", Key: "k1", IdempotencyKey: "i1",
		Headers: map[string]string{"h": "v"}, Input: []byte(`{"name":"you"}`)}
	if e[1].Kind != "call" || !reflect.DeepEqual(e[1].Call, want) {
		t.Errorf("entry 1 = %+v, want %+v", e[1].Call, want)
	}
	if e[2].Kind != "call" || len(e[2].Call.Input) != 0 {
		t.Errorf("entry 2 = %+v, want a call without input", e[2])
	}
	if e[3].Kind != "send" || e[3].Call.Key != "k2" || string(e[3].Call.Input) != "[1,2]" || e[3].Delay != 2*time.Second {
		t.Errorf("entry 3 = %+v, want a send with key k2, input [1,2], delay 2s", e[3])
	}
	if e[6].Kind != "sleep" || e[6].Duration != 250*time.Millisecond {
		t.Errorf("entry 6 = %+v, want a 250ms sleep", e[6])
	}

	j.Restart()
	again, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, again, err, string(res.Output))
}

// Rule: wait_any returns a completed future; a future may be
// awaited later and in any order; a wait that suspends raises Suspended,
// which unwinds through "except Exception", and the invocation ends
// without a result, retryably. The next attempt resumes.
func TestStepsSuspendedUnwinds(t *testing.T) {
	s := newSteps(t, "wait_then_suspend")
	j := &stepctxtest.Journal{HoldSleeps: true}
	a := s.Open(t, j)
	_, err := s.invoke(t, a, `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, Message: "suspended"})
	if !errors.Is(a.Err(), stepctx.ErrSuspended) {
		t.Fatalf("attempt ended with %v, want suspended", a.Err())
	}
	// wait_any returned the call, which completed, not the timer named
	// first; nothing after the suspension ran.
	if got := marks(t, s.f.Dir); !reflect.DeepEqual(got, map[string]int{"first-reply": 1}) {
		t.Fatalf("first attempt ran %v, want only the mark after wait_any, which returned the reply", got)
	}

	j.Complete(0) // the timer fired
	j.Restart()
	res, err := s.invoke(t, s.Open(t, j), `null`)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(res.Output, &out); err != nil || !reflect.DeepEqual(out["reply"], map[string]any{"x": 1.0}) ||
		out["timer"] != nil {
		t.Fatalf("output = %s, want the reply and the timer's null", res.Output)
	}
	if got := marks(t, s.f.Dir); got["after"] != 1 || got["swallowed"] != 0 {
		t.Fatalf("resumed attempt ran %v, want the code after the wait once", got)
	}
}

// Rule: a function that catches Suspended (it must not) still ends
// without a result; every later context call raises Suspended too.
func TestStepsSuspendedCaughtStillEnds(t *testing.T) {
	s := newSteps(t, "suspend_ignored")
	_, err := s.invoke(t, s.Open(t, &stepctxtest.Journal{HoldSleeps: true}), `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, Message: "suspended"})
	if got := marks(t, s.f.Dir); got["ignored"] != 1 {
		t.Fatalf("marks = %v: the handler did not get Suspended again", got)
	}
}

// Rule: the context is used one call at a time: a call from another
// thread while a step is in flight, and a call inside a step's function,
// raise a clear RuntimeError; a plain thread (outside the invocation's
// context) is refused as well.
func TestStepsOneCallAtATime(t *testing.T) {
	s := newSteps(t, "threads")
	res, err := s.invoke(t, s.Open(t, &stepctxtest.Journal{}), `null`)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Value       string
		Errors      []string
		PlainThread []string `json:"plain_thread"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	if out.Value != "stepped" || len(out.Errors) != 2 || len(out.PlainThread) != 1 {
		t.Fatalf("output = %s", res.Output)
	}
	for i, want := range []string{"fnbridge.sleep called from thread", "fnbridge.random called inside step 'outer'"} {
		if !strings.Contains(out.Errors[i], want) {
			t.Errorf("error %d = %q, want %q", i, out.Errors[i], want)
		}
	}
	// The thread is the step's own (a pool it started) or one beside it:
	// either way the error names the step and both rules.
	if !strings.Contains(out.Errors[0], "while step 'outer' runs in thread ") || !strings.Contains(out.Errors[0], "a step's function cannot make context calls") || !strings.Contains(out.Errors[0], "one at a time") {
		t.Errorf("error = %q, want it to name the step in flight and both rules", out.Errors[0])
	}
	if !strings.Contains(out.PlainThread[0], "fnbridge.invocation_id called outside its invocation") {
		t.Errorf("plain thread got %q", out.PlainThread[0])
	}
}

// Rule: the endpoint's 409 (another process using the attempt's token at
// the same time) is a clear RuntimeError.
func TestStepsConcurrentUseRefused(t *testing.T) {
	s := newSteps(t, "conflict")
	entered, release := make(chan struct{}), make(chan struct{})
	j := &stepctxtest.Journal{BeforeRunStart: func(ctx context.Context, _ string) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}}
	a := s.Open(t, j)
	c, err := stepctx.NewClient(s.Addr, a.Token())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held := make(chan error, 1)
	go func() {
		_, _, err := c.RunStart(context.Background(), "held")
		held <- err
	}()
	<-entered
	res, err := s.invoke(t, a, `null`)
	close(release)
	steptest.MustOutput(t, res, err, `"fnbridge.invocation_id: the fnbridge context is being used by another thread/process at the same time; context calls must be made one at a time (HTTP 409)"`)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

// Rule: without a step context (durability: function) every durable call
// raises a clear error, and FNBRIDGE_CONTEXT is not set.
func TestStepsFunctionModeRefuses(t *testing.T) {
	s := newSteps(t, "function_mode")
	res, err := s.invoke(t, nil, `null`)
	if err != nil {
		t.Fatal(err)
	}
	var out []*string
	if err := json.Unmarshal(res.Output, &out); err != nil || len(out) != 3 || out[0] == nil || out[1] == nil {
		t.Fatalf("output = %s", res.Output)
	}
	if !strings.HasPrefix(*out[0], "fnbridge.run needs durability: steps") || !strings.HasPrefix(*out[1], "fnbridge.sleep needs durability: steps") {
		t.Fatalf("errors = %q, %q", *out[0], *out[1])
	}
	if out[2] != nil {
		t.Fatalf("FNBRIDGE_CONTEXT = %q in function mode", *out[2])
	}
}

// Rule: FNBRIDGE_CONTEXT and FNBRIDGE_CONTEXT_TOKEN are in the
// environment of the invocation (children inherit them) and gone after.
func TestStepsContextEnvironment(t *testing.T) {
	s := newSteps(t, "env")
	a := s.Open(t, &stepctxtest.Journal{})
	res, err := s.invoke(t, a, `null`)
	want, _ := json.Marshal([]string{s.Addr, a.Token(), s.Addr + " " + a.Token()})
	steptest.MustOutput(t, res, err, string(want))
	res, err = s.invoke(t, nil, `null`)
	steptest.MustOutput(t, res, err, `[null,null,""]`)
}

// Rule: the per-invocation environment reaches the function and its
// children with the step context or without it, for that invocation only.
func TestStepsInvocationEnvironment(t *testing.T) {
	s := newSteps(t, "env_key")
	a := s.Open(t, &stepctxtest.Journal{})
	key := "line one\nline 'two' \"ü\""
	for _, sc := range []*stepctx.Attempt{a, nil} {
		inv := s.Invocation(s.f, sc, `null`)
		inv.Env = map[string]string{functionruntime.EnvKey: key}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := s.w.Invoke(ctx, inv)
		cancel()
		var addr any
		if sc != nil {
			addr = s.Addr
		}
		want, _ := json.Marshal([]any{addr, key, key})
		steptest.MustOutput(t, res, err, string(want))
	}
	res, err := s.invoke(t, a, `null`)
	want, _ := json.Marshal([]any{s.Addr, nil, "unset"})
	steptest.MustOutput(t, res, err, string(want))
}

// Rule: an InvokeFunction cancelled during a context call kills the
// worker as any cancellation does; the next invocation gets a fresh one.
// (An attempt that replays: a fresh one runs the step meanwhile, see
// TestStepsFreshAttemptRunsAStepWhileItsStartIsJournaled.)
func TestStepsCancelledDuringContextCall(t *testing.T) {
	s := newSteps(t, "hold")
	entered := make(chan struct{})
	j := &stepctxtest.Journal{AlwaysReplaying: true, BeforeRunStart: func(ctx context.Context, _ string) {
		close(entered)
		<-ctx.Done()
	}}
	a := s.Open(t, j)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.w.Invoke(ctx, s.Invocation(s.f, a, `null`))
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled invoke returned %v, want context.Canceled", err)
	}
	a.Close() // what the bridge does when the attempt ends
	if got := marks(t, s.f.Dir); len(got) != 0 {
		t.Fatalf("the held step ran: %v", got)
	}
	j2 := &stepctxtest.Journal{}
	res, err := s.invoke(t, s.Open(t, j2), `null`)
	steptest.MustOutput(t, res, err, `null`)
	if got := marks(t, s.f.Dir); got["hold"] != 1 {
		t.Fatalf("marks = %v, want the step run once by the fresh worker", got)
	}
}

// Rule: in an attempt that replays nothing, a step's closure runs
// without waiting for the answer to its start (the start is on its way
// first; the completion then reads both answers), and the step is
// journaled once, with its value. (An attempt that replays waits: see
// TestStepsCancelledDuringContextCall.)
func TestStepsFreshAttemptRunsAStepWhileItsStartIsJournaled(t *testing.T) {
	s := newSteps(t, "hold")
	ran := func() bool { // without consuming the mark, as marks does
		_, err := os.Stat(filepath.Join(s.f.Dir, "ran-hold"))
		return err == nil
	}
	var sawRun atomic.Bool // set on the endpoint's goroutine
	j := &stepctxtest.Journal{BeforeRunStart: func(ctx context.Context, _ string) {
		// Held until the closure has run: a worker that waited for this
		// answer would never get there.
		deadline := time.Now().Add(20 * time.Second)
		for !ran() && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		sawRun.Store(ran())
	}}
	a := s.Open(t, j)
	if !a.Fresh() {
		t.Fatal("an attempt of an empty journal is not fresh")
	}
	res, err := s.invoke(t, a, `null`)
	steptest.MustOutput(t, res, err, `null`)
	if !sawRun.Load() {
		t.Fatal("the step's closure waited for its start to be journaled in a fresh attempt")
	}
	if e := j.Entries(); len(e) != 1 || e[0].Name != "hold" || string(e[0].Result.Value) != "null" {
		t.Fatalf("journal = %+v, want the step once", e)
	}
	if got := marks(t, s.f.Dir); got["hold"] != 1 {
		t.Fatalf("marks = %v, want the step run once", got)
	}

}

// Rule: an attempt that replays waits for each run/start's answer until
// the replay is over: the first step that executes after it (its answer
// says "live") still waits, and every later step runs without waiting.
func TestStepsPipelinedOnceTheReplayIsOver(t *testing.T) {
	s := newSteps(t, "live_after_replay")
	ran := func(name string) bool {
		_, err := os.Stat(filepath.Join(s.f.Dir, "ran-"+name))
		return err == nil
	}
	var mu sync.Mutex // early is set on the endpoint's goroutine
	early := map[string]bool{}
	j := &stepctxtest.Journal{BeforeRunStart: func(ctx context.Context, name string) {
		mu.Lock()
		defer mu.Unlock()
		if name != "three" {
			early[name] = ran(name)
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for !ran(name) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		early[name] = ran(name)
	}}
	if _, err := s.invoke(t, s.Open(t, j), `"fail"`); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	j.Restart()
	a := s.Open(t, j)
	if a.Fresh() {
		t.Fatal("an attempt with a recorded step is fresh")
	}
	res, err := s.invoke(t, a, `null`)
	steptest.MustOutput(t, res, err, `[1,2,3]`)
	if got := marks(t, s.f.Dir); !reflect.DeepEqual(got, map[string]int{"one": 1, "two": 1, "three": 1}) {
		t.Fatalf("marks = %v, want each step run once", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if early["two"] || !early["three"] {
		t.Fatalf("closure run before its start was served: %v; want two waited (the replay was not known to be over), three not", early)
	}
}

// Rule: a step whose start is refused fails as the refusal says, also
// when its closure ran meanwhile (a fresh attempt does not wait for the
// start's answer): the invocation's cancellation raises TerminalError
// (409) from fnbridge.run, an attempt that ended raises Suspended; the
// closure's value is journaled in neither case.
func TestStepsRefusedStartWins(t *testing.T) {
	s := newSteps(t, "guarded_hold")
	j := &stepctxtest.Journal{RunStartError: stepctx.Cancelled()}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, res, err, `[409,"cancelled"]`)
	if e := j.Entries(); len(e) != 0 {
		t.Fatalf("journal = %+v, want nothing journaled", e)
	}

	j = &stepctxtest.Journal{RunStartError: stepctx.ErrSuspended}
	a := s.Open(t, j)
	_, err = s.invoke(t, a, `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, Message: "suspended"})
	if e := j.Entries(); len(e) != 0 || !errors.Is(a.Err(), stepctx.ErrSuspended) {
		t.Fatalf("journal = %+v, attempt ended with %v; want nothing journaled, suspended", e, a.Err())
	}
}

// Rule: a step that ends by an exception raised after its start and
// before its outcome was sent (here the encoding of its value) fails
// the attempt retryably, its connection closed, even when the function
// catches it: a later step is refused clearly and journals nothing
// under the open step, and the worker's next invocation gets its own
// answers (a start sent ahead left no answer behind for it).
func TestStepsEscapedStepEndsTheAttempt(t *testing.T) {
	s := newSteps(t, "escaped_step")
	j := &stepctxtest.Journal{}
	a := s.Open(t, j)
	_, err := s.invoke(t, a, `null`)
	// The function caught both exceptions; the attempt fails all the same.
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "RuntimeError",
		Message: "fnbridge.run('a') ended before its outcome was sent"})
	for _, e := range j.Entries() {
		if e.Result != nil {
			t.Fatalf("journal %+v: a step was journaled with a value", j.Entries())
		}
	}
	select { // the bridge sees the connection closed, and fails the step
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt goes on with step a abandoned")
	}
	if !strings.Contains(a.Err().Error(), `"a"`) {
		t.Fatalf("attempt ended with %v, want step a failed", a.Err())
	}
	j2 := &stepctxtest.Journal{CallResult: func(stepctx.CallRequest) stepctx.Result {
		return stepctx.Result{Value: []byte(`"the call's own"`)}
	}}
	res, err := s.invoke(t, s.Open(t, j2), `"call"`)
	steptest.MustOutput(t, res, err, `"the call's own"`)
}

// Rule: an unreachable endpoint is a clear error naming it, and the
// attempt ends retryably even when the function catches it.
func TestStepsUnreachableEndpoint(t *testing.T) {
	f := conformance.NewFixture(t, "steps.unreachable", map[string]string{"steps.py": stepsPy})
	w := f.Start(t)
	inv := f.Invocation("inv-1", []byte(`null`))
	addr := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	inv.Context = &functionruntime.StepContext{Address: addr, Token: stepctx.NewToken()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := w.Invoke(ctx, inv)
	he := steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "RuntimeError",
		Message: "fnbridge: the context endpoint at " + addr + " is unreachable: FileNotFoundError"})
	if strings.Contains(he.Message, "Suspended") {
		t.Fatalf("message = %q", he.Message)
	}
}

// Rule: a step's value comes back whole whatever its size, executed or
// replayed, including answers larger than the worker's read buffer, and
// the steps after it read theirs correctly.
func TestStepsLargeValues(t *testing.T) {
	s := newSteps(t, "big_values")
	j := &stepctxtest.Journal{}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	const want = `[100003,"end",{"n":1},2]`
	steptest.MustOutput(t, res, err, want)
	if e := j.Entries(); len(e) != 3 || e[0].Result == nil || len(e[0].Result.Value) != 2*100000+5 {
		t.Fatalf("journal = %d entries, want 3, the first 200005 bytes of UTF-8 JSON", len(e))
	}
	j.Restart()
	again, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, again, err, want)
}

// Rule: a step's value is journaled as compact JSON, non-ASCII text as
// UTF-8 and a lone surrogate escaped; a value JSON cannot encode (a
// cycle, NaN, a set) is the step's terminal failure, each with its own
// reason.
func TestStepsValueEncoding(t *testing.T) {
	s := newSteps(t, "encodings")
	j := &stepctxtest.Journal{}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	if err := json.Unmarshal(res.Output, &out); err != nil || len(out) != 5 {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	for i, want := range []string{"ValueError: Circular reference detected", "ValueError: Out of range float values are not JSON compliant", "TypeError: Object of type set is not JSON serializable"} {
		if got, _ := out[2+i].(string); !strings.Contains(got, "return value is not JSON-serializable: "+want) {
			t.Errorf("failure %d = %q, want %q", i, got, want)
		}
	}
	e := j.Entries()
	if len(e) != 5 || string(e[0].Result.Value) != `{"t":"héllo ✓","f":0.5,"l":[1,null,true]}` || string(e[1].Result.Value) != `"\ud800"` {
		t.Fatalf("journal = %+v", e)
	}
}

// Rule: a worker keeps its context connection from one attempt to the
// next (a new preface moves it to the next attempt's token), and when the
// bridge closed the kept connection meanwhile (a restart on the same
// socket), the next attempt's first call goes through on a fresh one,
// journaled once.
func TestStepsConnectionKeptAcrossAttempts(t *testing.T) {
	s := newSteps(t, "context_socket")
	j1, j2 := &stepctxtest.Journal{}, &stepctxtest.Journal{}
	first, err := s.invoke(t, s.Open(t, j1), `1`)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.invoke(t, s.Open(t, j2), `2`)
	if err != nil {
		t.Fatal(err)
	}
	if string(first.Output) != string(second.Output) || !strings.Contains(string(first.Output), "socket:") {
		t.Fatalf("sockets of the two attempts: %s and %s, want the same one connection", first.Output, second.Output)
	}
	if len(j1.Entries()) != 1 || len(j2.Entries()) != 1 {
		t.Fatalf("journals %+v and %+v, want one run each", j1.Entries(), j2.Entries())
	}

	// The endpoint restarts on the same socket: the kept connection is dead.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := stepctx.Listen(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	restarted := &steptest.Server{Srv: stepctx.NewServer(stepctx.Config{}), Addr: s.Addr, Dir: s.Dir}
	served := make(chan error, 1)
	go func() { served <- restarted.Srv.Serve(l) }()
	t.Cleanup(func() {
		_ = restarted.Srv.Shutdown(context.Background())
		<-served
	})
	j3 := &stepctxtest.Journal{}
	third, err := restarted.Invoke(t, s.f, s.w, restarted.Open(t, j3), `3`)
	if err != nil {
		t.Fatalf("the attempt after the restart: %v", err)
	}
	if e := j3.Entries(); len(e) != 1 || string(e[0].Result.Value) != "3" {
		t.Fatalf("journal after the restart = %+v, want the one run, once", e)
	}
	if string(third.Output) == string(second.Output) {
		t.Fatalf("sockets after the restart %s: want a new connection", third.Output)
	}
}

// Rule (Python API): "wait_any(*futures) returns the first completed",
// the one whose completion arrived first even when another was awaited
// before (the journal here completes timers in the order they are made);
// wait_all() of nothing is []; run passes kwargs named name and fn on to
// the step's function.
func TestStepsWaitAnyIsTheFirstArrived(t *testing.T) {
	s := newSteps(t, "first_arrived")
	res, err := s.invoke(t, s.Open(t, &stepctxtest.Journal{}), `null`)
	steptest.MustOutput(t, res, err, `{"first":"a","none":[],"kwargs":"bob!"}`)
}

// Rule: a context call cut short by an exception from a signal handler
// drops its connection, so no later call reads its answer; every later
// call is refused, and the attempt ends retryably.
func TestStepsInterruptedCallIsNeverAnsweredLate(t *testing.T) {
	s := newSteps(t, "interrupted")
	j := &stepctxtest.Journal{BeforeRunStart: func(ctx context.Context, _ string) {
		// Held until the worker hangs up (or long after its alarm), so
		// the answer comes only after the call was interrupted.
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
	}}
	_, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "RuntimeError",
		Message: "fnbridge.run was interrupted by steps.Deadline before the context endpoint answered; this attempt can make no more context calls"})
	if got, want := marks(t, s.f.Dir), map[string]int{"deadline": 1, "refused": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("marks = %v, want %v (the call after the interrupted one must be refused)", got, want)
	}
}

// Rule: a TerminalError's code is an int from 1 to 65535, an IntEnum
// such as HTTPStatus included, the same for the function and for a
// step; any other code is no code (500), never a crashed worker. The
// Restate SDK's keyword, status_code=, is the same code.
func TestStepsTerminalErrorCodes(t *testing.T) {
	s := newSteps(t, "terminal_code")
	for input, want := range map[string]int{`"enum"`: 404, `"sdk"`: 409, `"huge"`: 0, `"bool"`: 0, `"zero"`: 0, `"text"`: 0} {
		_, err := s.invoke(t, nil, input)
		he := steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "fnbridge.TerminalError", Terminal: true, Message: "no"})
		if he.Code != want {
			t.Errorf("%s: code %d, want %d", input, he.Code, want)
		}
	}
	for input, want := range map[string]int{`"step-enum"`: 404, `"step-huge"`: 500, `"step-zero"`: 500} {
		j := &stepctxtest.Journal{}
		_, err := s.invoke(t, s.Open(t, j), input)
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "fnbridge.TerminalError", Terminal: true, Message: "in a step"})
		if e := j.Entries(); len(e) != 1 || e[0].Result == nil || e[0].Result.Failure == nil || e[0].Result.Failure.Code != uint16(want) {
			t.Errorf("%s: journal = %+v, want the step's failure with code %d", input, e, want)
		}
	}
}

// Rule: fnbridge.invocation_id works inside a step's function (the
// usual idempotency key of what the step calls), and the step's value is
// replayed with it.
func TestStepsInvocationIDInsideAStep(t *testing.T) {
	s := newSteps(t, "id_in_step")
	j := &stepctxtest.Journal{ID: "inv_charge"}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, res, err, `{"idempotency_key":"inv_charge"}`)
	j.Restart()
	res, err = s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, res, err, `{"idempotency_key":"inv_charge"}`)
}

// Rule: a step's function may be an async def, or return a coroutine:
// the step's value is what it returns once awaited, from a plain handler
// and from an async one (whose event loop fnbridge.run blocks), with the
// invocation's context (set_output); a replay returns the recorded
// values without running it.
func TestStepsAsyncFunctionIsAwaited(t *testing.T) {
	for _, fn := range []string{"async_step", "async_handler_step"} {
		t.Run(fn, func(t *testing.T) {
			s := newSteps(t, fn)
			j := &stepctxtest.Journal{}
			res, err := s.invoke(t, s.Open(t, j), `null`)
			steptest.MustOutput(t, res, err, `[2,3]`)
			if got := res.Outputs; got["fetched2"] != "yes" || got["fetched3"] != "yes" {
				t.Errorf("outputs = %v, want fetched2 and fetched3 set by the steps' coroutines", got)
			}
			if got, want := marks(t, s.f.Dir), map[string]int{"fetch2": 1, "fetch3": 1}; !reflect.DeepEqual(got, want) {
				t.Fatalf("marks = %v, want %v", got, want)
			}
			j.Restart()
			res, err = s.invoke(t, s.Open(t, j), `null`)
			steptest.MustOutput(t, res, err, `[2,3]`)
			if got := marks(t, s.f.Dir); len(got) != 0 {
				t.Fatalf("replay ran %v, want no step run again", got)
			}
		})
	}
}

// Rule: a step cannot wait for a task of the handler's own event loop
// (fnbridge.run blocks that loop): the step fails terminally, naming
// what to pass instead, and the task never runs.
func TestStepsTaskOfTheHandlersLoopRefused(t *testing.T) {
	s := newSteps(t, "task_step")
	j := &stepctxtest.Journal{}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, res, err, `[500,"fnbridge.run('task'): fn returned Task, which belongs to the handler's event loop; fnbridge.run blocks that loop until the step ends, so the step cannot wait for it: pass the async function itself (fnbridge.run(name, fetch)), or a coroutine, not a task or future"]`)
	if e := j.Entries(); len(e) != 1 || e[0].Result == nil || e[0].Result.Failure == nil {
		t.Fatalf("journal = %+v, want the step's terminal failure", e)
	}
	if got := marks(t, s.f.Dir); len(got) != 0 {
		t.Fatalf("marks = %v, want the refused task never run", got)
	}
}

// Rule: fnbridge.invocation_id works from any thread of a step's
// function (a pool fanning out requests with their idempotency keys), not
// only from the step's own thread.
func TestStepsInvocationIDFromAStepsThreads(t *testing.T) {
	s := newSteps(t, "id_from_pool")
	j := &stepctxtest.Journal{ID: "inv_fan"}
	res, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.MustOutput(t, res, err, `["inv_fan","inv_fan"]`)
}

// Rule: a step whose function raises SystemExit (or another
// BaseException) does not stay open: it fails retryably, the attempt
// ends, and a later context call raises Suspended.
func TestStepsExitInsideAStepEndsTheAttempt(t *testing.T) {
	s := newSteps(t, "exit_in_step")
	j := &stepctxtest.Journal{}
	_, err := s.invoke(t, s.Open(t, j), `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, Message: "step 'x' was interrupted and will be retried: SystemExit: 3"})
	if got, want := marks(t, s.f.Dir), map[string]int{"caught": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("marks = %v, want %v (nothing after the interrupted step)", got, want)
	}
	if e := j.Entries(); len(e) != 1 || e[0].Result != nil {
		t.Fatalf("journal = %+v, want step x open and nothing after it", e)
	}
}

// Rule: bad arguments get errors naming the fnbridge call and the
// argument, before anything reaches the endpoint.
func TestStepsBadArgumentsAreNamed(t *testing.T) {
	s := newSteps(t, "bad_arguments")
	res, err := s.invoke(t, s.Open(t, &stepctxtest.Journal{}), `null`)
	steptest.MustOutput(t, res, err, `["TypeError: fnbridge.send: headers must be a mapping of str to str, not 'abc'",`+
		`"TypeError: fnbridge.call: headers must be a mapping of str to str, not {'a': 1}",`+
		`"ValueError: fnbridge.sleep: seconds must be at most 9223372036 seconds (about 292 years), not 1e+300",`+
		`"ValueError: fnbridge.send: delay must be at most 9223372036 seconds (about 292 years), not 1e+300",`+
		`"ValueError: fnbridge.call: key 'caf\\udce9' is not valid Unicode text (a lone surrogate): Restate takes text as UTF-8 only",`+
		`"ValueError: fnbridge.run: name 'step\\udce9' is not valid Unicode text (a lone surrogate): Restate takes text as UTF-8 only",`+
		`"ValueError: fnbridge.send: header x-id '\\udcff' is not valid Unicode text (a lone surrogate): Restate takes text as UTF-8 only",`+
		`"ValueError: fnbridge.run: the step name is 16386 bytes; a step name may have at most 16384",`+
		`"fnbridge.Future.result called inside step 'inner': a step's function cannot make context calls (a replay skips it); make them before or after fnbridge.run"]`)
}
