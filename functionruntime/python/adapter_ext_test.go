package python_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/python"
)

func TestKind(t *testing.T) {
	if got := python.New(python.Options{}).Kind(); got != "python" {
		t.Fatalf("Kind() = %q, want python", got)
	}
}

// Rule: "Python imports module.function" — module may be dotted, every part
// an identifier.
func TestValidateHandler(t *testing.T) {
	a := python.New(python.Options{})
	for _, h := range []string{"h.handle", "pkg.sub.handler.main", "_m._f", "M1.f2"} {
		if err := a.ValidateHandler(h); err != nil {
			t.Errorf("ValidateHandler(%q) = %v, want nil", h, err)
		}
	}
	for _, h := range []string{"", "handle", ".f", "m.", "a..b", "1m.f", "m.1f", "m.f-x", "m/f.g", "../m.f", "m.f ", "m.f()", "m.é", strings.Repeat("a.", 300) + "b"} {
		if err := a.ValidateHandler(h); err == nil {
			t.Errorf("ValidateHandler(%q) = nil, want an error", h)
		}
	}
}

// Rule: a broken handler fails Start "with an error whose text is a useful
// fatal_error, e.g. the exception type+message".
func TestStartBrokenHandlerFatalError(t *testing.T) {
	for _, tc := range brokenModules {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			if tc.file != "" {
				files[tc.file] = tc.content
			}
			f := newFixture(t, tc.handler, files)
			err := f.startErr(t)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start error = %q, want it to contain %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.handler) {
				t.Fatalf("Start error = %q, want it to name the handler %q", err, tc.handler)
			}
		})
	}
}

func TestStartRejectsBadWorkingDir(t *testing.T) {
	f := newFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	f.spec.Dir = "relative/dir"
	if err := f.startErr(t); !strings.Contains(err.Error(), "not absolute") {
		t.Fatalf("Start error = %v, want 'not absolute'", err)
	}
	f.spec.Dir = f.dir + "/missing"
	if err := f.startErr(t); !strings.Contains(err.Error(), "working directory") {
		t.Fatalf("Start error = %v, want a working directory error", err)
	}
}

func TestStartMissingInterpreter(t *testing.T) {
	f := newFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	f.a = python.New(python.Options{Interpreter: "no-such-python-interpreter"})
	if err := f.startErr(t); !strings.Contains(err.Error(), "no-such-python-interpreter") {
		t.Fatalf("Start error = %v, want it to name the interpreter", err)
	}
}

// Rule: "passes decoded JSON input, and encodes its return value as JSON
// output".
func TestInvokeDecodesAndEncodesJSON(t *testing.T) {
	f := newFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	res := f.mustInvoke(t, w, `{"command": "status", "n": [1, 2.5, null, true]}`)
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
	f := newFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	if got := string(f.mustInvoke(t, w, "").Output); got != `{"got":null}` {
		t.Fatalf("output = %s, want {\"got\":null}", got)
	}
}

func TestInvokeDottedModule(t *testing.T) {
	f := newFixture(t, "pkg.sub.handler.main", map[string]string{
		"pkg/__init__.py":           "",
		"pkg/sub/__init__.py":       "",
		"pkg/sub/handler.py":        "from . import helper\ndef main(e):\n    return helper.double(e)\n",
		"pkg/sub/helper.py":         "def double(x):\n    return x * 2\n",
		"unrelated_not_imported.py": "raise SystemExit('must not be imported')\n",
	})
	w := f.start(t)
	if got := string(f.mustInvoke(t, w, "21").Output); got != "42" {
		t.Fatalf("output = %s, want 42", got)
	}
}

func TestInvokeUnicodeRoundTrip(t *testing.T) {
	f := newFixture(t, "h.unicode", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	res := f.mustInvoke(t, w, `"日本 \ud83d\ude00"`)
	var got map[string]string
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatalf("output %q is not JSON: %v", res.Output, err)
	}
	if got["text"] != "héllo ✓" || got["in"] != "日本 😀" {
		t.Fatalf("output = %q", res.Output)
	}
}

