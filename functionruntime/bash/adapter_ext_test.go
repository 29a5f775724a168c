package bash_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
)

func TestKind(t *testing.T) {
	if got := bash.New(bash.Options{}).Kind(); got != "bash" {
		t.Fatalf("Kind() = %q, want bash", got)
	}
}

// Rule: "ValidateHandler rejects anything but name.function with a safe
// file stem and a valid bash function name (no /, no .., no
// metacharacters, no absolute path)".
func TestValidateHandler(t *testing.T) {
	a := bash.New(bash.Options{})
	for _, h := range []string{"handler.main", "my-file.fn_2", "_x._y", "0file.f"} {
		if err := a.ValidateHandler(h); err != nil {
			t.Errorf("ValidateHandler(%q) = %v, want nil", h, err)
		}
	}
	for _, h := range []string{
		"", "handler", ".main", "handler.", "a.b.c", "../x.f", "/etc/passwd.f", "dir/x.f", "x.sh.f",
		"-x.f", "x.1f", "x.f-g", "x.$(id)", "x.f;id", "x.f g", "x y.f", "x.`id`", "x.f\n", "x*.f", "é.f",
		strings.Repeat("a", 129) + ".f",
	} {
		if err := a.ValidateHandler(h); err == nil {
			t.Errorf("ValidateHandler(%q) = nil, want an error", h)
		}
	}
}

