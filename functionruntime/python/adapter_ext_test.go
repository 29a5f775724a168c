package python_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	"github.com/fnbridge/fnbridge/functionruntime/python"
)

// Rule: "passes decoded JSON input, and encodes its return value as JSON
// output".
func TestInvokeDecodesAndEncodesJSON(t *testing.T) {
	f := conformance.NewFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	res := f.MustInvoke(t, w, `{"command": "status", "n": [1, 2.5, null, true]}`)
	if got, want := string(res.Output), `{"got":{"command":"status","n":[1,2.5,null,true]}}`; got != want {
		t.Fatalf("output = %s, want %s", got, want)
	}
	if res.ContentType != "application/json" {
		t.Fatalf("content type = %q, want application/json", res.ContentType)
	}
	if res.Outputs != nil {
		t.Fatalf("outputs = %v, want none", res.Outputs)
	}
}

func TestInvokeEmptyInputIsNone(t *testing.T) {
	f := conformance.NewFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, "").Output); got != `{"got":null}` {
		t.Fatalf("output = %s, want {\"got\":null}", got)
	}
}

func TestInvokeDottedModule(t *testing.T) {
	f := conformance.NewFixture(t, "pkg.sub.handler.main", map[string]string{
		"pkg/__init__.py":           "",
		"pkg/sub/__init__.py":       "",
		"pkg/sub/handler.py":        "from . import helper\ndef main(e):\n    return helper.double(e)\n",
		"pkg/sub/helper.py":         "def double(x):\n    return x * 2\n",
		"unrelated_not_imported.py": "raise SystemExit('must not be imported')\n",
	})
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, "21").Output); got != "42" {
		t.Fatalf("output = %s, want 42", got)
	}
}

func TestInvokeUnicodeRoundTrip(t *testing.T) {
	f := conformance.NewFixture(t, "h.unicode", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	res := f.MustInvoke(t, w, `"日本 \ud83d\ude00"`)
	var got map[string]string
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatalf("output %q is not JSON: %v", res.Output, err)
	}
	if got["text"] != "héllo ✓" || got["in"] != "日本 😀" {
		t.Fatalf("output = %q", res.Output)
	}
}

func TestInvokeAsyncHandler(t *testing.T) {
	f := conformance.NewFixture(t, "h.coro", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, `1`).Output); got != `{"async":1}` {
		t.Fatalf("output = %s", got)
	}
}

// A handler takes the decoded input or, as Restate's SDKs allow, nothing
// (the input is then not passed); a bound method, optional parameters and
// *args get the input. A decorated function (functools.wraps,
// lru_cache) and a callable object are read by their own signature.
func TestHandlerShapes(t *testing.T) {
	const shapes = `
import functools

def noarg():
    return "no input"

def timed(fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        return fn(*a, **k)
    return wrapper

@timed
def deco_noarg():
    return "decorated, no input"

@timed
def deco_arg(x):
    return ["decorated", x]

@functools.lru_cache(maxsize=None)
def cached_noarg():
    return "cached"

def with_db(fn):
    @functools.wraps(fn)
    def wrapper(x):
        return fn("db", x)
    return wrapper

@with_db
def injected(db, x):
    return [db, x]

class Callable:
    def __call__(self):
        return "object, no input"

obj_noarg = Callable()

def optional(x, y=2):
    return [x, y]

def star(*args):
    return list(args)

class Greeter:
    def greet(self, name):
        return "hi " + name

method = Greeter().greet
`
	for handler, want := range map[string]string{"s.noarg": `"no input"`, "s.optional": `["a",2]`, "s.star": `["a"]`, "s.method": `"hi a"`,
		"s.deco_noarg": `"decorated, no input"`, "s.deco_arg": `["decorated","a"]`, "s.cached_noarg": `"cached"`, "s.obj_noarg": `"object, no input"`,
		"s.injected": `["db","a"]`} {
		f := conformance.NewFixture(t, handler, map[string]string{"s.py": shapes})
		if got := string(f.MustInvoke(t, f.Start(t), `"a"`).Output); got != want {
			t.Errorf("%s: output = %s, want %s", handler, got, want)
		}
	}
}