func TestInvokeAsyncHandler(t *testing.T) {
	f := newFixture(t, "h.coro", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	if got := string(f.mustInvoke(t, w, `1`).Output); got != `{"async":1}` {
		t.Fatalf("output = %s", got)
	}
}

// Rule: one long-lived worker per registration: module state persists
// across warm invocations.
func TestWorkerIsLongLived(t *testing.T) {
	f := newFixture(t, "h.count", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	for i := 1; i <= 3; i++ {
		if got := string(f.mustInvoke(t, w, "null").Output); got != string(rune('0'+i)) {
			t.Fatalf("call %d returned %s: the module was not kept loaded", i, got)
		}
	}
}

// Rule: workers get "the registration env plus a minimal base (PATH, LANG,
// HOME)" and "NEVER the server's own environment".
func TestEnvironmentIsIsolated(t *testing.T) {
	t.Setenv("FNBRIDGE_TEST_SECRET", "hunter2")
	t.Setenv("PYTHONPATH", "/should/be/ignored")
	f := newFixture(t, "h.env", map[string]string{"h.py": handlerPy})
	f.spec.Env = map[string]string{"GREETING": "Hello", "LANG": "en_US.UTF-8"}
	w := f.start(t)
	var env map[string]string
	if err := json.Unmarshal(f.mustInvoke(t, w, "null").Output, &env); err != nil {
		t.Fatal(err)
	}
	if _, ok := env["FNBRIDGE_TEST_SECRET"]; ok {
		t.Fatalf("handler sees the server's secret variable: %v", env)
	}
	outputs := env["FNBRIDGE_OUTPUTS"]
	delete(env, "FNBRIDGE_OUTPUTS")
	if outputs == "" {
		t.Fatalf("FNBRIDGE_OUTPUTS not set")
	}
	// LC_CTYPE may be added by the interpreter itself (PEP 538 locale coercion).
	delete(env, "LC_CTYPE")
	want := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "en_US.UTF-8", "HOME": f.dir, "GREETING": "Hello",
	}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("handler environment = %v, want %v", env, want)
	}
}