// Rule: "sources file.sh and validates that function exists" at
// registration; failures are a useful fatal_error.
func TestStartFailures(t *testing.T) {
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"evil.sh": "f() { echo evil; }\n"})
	for _, tc := range []struct {
		name, handler string
		files         map[string]string
		link          [2]string // symlink: name in dir → target
		want          []string
	}{
		{name: "missing file", handler: "nofile.f", want: []string{"nofile.sh not found"}},
		{name: "missing function", handler: "h.nosuch", files: map[string]string{"h.sh": handlerSh},
			want: []string{"function nosuch is not defined in h.sh"}},
		{name: "syntax error", handler: "bad.f", files: map[string]string{"bad.sh": "f() {\n  echo hi\n\nif then\n}\n"},
			want: []string{"sourcing bad.sh failed with status 2", "syntax error near unexpected token `then'"}},
		{name: "non-zero source status", handler: "st.f", files: map[string]string{"st.sh": "f() { :; }\necho 'config missing' >&2\nfalse\n"},
			want: []string{"sourcing st.sh failed with status 1", "config missing"}},
		{name: "exit while sourcing", handler: "ex.f", files: map[string]string{"ex.sh": "echo 'bye' >&2\nexit 9\n"},
			want: []string{"worker exited while sourcing ex.sh (exit status 9)", "bye"}},
		{name: "set -e failure while sourcing", handler: "se.f", files: map[string]string{"se.sh": "set -e\nf() { :; }\nfalse\n"},
			want: []string{"worker exited while sourcing se.sh (exit status 1)"}},
		{name: "symlink outside", handler: "link.f", link: [2]string{"link.sh", filepath.Join(outside, "evil.sh")},
			want: []string{"outside the working directory"}},
		{name: "relative symlink escaping", handler: "rel.f", link: [2]string{"rel.sh", "relative"},
			want: []string{"outside the working directory"}},
		{name: "directory", handler: "d.f", files: map[string]string{"d.sh/x": ""}, want: []string{"not a regular file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.handler, tc.files)
			if tc.link[0] != "" {
				target := tc.link[1]
				if target == "relative" { // ../../…/evil.sh, spelled relative to the working directory
					rel, err := filepath.Rel(f.dir, filepath.Join(outside, "evil.sh"))
					if err != nil {
						t.Fatal(err)
					}
					target = rel
				}
				if err := os.Symlink(target, filepath.Join(f.dir, tc.link[0])); err != nil {
					t.Fatal(err)
				}
			}
			err := f.startErr(t)
			for _, w := range append(tc.want, tc.handler) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Start error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestSymlinkInsideWorkingDirIsAllowed(t *testing.T) {
	f := newFixture(t, "alias.text", map[string]string{"lib/h.sh": handlerSh})
	if err := os.Symlink("lib/h.sh", filepath.Join(f.dir, "alias.sh")); err != nil {
		t.Fatal(err)
	}
	w := f.start(t)
	if got := string(f.mustInvoke(t, w, "").Output); got != "hello world" {
		t.Fatalf("output = %q", got)
	}
}

// Rule: "It never evaluates either the handler or request payload as shell
// source": hostile payloads "must reach $1 byte for byte and create no
// file".
func TestPayloadIsNeverEvaluated(t *testing.T) {
	f := newFixture(t, "h.dot", map[string]string{"h.sh": handlerSh})
	w := f.start(t)
	fa := newFixture(t, "h.argc", map[string]string{"h.sh": handlerSh})
	fa.dir = f.dir
	argc := fa.start(t)
	payloads := []string{
		"$(touch pwned1)", "`touch pwned2`", "; touch pwned3", "&& touch pwned4 ||", "| touch pwned5", "> pwned6",
		"a\nb\n", "\ntouch pwned7\n", `"double" 'single' \"escaped\"`, "*", "?", "[a-z]*", "~", "!!", "$((6*7))",
		"$HOME ${PATH} $1 $@ $#", `\\ back\slash \n`, "-n", "-e", "--", " spaced  ", "\ttab\t", "\r\n",
		"{\"json\": [1, \"$(id)\"]}", "日本語 ✓", "\xff\xfe invalid utf-8", "x'$(touch pwned8)'", "\x01\x02\x1b[31m",
		"", "%s %d %n",
	}
	for _, p := range payloads {
		res := f.mustInvoke(t, w, p)
		if got, want := string(res.Output), p+"."; got != want {
			t.Errorf("payload %q reached $1 as %q", p, strings.TrimSuffix(got, "."))
		}
		if got := string(fa.mustInvoke(t, argc, p).Output); got != "1" {
			t.Errorf("payload %q arrived as %s arguments, want exactly 1", p, got)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(f.dir, "pwned*"))
	if len(matches) != 0 {
		t.Fatalf("payloads were executed: %v", matches)
	}
}

// Rule: the payload is read "byte-exactly ... so there is no exec argv size
// limit".
func TestLargeBinaryPayloadIsByteExact(t *testing.T) {
	f := newFixture(t, "h.dot", map[string]string{"h.sh": handlerSh})
	w := f.start(t)
	payload := make([]byte, 4<<20) // 4 MiB, well over ARG_MAX's per-argument limit
	r := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(1 + r.IntN(255)) // any byte but NUL
	}
	res, err := w.Invoke(t.Context(), f.invocation("big", payload))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.Output, append(payload, '.')) {
		t.Fatalf("4 MiB payload came back altered (%d bytes)", len(res.Output))
	}
	if res.ContentType != "application/octet-stream" {
		t.Fatalf("content type of invalid UTF-8 output = %q", res.ContentType)
	}
}

// Rule: "document that NUL bytes are rejected".
func TestNULPayloadRejected(t *testing.T) {
	f := newFixture(t, "h.dot", map[string]string{"h.sh": handlerSh})
	w := f.start(t)
	_, err := w.Invoke(t.Context(), f.invocation("nul", []byte("ab\x00cd")))
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !he.Terminal || he.Type != "InvalidInput" || !strings.Contains(he.Message, "offset 2") {
		t.Fatalf("error = %v, want terminal InvalidInput at offset 2", err)
	}
}

// Rule: "stdout is the output" with "a single trailing newline" removed,
// content type application/json for JSON, else text/plain.
func TestOutputAndContentType(t *testing.T) {
	for _, tc := range []struct{ fn, out, ct string }{
		{"json", `{"ok": true}`, "application/json"},
		{"text", "hello world", "text/plain; charset=utf-8"},
		{"two_newlines", "a\n", "text/plain; charset=utf-8"},
		{"binary", "\xff\xfe", "application/octet-stream"},
		{"empty", "", "text/plain; charset=utf-8"},
	} {
		f := newFixture(t, "h."+tc.fn, map[string]string{"h.sh": handlerSh})
		w := f.start(t)
		res := f.mustInvoke(t, w, "")
		if string(res.Output) != tc.out || res.ContentType != tc.ct {
			t.Errorf("%s: output %q (%s), want %q (%s)", tc.fn, res.Output, res.ContentType, tc.out, tc.ct)
		}
	}
}

// Rule: "runs it in a subshell so exit N fails only that invocation and
// variables set by one invocation do not leak into the next".
func TestInvocationsAreIsolated(t *testing.T) {
	f := newFixture(t, "h.leak", map[string]string{"h.sh": handlerSh})
	w := f.start(t)
	for i := 0; i < 3; i++ {
		if got, want := string(f.mustInvoke(t, w, "").Output), "unset 0 "+f.dir; got != want {
			t.Fatalf("call %d saw %q, want %q: state leaked from an earlier invocation", i, got, want)
		}
	}
}

// Rule: "a documented exit status (e.g. 100) ⇒ HandlerError{Terminal:true};
// any other non-zero ⇒ non-terminal HandlerError with ExitCode and the last
// stderr line(s) as message".
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		fn       string
		code     int
		terminal bool
		msg      string
	}{
		{"fail", 3, false, "exit status 3: something went wrong: x"},
		{"terminal", 100, true, "exit status 100: order x not found"},
		{"ret", 7, false, "exit status 7"},
	} {
		f := newFixture(t, "h."+tc.fn, map[string]string{"h.sh": handlerSh})
		w := f.start(t)
		_, err := f.invoke(t, w, "x")
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) {
			t.Fatalf("%s: error = %v, want HandlerError", tc.fn, err)
		}
		want := functionruntime.HandlerError{Terminal: tc.terminal, Type: "exit", Message: tc.msg, ExitCode: tc.code}
		if *he != want {
			t.Fatalf("%s: HandlerError = %+v, want %+v", tc.fn, *he, want)
		}
		// The worker itself survived: the next call runs.
		if _, err := f.invoke(t, w, "y"); !errors.As(err, &he) || he.ExitCode != tc.code {
			t.Fatalf("%s: second call = %v", tc.fn, err)
		}
	}
}

