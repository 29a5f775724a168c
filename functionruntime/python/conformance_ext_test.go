package python_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/python"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(lateRequestRole); dir != "" {
		serveLateRequest(dir) // never returns
	}
	adaptertest.Main(m, conformance)
}

// TestConformance runs the behaviours every built-in adapter shares.
func TestConformance(t *testing.T) { adaptertest.Run(t, conformance) }

// jsonText spells s as a JSON string: python handlers take and return JSON.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

var hPy = map[string]string{"h.py": handlerPy}

// conformance describes the python adapter to the shared suite; the
// handler functions it names are in handlerPy.
var conformance = &adaptertest.Adapter{
	Kind:        "python",
	Interpreter: "python3",
	New: func(o adaptertest.Options) functionruntime.Adapter {
		return python.New(python.Options{Interpreter: o.Interpreter, Grace: o.Grace})
	},
	Text: jsonText,
	Decode: func(b []byte) (string, error) {
		var s string
		err := json.Unmarshal(b, &s)
		return s, err
	},

	// "Python imports module.function": the module may be dotted, every
	// part an identifier.
	ValidHandlers: []string{"h.handle", "pkg.sub.handler.main", "_m._f", "M1.f2"},
	InvalidHandlers: []string{"", "handle", ".f", "m.", "a..b", "1m.f", "m.1f", "m.f-x", "m/f.g", "../m.f", "m.f ", "m.f()", "m.é",
		longDotted, "m." + strings.Repeat("f", 255)}, // 257 bytes: over the server's bound
	StartFailures: brokenModules,
	SymlinkInside: adaptertest.Case{
		Handler: adaptertest.Handler{Handler: "alias.f", Files: map[string]string{"real.py": "def f(x):\n    return 'inside'\n"}},
		Setup: func(t testing.TB, dir string) {
			if err := os.Symlink(filepath.Join(dir, "real.py"), filepath.Join(dir, "alias.py")); err != nil {
				t.Fatal(err)
			}
		},
		Input: "null", Output: `"inside"`,
	},
	Env: adaptertest.EnvCase{
		Handler: adaptertest.Handler{Handler: "h.env", Files: hPy},
		Parse: func(b []byte) (map[string]string, error) {
			var env map[string]string
			err := json.Unmarshal(b, &env)
			return env, err
		},
		ServerVars: map[string]string{"PYTHONPATH": "/should/be/ignored"},
		// LC_CTYPE may be added by the interpreter itself (PEP 538 locale coercion).
		Added: []string{"LC_CTYPE"},
	},
	// The working directory is also "put on sys.path explicitly".
	Cwd: adaptertest.Handler{Handler: "h.cwd", Files: hPy},
	CwdAtLoad: adaptertest.Handler{Handler: "moved.cwd", Files: map[string]string{
		"h.py": handlerPy, "moved.py": "import os\nos.chdir('/')\nfrom h import cwd\n"}},
	WantCwd: func(dir string) string {
		b, _ := json.Marshal(map[string]string{"cwd": dir, "path0": dir})
		return string(b)
	},
	// "Exceptions fail the invocation with type and message
	// (HandlerError)"; "Terminal (do-not-retry) failure: raising an
	// exception whose class is named TerminalError".
	Failures: []adaptertest.Failure{
		{Name: "exception", Handler: adaptertest.Handler{Handler: "h.boom", Files: hPy}, Calls: []adaptertest.FailedCall{
			{Input: `"x"`, Want: functionruntime.HandlerError{Type: "ValueError", Message: "bad value: x"}},
			{Input: `"y"`, Want: functionruntime.HandlerError{Type: "ValueError", Message: "bad value: y"}},
		}},
		{Name: "fnbridge.TerminalError", Handler: adaptertest.Handler{Handler: "h.terminal", Files: hPy}, Calls: []adaptertest.FailedCall{
			{Input: "null", Want: functionruntime.HandlerError{Terminal: true, Type: "fnbridge.TerminalError", Message: "do not retry me", Code: 500}},
		}},
		{Name: "fnbridge.TerminalError with a code", Handler: adaptertest.Handler{Handler: "h.terminal_code", Files: hPy}, Calls: []adaptertest.FailedCall{
			{Input: "null", Want: functionruntime.HandlerError{Terminal: true, Type: "fnbridge.TerminalError", Message: "no such order", Code: 404}},
		}},
		{Name: "own TerminalError class", Handler: adaptertest.Handler{Handler: "h.custom_terminal", Files: hPy}, Calls: []adaptertest.FailedCall{
			{Input: "null", Want: functionruntime.HandlerError{Terminal: true, Type: "h.TerminalError", Message: "my own terminal class"}},
		}},
		{Name: "a TerminalError whose code is status_code, as the Restate SDK's", Handler: adaptertest.Handler{Handler: "h.sdk_terminal", Files: hPy}, Calls: []adaptertest.FailedCall{
			{Input: "null", Want: functionruntime.HandlerError{Terminal: true, Type: "h.SDKTerminalError", Message: "not found", Code: 404}},
		}},
	},
	Outputs:       adaptertest.Handler{Handler: "h.outputs_file", Files: hPy},
	OutputsResult: `"ok"`,

	Lifecycle: adaptertest.Handler{Handler: "h.lifecycle", Files: hPy},
	LoadLine:  "importing h.py",
	Spawns:    []string{"spawn", "spawn_inherit", "spawn_orphan"},
	Crashes:   []adaptertest.Crash{{Event: "crash", Want: "exit status 3"}, {Event: "sigkill", Want: "signal: killed"}},
	BreakRestart: []adaptertest.Breakage{
		{Name: "syntax broken", Break: func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "h.py"), []byte("def lifecycle(:\n"), 0o644)
		}, Want: "SyntaxError"},
		{Name: "file deleted", Break: func(dir string) error {
			return os.Remove(filepath.Join(dir, "h.py"))
		}, Want: "No module named 'h'"},
	},
	// An import that hangs.
	SlowStart: adaptertest.Handler{Handler: "slow.handle", Files: map[string]string{
		"slow.py": "import os, time\nopen('pid.tmp', 'w').write(str(os.getpid())); os.rename('pid.tmp', 'pid')\ntime.sleep(60)\ndef handle(e): pass\n",
	}},

	// "print() and logging go to the logs".
	Logs:          adaptertest.Handler{Handler: "h.chatty", Files: map[string]string{"h.py": "print('loading at import')\n" + handlerPy}},
	LogsResult:    `"quiet"`,
	Lines:         []string{"hello from print", "WARNING:root:hello from logging", "a structured line", "partial line without newline"},
	Levels:        []string{"info", "warn", "error", "info"},
	LoadLines:     []string{"loading at import", "importing h.py"},
	BigLine:       adaptertest.Handler{Handler: "h.bigline", Files: hPy},
	BigLineInput:  strconv.Itoa,
	BigLineResult: `"done"`,

	Orphans: adaptertest.Handler{Handler: "orphan.run", Files: map[string]string{"orphan.py": orphanPy}},
}
