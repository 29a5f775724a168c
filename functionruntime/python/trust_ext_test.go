package python_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// trustPy is the module of the trust-boundary tests: handlers that try to
// get a result or an output attributed to an invocation it does not
// belong to. Each dispatches on its input; any other input is echoed, so
// a test can check that the next invocation gets its own answer.
const trustPy = `
import contextvars, os, struct, sys, threading
import fnbridge

def response_fd():
    # The worker's response pipe as a handler finds it: the one pipe above
    # stderr this process holds write-only, other than its copy of the log
    # pipe (stdout's).
    log = os.readlink("/proc/self/fd/1")
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd < 3:
            continue
        try:
            target = os.readlink("/proc/self/fd/%d" % fd)
            if not target.startswith("pipe:") or target == log:
                continue
            with open("/proc/self/fdinfo/%d" % fd) as f:
                flags = int([l for l in f if l.startswith("flags:")][0].split()[1], 8)
        except (OSError, IndexError):
            continue
        if flags & os.O_ACCMODE == os.O_WRONLY:
            return fd
    raise RuntimeError("no response pipe found")

def frame(kind, rid, body):
    payload = rid + body
    return kind + struct.pack(">I", len(payload)) + payload

def current_id():
    # What a handler reading the worker's memory can learn: the id of the
    # request it is running for.
    return sys._getframe(2).f_locals.get("request_id", b"")

remembered = {}
go = threading.Event()
done = threading.Event()
late_errors = []

def fork(event):
    if event == "fork":
        pid = os.fork()
        if pid == 0:
            return {"in": event, "from": "child"}
        os.waitpid(pid, 0)
        return {"in": event, "from": "parent"}
    return {"in": event}

def forge(event):
    if event == "guess":
        os.write(response_fd(), frame(b"R", b"\0" * 8, b'"forged"'))
    elif event == "remember":
        remembered["id"] = current_id()
    elif event == "replay":
        os.write(response_fd(), frame(b"R", remembered["id"], b'"replayed"'))
    elif event == "own":
        os.write(response_fd(), frame(b"R", current_id(), b'"forged own"'))
    elif event == "thread":
        rid, fd = current_id(), response_fd()
        def late():
            go.wait(20)
            os.write(fd, frame(b"R", rid, b'"from the thread"'))
            done.set()
        threading.Thread(target=late, daemon=True).start()
    elif event == "trigger":
        go.set()
        done.wait(20)
    return {"in": event, "pid": os.getpid()}

def late_outputs(event):
    if event == "start":
        path = os.environ["FNBRIDGE_OUTPUTS"]
        opened = open(path, "a")
        fnbridge.set_output("own_start", "1")
        def late():
            go.wait(20)
            opened.write("late_open=1\n")
            opened.flush()
            with open(path, "a") as f:
                f.write("late_path=1\n")
            try:
                fnbridge.set_output("late_api", "1")
            except RuntimeError as exc:
                late_errors.append(str(exc))
            done.set()
        threading.Thread(target=late, daemon=True).start()
        return "started"
    if event == "trigger":
        go.set()
        done.wait(20)
        fnbridge.set_output("own_trigger", "1")
        return late_errors
    if event == "copied_context":
        t = threading.Thread(target=contextvars.copy_context().run, args=(fnbridge.set_output, "from_thread", "1"))
        t.start()
        t.join()
        return "joined"
    return event
`

var hTrust = map[string]string{"trust.py": trustPy}

// echoed is what trustPy's handlers answer for an input they do not
// dispatch on; pid is the worker's.
type echoed struct {
	In  string
	Pid int
}

func decodeEcho(t *testing.T, res functionruntime.Result) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal(res.Output, &e); err != nil {
		t.Fatalf("output %q is not the handler's echo: %v", res.Output, err)
	}
	return e
}

// wantCrashed checks err fails the invocation retryably as a worker crash
// that says why.
func wantCrashed(t *testing.T, res functionruntime.Result, err error, why string) {
	t.Helper()
	if err == nil {
		t.Fatalf("invocation succeeded with output %s, want it failed as a worker crash (%s)", res.Output, why)
	}
	if !errors.Is(err, functionruntime.ErrWorkerCrashed) || !strings.Contains(err.Error(), why) {
		t.Fatalf("error = %v, want ErrWorkerCrashed saying %q", err, why)
	}
}

// Rule: a result belongs to its invocation. A child a handler forks with a
// naive os.fork() returns from the handler into a copy of the worker loop;
// it must exit there, never answer the request nor read the next one.
func TestForkedChildNeverAnswers(t *testing.T) {
	f := conformance.NewFixture(t, "trust.fork", hTrust)
	w := f.Start(t)
	if got, want := string(f.MustInvoke(t, w, `"fork"`).Output), `{"in":"fork","from":"parent"}`; got != want {
		t.Fatalf("forking invocation returned %s, want %s (the child's return must never be the result)", got, want)
	}
	for _, in := range []string{"a", "b", "c"} {
		if got, want := string(f.MustInvoke(t, w, jsonText(in)).Output), `{"in":"`+in+`"}`; got != want {
			t.Fatalf("invocation %q after the fork returned %s, want %s", in, got, want)
		}
	}
}

