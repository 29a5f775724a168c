package bash_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
)

func TestMain(m *testing.M) { adaptertest.Main(m, conformance) }

// TestConformance runs the behaviours every built-in adapter shares.
func TestConformance(t *testing.T) { adaptertest.Run(t, conformance) }

// TestConformanceInline runs them with every invocation in the worker's
// own shell (bash.subshell: false): an exit, a failure under set -e or a
// crash ends the worker there, and each must still end its invocation as
// the contract says, the next one served by a fresh worker.
func TestConformanceInline(t *testing.T) { adaptertest.Run(t, conformanceInline) }

var hSh = map[string]string{"h.sh": handlerSh}

// conformance and conformanceInline describe the bash adapter to the
// shared suite, without and with inline invocations; the handler
// functions they name are in handlerSh.
var conformance, conformanceInline = describe(false), describe(true)

func describe(inline bool) *adaptertest.Adapter {
	return &adaptertest.Adapter{
		Inline:      inline,
		Kind:        "bash",
		Interpreter: "bash",
		New: func(o adaptertest.Options) functionruntime.Adapter {
			return bash.New(bash.Options{Interpreter: o.Interpreter, Grace: o.Grace})
		},
		// The input is "$1" byte for byte; stdout is the output.
		Text:   func(s string) string { return s },
		Decode: func(b []byte) (string, error) { return string(b), nil },

		// "ValidateHandler rejects anything but name.function with a safe file
		// stem and a valid bash function name (no /, no .., no metacharacters,
		// no absolute path)".
		ValidHandlers: []string{"handler.main", "my-file.fn_2", "_x._y", "0file.f"},
		InvalidHandlers: []string{
			"", "handler", ".main", "handler.", "a.b.c", "../x.f", "/etc/passwd.f", "dir/x.f", "x.sh.f",
			"-x.f", "x.1f", "x.f-g", "x.$(id)", "x.f;id", "x.f g", "x y.f", "x.`id`", "x.f\n", "x*.f", "é.f",
			"x.eval", "x.exec", "x.if",
			strings.Repeat("a", 129) + ".f",
			strings.Repeat("a", 128) + "." + strings.Repeat("f", 128), // 257 bytes: over the server's bound
		},
		// "sources file.sh and validates that function exists" at registration.
		StartFailures: startFailures,
		SymlinkInside: adaptertest.Case{
			Handler: adaptertest.Handler{Handler: "alias.text", Files: map[string]string{"lib/h.sh": handlerSh}},
			Setup: func(t testing.TB, dir string) {
				if err := os.Symlink("lib/h.sh", filepath.Join(dir, "alias.sh")); err != nil {
					t.Fatal(err)
				}
			},
			Input: "", Output: "hello world",
		},
		Env: adaptertest.EnvCase{
			Handler: adaptertest.Handler{Handler: "h.env_dump", Files: hSh},
			Parse: func(b []byte) (map[string]string, error) {
				env := map[string]string{}
				for _, line := range strings.Split(string(b), "\n") {
					k, v, _ := strings.Cut(line, "=")
					env[k] = v
				}
				return env, nil
			},
			ServerVars: map[string]string{"BASH_ENV": "/should/not/be/sourced"},
			// Variables bash itself exports to its children, and the payload
			// file (see TestPayloadFile).
			Added: []string{"PWD", "SHLVL", "OLDPWD", "_", bash.InputFileEnv},
		},
		Cwd: adaptertest.Handler{Handler: "h.where", Files: hSh},
		CwdAtLoad: adaptertest.Handler{Handler: "moved.where", Files: map[string]string{
			"h.sh": handlerSh, "moved.sh": "source ./h.sh\ncd /\n"}},
		WantCwd: func(dir string) string { return dir },
		// "a documented exit status (e.g. 100) ⇒ HandlerError{Terminal:true};
		// any other non-zero ⇒ non-terminal HandlerError with ExitCode and the
		// last stderr line(s) as message".
		Failures: []adaptertest.Failure{
			exitFailure("exit 3", "h.fail", 3, false, "exit status %d: something went wrong: %s"),
			exitFailure("exit 100 is terminal", "h.terminal", bash.TerminalExitStatus, true, "order %s not found"),
			exitFailure("return 7", "h.ret", 7, false, "exit status %d"),
		},
		Outputs:       adaptertest.Handler{Handler: "h.outputs", Files: hSh},
		OutputsResult: "done",

		Lifecycle: adaptertest.Handler{Handler: "h.lifecycle", Files: hSh},
		LoadLine:  "sourcing h.sh, on stderr",
		Spawns:    []string{"spawn", "spawn_quiet"},
		Crashes:   []adaptertest.Crash{{Event: "crash", Want: "signal: killed"}},
		BreakRestart: []adaptertest.Breakage{
			{Name: "file deleted", Break: func(dir string) error { return os.Remove(filepath.Join(dir, "h.sh")) }, Want: "h.sh not found"},
			{Name: "syntax broken", Break: func(dir string) error {
				return os.WriteFile(filepath.Join(dir, "h.sh"), []byte("lifecycle() {\n"), 0o644)
			}, Want: "syntax error"},
			{Name: "replaced by an escaping symlink", Break: func(dir string) error {
				_ = os.Remove(filepath.Join(dir, "h.sh"))
				return os.Symlink("/etc/profile", filepath.Join(dir, "h.sh"))
			}, Want: "outside the working directory"},
		},
		// A file that hangs while being sourced.
		SlowStart: adaptertest.Handler{Handler: "slow.run", Files: map[string]string{
			"slow.sh": "echo $$ >pid.tmp && mv pid.tmp pid\nsleep 60\nrun() { :; }\n",
		}},

		// "stderr goes to logs"; what the file prints while it is sourced,
		// stdout included, goes to the registration's logger.
		Logs:          adaptertest.Handler{Handler: "h.chatty", Files: hSh},
		LogsResult:    "out",
		Lines:         []string{"to stderr", "[debug] a bracketed level", "a JSON line", "partial"},
		Levels:        []string{"info", "debug", "warn", "info"},
		LoadLines:     []string{"sourcing h.sh", "sourcing h.sh, on stderr"},
		BigLine:       adaptertest.Handler{Handler: "h.bigline", Files: hSh},
		BigLineInput:  strconv.Itoa,
		BigLineResult: "done",

		Orphans: adaptertest.Handler{Handler: "h.run", Files: map[string]string{"h.sh": orphanSh}},
	}
}