// Rule: "Outputs: file named by env FNBRIDGE_OUTPUTS with key=value lines
// (fresh empty file per invocation; parse; bad lines ⇒ clear error)".
func TestOutputs(t *testing.T) {
	f := newFixture(t, "h.outputs", map[string]string{"h.sh": handlerSh})
	w := f.start(t)
	res := f.mustInvoke(t, w, "order_id=A-17\nurl=https://x/?a=b\r\n\nstatus=old\nstatus=new\n")
	want := map[string]string{"order_id": "A-17", "url": "https://x/?a=b", "status": "new"}
	if !reflect.DeepEqual(res.Outputs, want) {
		t.Fatalf("outputs = %v, want %v", res.Outputs, want)
	}
	if string(res.Output) != "done" {
		t.Fatalf("output = %q", res.Output)
	}
	if res := f.mustInvoke(t, w, ""); res.Outputs != nil {
		t.Fatalf("outputs of a later invocation = %v, want none (fresh file)", res.Outputs)
	}
	for _, tc := range []struct{ in, want string }{
		{"ok=1\njust text\n", "FNBRIDGE_OUTPUTS line 2: missing '='"},
		{"=v\n", "empty output key"},
		{"9lives=v\n", `invalid output key "9lives"`},
	} {
		_, err := f.invoke(t, w, tc.in)
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.Type != "InvalidOutputs" || !strings.Contains(he.Message, tc.want) {
			t.Fatalf("outputs %q: error = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// Rule: workers get "the registration env plus a minimal base (PATH, LANG,
// HOME)" and "NEVER the server's own environment".
func TestEnvironmentIsIsolated(t *testing.T) {
	t.Setenv("FNBRIDGE_TEST_SECRET", "hunter2")
	t.Setenv("BASH_ENV", "/should/not/be/sourced")
	f := newFixture(t, "h.env_dump", map[string]string{"h.sh": handlerSh})
	f.spec.Env = map[string]string{"GREETING": "Hello world", "PATH": "/bin:/usr/bin"}
	w := f.start(t)
	env := map[string]string{}
	for _, line := range strings.Split(string(f.mustInvoke(t, w, "").Output), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	if _, ok := env["FNBRIDGE_TEST_SECRET"]; ok {
		t.Fatalf("handler sees the server's secret variable")
	}
	if env["FNBRIDGE_OUTPUTS"] == "" {
		t.Fatalf("FNBRIDGE_OUTPUTS not set")
	}
	// Variables bash itself exports to its children.
	for _, k := range []string{"FNBRIDGE_OUTPUTS", "PWD", "SHLVL", "OLDPWD", "_"} {
		delete(env, k)
	}
	want := map[string]string{"PATH": "/bin:/usr/bin", "LANG": "C.UTF-8", "HOME": f.dir, "GREETING": "Hello world"}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("handler environment = %v, want %v", env, want)
	}
}

// Rule: "Workers run with cwd = the registered working directory".
func TestWorkingDirectory(t *testing.T) {
	f := newFixture(t, "h.where", map[string]string{"h.sh": handlerSh})
	w := f.start(t)
	if got := string(f.mustInvoke(t, w, "").Output); got != f.dir {
		t.Fatalf("pwd = %q, want %q", got, f.dir)
	}
}

// Shell options set by the handler file apply to the function, not to the
// worker's loop: set -euo pipefail must not turn a handler failure into a
// worker crash.
func TestStrictModeFile(t *testing.T) {
	f := newFixture(t, "strict.run", map[string]string{"strict.sh": `
set -euo pipefail
run() {
	case $1 in
	unset) echo "$NOT_SET" ;;
	false) false; echo "not reached" ;;
	*) echo ok ;;
	esac
}
`})
	w := f.start(t)
	for _, tc := range []struct{ in, want string }{{"unset", "unbound variable"}, {"false", "exit status 1"}} {
		_, err := f.invoke(t, w, tc.in)
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || !strings.Contains(he.Message, tc.want) {
			t.Fatalf("%s: error = %v, want a HandlerError containing %q", tc.in, err, tc.want)
		}
	}
	if got := string(f.mustInvoke(t, w, "x").Output); got != "ok" {
		t.Fatalf("after failures the worker returned %q", got)
	}
}

// A file that redefines builtins the bootstrap relies on cannot break it.
func TestFileShadowingBuiltins(t *testing.T) {
	f := newFixture(t, "sh.run", map[string]string{"sh.sh": `
read() { echo "shadowed read" >&2; return 1; }
printf() { builtin printf 'shadowed:'; builtin printf "$@"; }
exit() { echo "shadowed exit" >&2; }
shopt -s expand_aliases
alias builtin=false
run() { echo "run $1"; }
`})
	w := f.start(t)
	if got := string(f.mustInvoke(t, w, "a").Output); got != "run a" {
		t.Fatalf("output = %q", got)
	}
}