// Rule: a frame written to the worker's response pipe by anything but the
// worker loop (found through /proc/self/fd) is never taken for a result it
// does not name: a guessed or a stale request id ends the worker, the
// invocation fails retryably, and the next one gets its own answer from a
// fresh worker.
func TestForgedFrameEndsWorker(t *testing.T) {
	f := conformance.NewFixture(t, "trust.forge", hTrust)
	w := f.Start(t)
	first := decodeEcho(t, f.MustInvoke(t, w, `"first"`))

	res, err := f.Invoke(t, w, `"guess"`)
	wantCrashed(t, res, err, "forged or stray frame")
	second := decodeEcho(t, f.MustInvoke(t, w, `"after guess"`))
	if second.In != "after guess" || second.Pid == first.Pid {
		t.Fatalf("after a forged frame: got %+v, want its own answer from a fresh worker (not pid %d)", second, first.Pid)
	}

	f.MustInvoke(t, w, `"remember"`)
	res, err = f.Invoke(t, w, `"replay"`)
	wantCrashed(t, res, err, "answers the previous request")
	if e := decodeEcho(t, f.MustInvoke(t, w, `"after replay"`)); e.In != "after replay" {
		t.Fatalf("after a replayed frame: got %+v, want its own answer", e)
	}
}

// A handler can always forge its own invocation's result (it runs in the
// worker), but the worker's real answer, left behind on the pipe, never
// becomes the next invocation's result.
func TestForgedOwnResultNeverLandsLater(t *testing.T) {
	f := conformance.NewFixture(t, "trust.forge", hTrust)
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, `"own"`).Output); got != `"forged own"` {
		t.Fatalf("own forgery returned %s, want the forged frame (it named its own request)", got)
	}
	res, err := f.Invoke(t, w, `"next"`)
	wantCrashed(t, res, err, "previous") // still buffered, or arriving while it waits
	if e := decodeEcho(t, f.MustInvoke(t, w, `"last"`)); e.In != "last" {
		t.Fatalf("after the forgery: got %+v, want its own answer", e)
	}
}

// A background thread that writes its invocation's frame after that
// invocation ended cannot answer a later one.
func TestLateThreadFrameRejected(t *testing.T) {
	f := conformance.NewFixture(t, "trust.forge", hTrust)
	w := f.Start(t)
	f.MustInvoke(t, w, `"thread"`)
	res, err := f.Invoke(t, w, `"trigger"`)
	wantCrashed(t, res, err, "answers the previous request")
	if e := decodeEcho(t, f.MustInvoke(t, w, `"after"`)); e.In != "after" {
		t.Fatalf("after the late frame: got %+v, want its own answer", e)
	}
}

// Rule: outputs belong to their invocation. A thread that outlives its
// invocation can neither set_output into a later one nor reach it through
// the FNBRIDGE_OUTPUTS file it opened or named during its own.
func TestLateOutputsNeverLandLater(t *testing.T) {
	f := conformance.NewFixture(t, "trust.late_outputs", hTrust)
	w := f.Start(t)
	if res := f.MustInvoke(t, w, `"start"`); !reflect.DeepEqual(res.Outputs, map[string]string{"own_start": "1"}) {
		t.Fatalf("first invocation outputs = %v", res.Outputs)
	}
	res := f.MustInvoke(t, w, `"trigger"`)
	if want := map[string]string{"own_trigger": "1"}; !reflect.DeepEqual(res.Outputs, want) {
		t.Fatalf("outputs = %v, want only %v: a late thread's outputs landed in a later invocation", res.Outputs, want)
	}
	if !strings.Contains(string(res.Output), "called outside its invocation") {
		t.Fatalf("late set_output did not raise a clear error; the handler saw %s", res.Output)
	}
	// The documented way to set outputs from a thread of the invocation.
	if res := f.MustInvoke(t, w, `"copied_context"`); !reflect.DeepEqual(res.Outputs, map[string]string{"from_thread": "1"}) {
		t.Fatalf("set_output from a thread run in the invocation's context: outputs = %v", res.Outputs)
	}
}

// Rule: deterministic failures are terminal: retrying the same input can
// only fail the same way.
func TestDeterministicFailuresAreTerminal(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for _, tc := range []struct{ name, handler, input, typ, msg string }{
		{"input nesting too deep to decode", "h.echo", deep, "InvalidInput", "input nests too deeply"},
		{"return value not serialisable", "h.unserializable", "null", "UnserializableOutput", "return value is not JSON-serializable: TypeError: Object of type set"},
		{"return value NaN", "h.nan", "null", "UnserializableOutput", "Out of range float values are not JSON compliant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := conformance.NewFixture(t, tc.handler, map[string]string{"h.py": handlerPy})
			w := f.Start(t)
			_, err := f.Invoke(t, w, tc.input)
			var he *functionruntime.HandlerError
			if !errors.As(err, &he) || !he.Terminal || he.Type != tc.typ || !strings.Contains(he.Message, tc.msg) {
				t.Fatalf("error = %v, want a terminal %s saying %q", err, tc.typ, tc.msg)
			}
		})
	}
}