// exitFailure is a function failing with status code on inputs x and y,
// its message format taking the status and the input.
func exitFailure(name, handler string, code int, terminal bool, format string) adaptertest.Failure {
	f := adaptertest.Failure{Name: name, Handler: adaptertest.Handler{Handler: handler, Files: hSh}}
	for _, in := range []string{"x", "y"} {
		msg := strings.Replace(format, "%d", strconv.Itoa(code), 1)
		msg = strings.Replace(msg, "%s", in, 1)
		f.Calls = append(f.Calls, adaptertest.FailedCall{Input: in, Want: functionruntime.HandlerError{
			Terminal: terminal, Type: "exit", Message: msg, ExitCode: code,
		}})
	}
	return f
}

// startFailures are handlers that cannot be loaded, with the texts the
// registration's fatal error must carry.
var startFailures = []adaptertest.StartFailure{
	{Name: "missing file", Handler: adaptertest.Handler{Handler: "nofile.f"}, Want: []string{"nofile.sh not found"}},
	{Name: "missing function", Handler: adaptertest.Handler{Handler: "h.nosuch", Files: hSh},
		Want: []string{"function nosuch is not defined in h.sh"}},
	{Name: "syntax error", Handler: adaptertest.Handler{Handler: "bad.f", Files: map[string]string{"bad.sh": "f() {\n  echo hi\n\nif then\n}\n"}},
		Want: []string{"sourcing bad.sh failed with status 2", "syntax error near unexpected token `then'"}},
	{Name: "non-zero source status", Handler: adaptertest.Handler{Handler: "st.f", Files: map[string]string{"st.sh": "f() { :; }\necho 'config missing' >&2\nfalse\n"}},
		Want: []string{"sourcing st.sh failed with status 1", "config missing"}},
	{Name: "exit while sourcing", Handler: adaptertest.Handler{Handler: "ex.f", Files: map[string]string{"ex.sh": "echo 'bye' >&2\nexit 9\n"}},
		Want: []string{"worker exited while sourcing ex.sh (exit status 9)", "bye"}},
	// The failing command is named by file and line (bash alone said
	// "pop_var_context: head of shell_variables not a function context",
	// on a line of the worker's own source).
	{Name: "set -e failure while sourcing", Handler: adaptertest.Handler{Handler: "se.f", Files: map[string]string{"se.sh": "set -euo pipefail\nf() { :; }\nV=$(grep nomatch /dev/null)\n"}},
		Want: []string{"worker exited while sourcing se.sh (exit status 1)", "fnbridge: se.sh: line 3: a command failed with status 1, and set -e ended the file"}},
	{Name: "symlink outside", Handler: adaptertest.Handler{Handler: "link.f"},
		Setup: func(t testing.TB, dir string) { linkOutside(t, dir, "link.sh", false) },
		Want:  []string{"outside the working directory"}},
	{Name: "relative symlink escaping", Handler: adaptertest.Handler{Handler: "rel.f"},
		Setup: func(t testing.TB, dir string) { linkOutside(t, dir, "rel.sh", true) },
		Want:  []string{"outside the working directory"}},
	{Name: "directory", Handler: adaptertest.Handler{Handler: "d.f", Files: map[string]string{"d.sh/x": ""}}, Want: []string{"not a regular file"}},
}

// linkOutside makes dir/name a symlink to a file outside dir, spelled
// relative to dir (../../…/evil.sh) or absolute.
func linkOutside(t testing.TB, dir, name string, relative bool) {
	t.Helper()
	outside := t.TempDir()
	adaptertest.WriteFiles(t, outside, map[string]string{"evil.sh": "f() { echo evil; }\n"})
	target := filepath.Join(outside, "evil.sh")
	if relative {
		rel, err := filepath.Rel(dir, target)
		if err != nil {
			t.Fatal(err)
		}
		target = rel
	}
	if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