// Rule: one long-lived worker per registration: module state persists
// across warm invocations.
func TestWorkerIsLongLived(t *testing.T) {
	f := conformance.NewFixture(t, "h.count", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	for i := 1; i <= 3; i++ {
		if got := string(f.MustInvoke(t, w, "null").Output); got != string(rune('0'+i)) {
			t.Fatalf("call %d returned %s: the module was not kept loaded", i, got)
		}
	}
}

// Rule: "Exceptions fail the invocation with type and message
// (HandlerError) and the traceback goes to the logs" (the HandlerError
// itself is checked by the conformance suite's Failures): the traceback is
// one record at warn, on the invocation, from the handler's frame on (the
// worker's own frame left out), so a filter on the level keeps it whole.
func TestExceptionTracebackIsLogged(t *testing.T) {
	f := conformance.NewFixture(t, "h.boom", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	_, err := f.Invoke(t, w, `"x"`)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "ValueError" {
		t.Fatalf("error = %v, want a ValueError HandlerError", err)
	}
	if len(f.Logs.Records("Traceback (most recent call last)")) == 0 {
		t.Fatalf("no traceback in logs: %v", f.Logs.Messages())
	}
	recs := f.Logs.Records(`raise ValueError("bad value: %s" % event)`)
	if len(recs) == 0 {
		t.Fatalf("traceback does not show the raising line: %v", f.Logs.Messages())
	}
	for _, r := range recs {
		if r["invocation_id"] != "inv-1" {
			t.Fatalf("traceback line without invocation_id: %v", r)
		}
	}
	if len(recs) != 1 || recs[0]["level"] != "warn" {
		t.Fatalf("traceback records %v, want one at warn", recs)
	}
	msg := recs[0]["message"].(string)
	if !strings.HasPrefix(msg, "Traceback (most recent call last):\n  File \""+filepath.Join(f.Dir, "h.py")) || strings.Contains(msg, "<string>") ||
		!strings.HasSuffix(msg, "ValueError: bad value: x") {
		t.Fatalf("traceback %q, want it from the handler's frame to the exception, without the worker's", msg)
	}
}

// An output value with a lone surrogate (text decoded with
// surrogateescape) has no UTF-8 form: refused terminally as a broken bound
// is, where the bridge would have read it as another value (U+FFFD).
func TestOutputWithALoneSurrogateIsRefused(t *testing.T) {
	f := conformance.NewFixture(t, "s.run", map[string]string{"s.py": `import fnbridge

def run(x):
    fnbridge.set_output("a", "\ud800x")
    return "set"
`})
	_, err := f.Invoke(t, f.Start(t), "null")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !he.Terminal || he.Type != "InvalidOutputs" || !strings.Contains(he.Message, "lone surrogate") {
		t.Fatalf("err = %v, want a terminal InvalidOutputs naming the lone surrogate", err)
	}
}

// A traceback reaches the logs after an earlier invocation replaced
// sys.stderr (a library capturing output), which would have swallowed it.
func TestTracebackSurvivesAReplacedStderr(t *testing.T) {
	f := conformance.NewFixture(t, "s.run", map[string]string{"s.py": `import io, sys

def run(x):
    if x == "capture":
        sys.stderr = io.StringIO()
        return "captured"
    raise ValueError("after the capture")
`})
	w := f.Start(t)
	f.MustInvoke(t, w, `"capture"`)
	if _, err := f.Invoke(t, w, `"boom"`); err == nil {
		t.Fatal("the second invocation succeeded")
	}
	if len(f.Logs.Records("ValueError: after the capture")) == 0 {
		t.Fatalf("no traceback in the logs: %v", f.Logs.Messages())
	}
}

// Rule: "an invalid JSON input fails that invocation with a clear error,
// not the worker".
func TestInvalidJSONInput(t *testing.T) {
	f := conformance.NewFixture(t, "h.count", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	// Python's own decoder takes NaN and Infinity; JSON does not.
	for _, input := range []string{`{"unterminated": `, `NaN`, `[1, -Infinity]`, "\"\xff\""} {
		_, err := f.Invoke(t, w, input)
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || !he.Terminal || he.Type != "InvalidInput" || he.Code != 400 || !strings.Contains(he.Message, "not valid JSON") {
			t.Fatalf("input %q: error = %#v, want terminal InvalidInput with code 400", input, err)
		}
	}
	if got := string(f.MustInvoke(t, w, "null").Output); got != "1" {
		t.Fatalf("after invalid input the handler ran %s times, want 1 (worker kept, function not called)", got)
	}
}

func TestNonJSONContentTypeRejected(t *testing.T) {
	f := conformance.NewFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	inv := f.Invocation("inv-ct", []byte("hello"))
	inv.ContentType = "text/plain"
	_, err := w.Invoke(t.Context(), inv)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !he.Terminal || he.Type != "UnsupportedContentType" || he.Code != 415 {
		t.Fatalf("error = %v (code %d), want terminal UnsupportedContentType, code 415", err, he.Code)
	}
	inv.ContentType = "application/vnd.api+json; charset=utf-8"
	inv.Input = []byte(`1`)
	if _, err := w.Invoke(t.Context(), inv); err != nil {
		t.Fatalf("+json content type rejected: %v", err)
	}
}

// Rule: "Outputs: fnbridge.set_output(key, value) and/or the file named by
// env FNBRIDGE_OUTPUTS (key=value lines)", fresh for every invocation;
// set_output wins over the file. (The file alone, and its bad lines, are
// checked by the conformance suite's OutputsFile.)
func TestSetOutputMergesWithFile(t *testing.T) {
	f := conformance.NewFixture(t, "h.outputs", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	res := f.MustInvoke(t, w, `{"set": true, "file": "from_file=a=b\r\n\nboth=file\n"}`)
	want := map[string]string{"from_api": "api", "from_file": "a=b", "both": "api wins"}
	if !reflect.DeepEqual(res.Outputs, want) {
		t.Fatalf("outputs = %v, want %v", res.Outputs, want)
	}
	if res := f.MustInvoke(t, w, `{}`); res.Outputs != nil {
		t.Fatalf("second invocation outputs = %v, want none (fresh per invocation)", res.Outputs)
	}
}

func TestSetOutputRejectsNonString(t *testing.T) {
	f := conformance.NewFixture(t, "h.bad_output_value", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	_, err := f.Invoke(t, w, "null")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "TypeError" || !strings.Contains(he.Message, "value must be str, not int") {
		t.Fatalf("error = %v", err)
	}
}

func TestLargeInputAndOutput(t *testing.T) {
	f := conformance.NewFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	big := strings.Repeat("abcdefgh", 1<<17) // 1 MiB
	res := f.MustInvoke(t, w, `"`+big+`"`)
	if want := `{"got":"` + big + `"}`; string(res.Output) != want {
		t.Fatalf("1 MiB round trip: got %d bytes, want %d", len(res.Output), len(want))
	}
}

// The kinds table's Python adapter (the one the bridge and `bridge runtime
// serve` run) refuses a return value over the server's 6 MiB output bound
// naming that bound: a 7 MiB and a 60 MiB value get the same figure.
func TestKindsPythonOutputBoundIsTheServers(t *testing.T) {
	k, _ := kinds.Lookup("python")
	f := conformance.NewFixture(t, "big.big", map[string]string{"big.py": "def big(n):\n    return 'x' * n\n"})
	f.A = k.New()
	w := f.Start(t)
	for _, n := range []int{7 << 20, 60 << 20} {
		_, err := f.Invoke(t, w, strconv.Itoa(n))
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.Type != "OutputTooLarge" || !strings.Contains(he.Message, strconv.Itoa(functionruntime.DefaultMaxOutputBytes)) {
			t.Fatalf("%d bytes: error = %v, want OutputTooLarge naming %d", n, err, functionruntime.DefaultMaxOutputBytes)
		}
	}
}

func TestOutputTooLarge(t *testing.T) {
	f := conformance.NewFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	f.A = python.New(python.Options{MaxOutput: 100})
	w := f.Start(t)
	_, err := f.Invoke(t, w, `"`+strings.Repeat("x", 200)+`"`)
	var he *functionruntime.HandlerError
	// Terminal: the same return value can only be too large again.
	if !errors.As(err, &he) || he.Type != "OutputTooLarge" || !he.Terminal {
		t.Fatalf("error = %v, want a terminal OutputTooLarge", err)
	}
	if got := string(f.MustInvoke(t, w, `1`).Output); got != `{"got":1}` {
		t.Fatalf("worker unusable after an oversized output: %s", got)
	}
}

// The injected fnbridge module wins over a file of the same name.
func TestFnbridgeModuleCannotBeShadowed(t *testing.T) {
	f := conformance.NewFixture(t, "h.terminal", map[string]string{
		"h.py":        handlerPy,
		"fnbridge.py": "raise RuntimeError('shadow module imported')\n",
	})
	w := f.Start(t)
	_, err := f.Invoke(t, w, "null")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "fnbridge.TerminalError" || !he.Terminal {
		t.Fatalf("error = %v, want fnbridge.TerminalError", err)
	}
}

// Outputs are bounded: a handler cannot push unbounded outputs through the
// protocol, and the worker survives the attempt. Rule: "Outputs that break
// a bound fail the invocation terminally (500, naming the bound)", the
// largest too (they were retried, though a retry sets them again).
func TestHugeOutputsRejected(t *testing.T) {
	f := conformance.NewFixture(t, "h.huge_outputs", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	for i := 0; i < 2; i++ {
		_, err := f.Invoke(t, w, "null")
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.Type != "InvalidOutputs" || !he.Terminal || !strings.Contains(he.Message, "more than the 1048576 allowed") {
			t.Fatalf("call %d: error = %v, want a terminal InvalidOutputs", i, err)
		}
	}
}

// A worker that cannot return to its working directory after an
// invocation (the function removed it) never runs the function elsewhere:
// each later invocation fails retryably, naming the directory, until the
// directory is back.
func TestLostWorkingDirectoryIsNamedUntilItIsBack(t *testing.T) {
	f := conformance.NewFixture(t, "h.vanish", map[string]string{"h.py": handlerPy})
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, `"remove"`).Output); got != `"gone"` {
		t.Fatalf("output = %s", got)
	}
	for i := 0; i < 2; i++ {
		_, err := f.Invoke(t, w, "null")
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.Terminal || he.Type != "WorkingDirectoryLost" || !strings.Contains(he.Message, "could not return to its working directory "+f.Dir) {
			t.Fatalf("invocation %d after: %v, want a retryable error naming the working directory", i+1, err)
		}
	}
	if err := os.Mkdir(f.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := string(f.MustInvoke(t, w, "null").Output); got != `"here"` {
		t.Fatalf("with the directory back: %s, want the function to run there", got)
	}
}

// A handler written as a file path is refused with an error that says so,
// not one about an empty or odd identifier.
func TestHandlerPathsAreExplained(t *testing.T) {
	for _, h := range []string{"../py/handler.handle", "/srv/fn/h.main", "pkg/handler.main"} {
		if err := python.ValidateHandler(h); err == nil || !strings.Contains(err.Error(), `python handler "`+h+`" is a path: name the module with dots`) {
			t.Errorf("ValidateHandler(%q) = %v, want it called a path", h, err)
		}
	}
}

// Rule: "print and logging go to the logs": a logger's info record reaches
// them at info, as the README promises, although Python's defaults would
// drop it; debug stays below the root logger's INFO. It holds however the
// function first imports logging: at its import, through a submodule,
// after a probe that loads nothing, or inside the function.
func TestLoggingInfoReachesTheLogs(t *testing.T) {
	const body = `
def run(event):
    import logging
    log = logging.getLogger("app")
    log.info("an info record %s", event)
    log.debug("a debug record")
    log.warning("a warning record")
    return None
`
	for name, head := range map[string]string{
		"imported with the module":  "import logging\n",
		"a submodule first":         "import logging.handlers\n",
		"after a find_spec probe":   "import importlib.util\nassert importlib.util.find_spec('logging') is not None\n",
		"first inside the function": "",
	} {
		t.Run(name, func(t *testing.T) {
			f := conformance.NewFixture(t, "lg.run", map[string]string{"lg.py": head + body})
			w := f.Start(t)
			f.MustInvoke(t, w, `1`)
			for msg, level := range map[string]string{"INFO:app:an info record 1": "info", "WARNING:app:a warning record": "warn"} {
				recs := f.Logs.Records(msg)
				if len(recs) != 1 || recs[0]["level"] != level || recs[0]["source"] != "handler" {
					t.Errorf("%q: records %v, want one at %s from the handler (all: %v)", msg, recs, level, f.Logs.Messages())
				}
			}
			if recs := f.Logs.Records("a debug record"); len(recs) != 0 {
				t.Errorf("debug record logged: %v", recs)
			}
		})
	}
}

// A function that configures logging itself gets what it configured: its
// level and its format, not the worker's.
func TestLoggingConfiguredByTheFunctionIsKept(t *testing.T) {
	f := conformance.NewFixture(t, "lg.run", map[string]string{"lg.py": `import logging

logging.basicConfig(level=logging.WARNING, format="mine %(levelname)s %(message)s")


def run(event):
    logging.getLogger("app").info("an info record")
    logging.getLogger("app").error("an error record")
    return None
`})
	w := f.Start(t)
	f.MustInvoke(t, w, `1`)
	if recs := f.Logs.Records("mine ERROR an error record"); len(recs) != 1 {
		t.Errorf("the function's own format is not kept: %v", f.Logs.Messages())
	}
	if recs := f.Logs.Records("an info record"); len(recs) != 0 {
		t.Errorf("info logged under the function's WARNING: %v", recs)
	}
}

// The handler's module imports fnbridge, so a multiprocessing child
// started with spawn or forkserver (which import the module afresh; 3.14's
// default start method on Linux) must be able to import it too: its names
// load, and its context calls raise, naming why.
func TestMultiprocessingChildrenImportFnbridge(t *testing.T) {
	f := conformance.NewFixture(t, "mp.pool", map[string]string{"mp.py": `
import multiprocessing
import fnbridge

def square(x):
    return x * x

def outside(_):
    try:
        fnbridge.key()
    except RuntimeError as e:
        return str(e)
    return "no error"

def pool(method):
    with multiprocessing.get_context(method).Pool(2) as p:
        return [p.map(square, range(4)), p.map(outside, [0])[0], fnbridge.TerminalError("x", code=404).code]
`})
	w := f.Start(t)
	for _, method := range []string{"spawn", "forkserver"} {
		res := f.MustInvoke(t, w, `"`+method+`"`)
		want := `[[0,1,4,9],"fnbridge.key: context calls work only in the function's worker process, not in a process it started (a multiprocessing child)",404]`
		if string(res.Output) != want {
			t.Fatalf("%s: output %s, want %s", method, res.Output, want)
		}
	}
}