// Rule: "Workers run with cwd = the registered working directory" and the
// working directory is "put on sys.path explicitly".
func TestWorkingDirectory(t *testing.T) {
	f := newFixture(t, "h.cwd", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	var got map[string]string
	if err := json.Unmarshal(f.mustInvoke(t, w, "null").Output, &got); err != nil {
		t.Fatal(err)
	}
	if got["cwd"] != f.dir || got["path0"] != f.dir {
		t.Fatalf("cwd/sys.path[0] = %v, want %s", got, f.dir)
	}
}

// Rule: "Exceptions fail the invocation with type and message
// (HandlerError) and the traceback goes to the logs."
func TestExceptionIsHandlerError(t *testing.T) {
	f := newFixture(t, "h.boom", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	_, err := f.invoke(t, w, `"x"`)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) {
		t.Fatalf("error = %v, want a HandlerError", err)
	}
	if he.Terminal || he.Type != "ValueError" || he.Message != "bad value: x" || he.ExitCode != 0 {
		t.Fatalf("HandlerError = %+v", he)
	}
	if len(f.logs.Records("Traceback (most recent call last)")) == 0 {
		t.Fatalf("no traceback in logs: %v", f.logs.Messages())
	}
	for _, r := range f.logs.Records(`raise ValueError("bad value: %s" % event)`) {
		if r["invocation_id"] != "inv-1" {
			t.Fatalf("traceback line without invocation_id: %v", r)
		}
	}
	// The worker survives a handler exception.
	if _, err := f.invoke(t, w, `"y"`); !errors.As(err, &he) || he.Message != "bad value: y" {
		t.Fatalf("second call: %v", err)
	}
}

// Rule: "Terminal (do-not-retry) failure: raising an exception whose class
// is named TerminalError".
func TestTerminalError(t *testing.T) {
	for _, tc := range []struct{ handler, typ, msg string }{
		{"h.terminal", "fnbridge.TerminalError", "do not retry me"},
		{"h.custom_terminal", "h.TerminalError", "my own terminal class"},
	} {
		f := newFixture(t, tc.handler, map[string]string{"h.py": handlerPy})
		w := f.start(t)
		_, err := f.invoke(t, w, "null")
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || !he.Terminal || he.Type != tc.typ || he.Message != tc.msg {
			t.Fatalf("%s: error = %#v, want terminal %s", tc.handler, err, tc.typ)
		}
	}
}

// Rule: "an invalid JSON input fails that invocation with a clear error,
// not the worker".
func TestInvalidJSONInput(t *testing.T) {
	f := newFixture(t, "h.count", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	_, err := f.invoke(t, w, `{"unterminated": `)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !he.Terminal || he.Type != "InvalidInput" || !strings.Contains(he.Message, "not valid JSON") {
		t.Fatalf("error = %v, want terminal InvalidInput", err)
	}
	if got := string(f.mustInvoke(t, w, "null").Output); got != "1" {
		t.Fatalf("after invalid input the handler ran %s times, want 1 (worker kept, function not called)", got)
	}
}

func TestNonJSONContentTypeRejected(t *testing.T) {
	f := newFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	inv := f.invocation("inv-ct", "hello")
	inv.ContentType = "text/plain"
	_, err := w.Invoke(t.Context(), inv)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !he.Terminal || he.Type != "UnsupportedContentType" {
		t.Fatalf("error = %v, want terminal UnsupportedContentType", err)
	}
	inv.ContentType = "application/vnd.api+json; charset=utf-8"
	inv.Input = []byte(`1`)
	if _, err := w.Invoke(t.Context(), inv); err != nil {
		t.Fatalf("+json content type rejected: %v", err)
	}
}

// Rule: "non-serializable return ⇒ clear handler error".
func TestUnserializableReturn(t *testing.T) {
	for _, tc := range []struct{ handler, want string }{
		{"h.unserializable", "Object of type set is not JSON serializable"},
		{"h.nan", "Out of range float values are not JSON compliant"},
	} {
		f := newFixture(t, tc.handler, map[string]string{"h.py": handlerPy})
		w := f.start(t)
		_, err := f.invoke(t, w, "null")
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.Terminal || !strings.Contains(he.Message, "not JSON-serializable") || !strings.Contains(he.Message, tc.want) {
			t.Fatalf("%s: error = %v", tc.handler, err)
		}
	}
}

// Rule: "Outputs: fnbridge.set_output(key, value) and/or the file named by
// env FNBRIDGE_OUTPUTS (key=value lines)", fresh for every invocation.
func TestOutputs(t *testing.T) {
	f := newFixture(t, "h.outputs", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	res := f.mustInvoke(t, w, `{"set": true, "file": "from_file=a=b\r\n\nboth=file\n"}`)
	want := map[string]string{"from_api": "api", "from_file": "a=b", "both": "api wins"}
	if !reflect.DeepEqual(res.Outputs, want) {
		t.Fatalf("outputs = %v, want %v", res.Outputs, want)
	}
	if res := f.mustInvoke(t, w, `{}`); res.Outputs != nil {
		t.Fatalf("second invocation outputs = %v, want none (fresh per invocation)", res.Outputs)
	}
	_, err := f.invoke(t, w, `{"file": "no equals sign\n"}`)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "InvalidOutputs" || !strings.Contains(he.Message, "line 1: missing '='") {
		t.Fatalf("bad outputs line: error = %v", err)
	}
	_, err = f.invoke(t, w, `{"file": "bad key=1\n"}`)
	if !errors.As(err, &he) || !strings.Contains(he.Message, `invalid output key "bad key"`) {
		t.Fatalf("bad outputs key: error = %v", err)
	}
}

func TestSetOutputRejectsNonString(t *testing.T) {
	f := newFixture(t, "h.bad_output_value", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	_, err := f.invoke(t, w, "null")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "TypeError" || !strings.Contains(he.Message, "value must be str, not int") {
		t.Fatalf("error = %v", err)
	}
}

func TestLargeInputAndOutput(t *testing.T) {
	f := newFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	big := strings.Repeat("abcdefgh", 1<<17) // 1 MiB
	res := f.mustInvoke(t, w, `"`+big+`"`)
	if want := `{"got":"` + big + `"}`; string(res.Output) != want {
		t.Fatalf("1 MiB round trip: got %d bytes, want %d", len(res.Output), len(want))
	}
}

func TestOutputTooLarge(t *testing.T) {
	f := newFixture(t, "h.echo", map[string]string{"h.py": handlerPy})
	f.a = python.New(python.Options{MaxOutput: 100})
	w := f.start(t)
	_, err := f.invoke(t, w, `"`+strings.Repeat("x", 200)+`"`)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "OutputTooLarge" {
		t.Fatalf("error = %v, want OutputTooLarge", err)
	}
	if got := string(f.mustInvoke(t, w, `1`).Output); got != `{"got":1}` {
		t.Fatalf("worker unusable after an oversized output: %s", got)
	}
}

// The injected fnbridge module wins over a file of the same name.
func TestFnbridgeModuleCannotBeShadowed(t *testing.T) {
	f := newFixture(t, "h.terminal", map[string]string{
		"h.py":        handlerPy,
		"fnbridge.py": "raise RuntimeError('shadow module imported')\n",
	})
	w := f.start(t)
	_, err := f.invoke(t, w, "null")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "fnbridge.TerminalError" || !he.Terminal {
		t.Fatalf("error = %v, want fnbridge.TerminalError", err)
	}
}

// Outputs are bounded: a handler cannot push unbounded outputs through the
// protocol, and the worker survives the attempt.
func TestHugeOutputsRejected(t *testing.T) {
	f := newFixture(t, "h.huge_outputs", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	for i := 0; i < 2; i++ {
		_, err := f.invoke(t, w, "null")
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.Type != "InvalidOutputs" || !strings.Contains(he.Message, "more than the 1048576 allowed") {
			t.Fatalf("call %d: error = %v, want InvalidOutputs", i, err)
		}
	}
}
