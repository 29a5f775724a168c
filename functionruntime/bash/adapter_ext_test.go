package bash_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	"github.com/fnbridge/fnbridge/internal/procstat"
)

// Rule: "It never evaluates either the handler or request payload as shell
// source": hostile payloads "must reach $1 byte for byte and create no
// file".
func TestPayloadIsNeverEvaluated(t *testing.T) { modes(t, testPayloadIsNeverEvaluated) }

func testPayloadIsNeverEvaluated(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "h.dot", map[string]string{"h.sh": handlerSh})
	w := f.Start(t)
	fa := a.NewFixture(t, "h.argc", map[string]string{"h.sh": handlerSh})
	fa.Dir = f.Dir
	argc := fa.Start(t)
	payloads := []string{
		"$(touch pwned1)", "`touch pwned2`", "; touch pwned3", "&& touch pwned4 ||", "| touch pwned5", "> pwned6",
		"a\nb\n", "\ntouch pwned7\n", `"double" 'single' \"escaped\"`, "*", "?", "[a-z]*", "~", "!!", "$((6*7))",
		"$HOME ${PATH} $1 $@ $#", `\\ back\slash \n`, "-n", "-e", "--", " spaced  ", "\ttab\t", "\r\n",
		"{\"json\": [1, \"$(id)\"]}", "日本語 ✓", "\xff\xfe invalid utf-8", "x'$(touch pwned8)'", "\x01\x02\x1b[31m",
		"", "%s %d %n",
	}
	for _, p := range payloads {
		res := f.MustInvoke(t, w, p)
		if got, want := string(res.Output), p+"."; got != want {
			t.Errorf("payload %q reached $1 as %q", p, strings.TrimSuffix(got, "."))
		}
		if got := string(fa.MustInvoke(t, argc, p).Output); got != "1" {
			t.Errorf("payload %q arrived as %s arguments, want exactly 1", p, got)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(f.Dir, "pwned*"))
	if len(matches) != 0 {
		t.Fatalf("payloads were executed: %v", matches)
	}
}

// Rule: the payload is read "byte-exactly ... so there is no exec argv size
// limit".
func TestLargeBinaryPayloadIsByteExact(t *testing.T) { modes(t, testLargeBinaryPayloadIsByteExact) }

func testLargeBinaryPayloadIsByteExact(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "h.dot", map[string]string{"h.sh": handlerSh})
	w := f.Start(t)
	payload := make([]byte, 4<<20) // 4 MiB, well over ARG_MAX's per-argument limit
	r := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(1 + r.IntN(255)) // any byte but NUL
	}
	res, err := w.Invoke(t.Context(), f.Invocation("big", payload))
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
func TestNULPayloadRejected(t *testing.T) { modes(t, testNULPayloadRejected) }

func testNULPayloadRejected(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "h.dot", map[string]string{"h.sh": handlerSh})
	w := f.Start(t)
	_, err := w.Invoke(t.Context(), f.Invocation("nul", []byte("ab\x00cd")))
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !he.Terminal || he.Type != "InvalidInput" || he.Code != 400 || !strings.Contains(he.Message, "offset 2") {
		t.Fatalf("error = %#v, want terminal InvalidInput (code 400) at offset 2", err)
	}
}

// Rule: "stdout is the output" with "a single trailing newline" removed,
// content type application/json for JSON, else text/plain.
func TestOutputAndContentType(t *testing.T) { modes(t, testOutputAndContentType) }

func testOutputAndContentType(t *testing.T, a *adaptertest.Adapter) {
	for _, tc := range []struct{ fn, out, ct string }{
		{"json", `{"ok": true}`, "application/json"},
		{"text", "hello world", "text/plain; charset=utf-8"},
		{"two_newlines", "a\n", "text/plain; charset=utf-8"},
		{"binary", "\xff\xfe", "application/octet-stream"},
		{"empty", "", "text/plain; charset=utf-8"},
	} {
		f := a.NewFixture(t, "h."+tc.fn, map[string]string{"h.sh": handlerSh})
		w := f.Start(t)
		res := f.MustInvoke(t, w, "")
		if string(res.Output) != tc.out || res.ContentType != tc.ct {
			t.Errorf("%s: output %q (%s), want %q (%s)", tc.fn, res.Output, res.ContentType, tc.out, tc.ct)
		}
	}
}

// Rule: "runs it in a subshell so exit N fails only that invocation and
// variables set by one invocation do not leak into the next".
func TestInvocationsAreIsolated(t *testing.T) {
	f := conformance.NewFixture(t, "h.leak", map[string]string{"h.sh": handlerSh})
	w := f.Start(t)
	for i := 0; i < 3; i++ {
		if got, want := string(f.MustInvoke(t, w, "").Output), "unset 0 "+f.Dir; got != want {
			t.Fatalf("call %d saw %q, want %q: state leaked from an earlier invocation", i, got, want)
		}
	}
}

// Shell options set by the handler file apply to the function, not to the
// worker's loop: set -euo pipefail must not turn a handler failure into a
// worker crash.
func TestStrictModeFile(t *testing.T) { modes(t, testStrictModeFile) }

func testStrictModeFile(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "strict.run", map[string]string{"strict.sh": `
set -euo pipefail
run() {
	case $1 in
	unset) echo "$NOT_SET" ;;
	false) false; echo "not reached" ;;
	*) echo ok ;;
	esac
}
`})
	w := f.Start(t)
	for _, tc := range []struct{ in, want string }{{"unset", "unbound variable"}, {"false", "exit status 1"}} {
		_, err := f.Invoke(t, w, tc.in)
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || !strings.Contains(he.Message, tc.want) {
			t.Fatalf("%s: error = %v, want a HandlerError containing %q", tc.in, err, tc.want)
		}
	}
	if got := string(f.MustInvoke(t, w, "x").Output); got != "ok" {
		t.Fatalf("after failures the worker returned %q", got)
	}
}

// Rule (README, Bash: shell options the file sets apply to every
// invocation): a set -e function sees inherit_errexit as the file left
// it, as under plain bash. The worker's brief POSIX mode (its check of
// the file's builtin and command functions) turns it on, and leaving
// POSIX mode does not turn it off: $(false; echo done) then failed the
// invocation where plain bash goes on.
func TestInheritErrexitIsTheFiles(t *testing.T) { modes(t, testInheritErrexitIsTheFiles) }

func testInheritErrexitIsTheFiles(t *testing.T, a *adaptertest.Adapter) {
	// want "" is a failure: inherit_errexit on, set -e ends the
	// substitution at grep and the assignment fails, as in plain bash.
	for file, want := range map[string]string{
		"set -e\n":                   "0,done|off",
		"shopt -s inherit_errexit\n": "",
	} {
		f := a.NewFixture(t, "ie.run", map[string]string{"ie.sh": file + `
run() { set -e; local x; x=$(grep -c nomatch /dev/null; echo done); printf '%s|%s' "${x//$'\n'/,}" "$(shopt inherit_errexit | cut -f2)"; }
`})
		w := f.Start(t)
		res, err := f.Invoke(t, w, "x")
		switch {
		case want == "" && err == nil:
			t.Errorf("file %q: %q, want the failure plain bash has", file, res.Output)
		case want != "" && (err != nil || string(res.Output) != want):
			t.Errorf("file %q: %q, %v; want %q", file, res.Output, err, want)
		}
	}
}

// A file that redefines builtins the bootstrap relies on cannot break it.
func TestFileShadowingBuiltins(t *testing.T) { modes(t, testFileShadowingBuiltins) }

func testFileShadowingBuiltins(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "sh.run", map[string]string{"sh.sh": `
read() { echo "shadowed read" >&2; return 1; }
printf() { builtin printf 'shadowed:'; builtin printf "$@"; }
exit() { echo "shadowed exit" >&2; }
shopt -s expand_aliases
alias builtin=false
run() { echo "run $1"; }
`})
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, "a").Output); got != "run a" {
		t.Fatalf("output = %q", got)
	}
}

// builtin and command are what the bootstrap reaches bash's own commands
// through: a file defining functions of those names is refused at once,
// naming them, where it hung its registration until the timeout while the
// loop's reads and writes went to its functions (a log line per byte).
// Every other builtin it may shadow (set, unset and export too, which the
// check itself runs as bash's own), and the check leaves nothing behind:
// no POSIX mode, no exported function.
// Rule (README, Compatibility): a bash older than 4.4 fails the
// registration naming its version, before the file is sourced. The
// interpreter here is bash whose version test reads a stand-in for the
// readonly BASH_VERSINFO.
func TestOldBashIsRefusedByVersion(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "bash43")
	script := "#!/bin/bash\na=(\"$@\")\na[3]=\"FAKEV=(4 3 30); BASH_VERSION='4.3.30(1)-release'; ${a[3]//BASH_VERSINFO/FAKEV}\"\nexec bash \"${a[@]}\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f := conformance.NewFixture(t, "sh.run", map[string]string{"sh.sh": "touch sourced\nrun() { echo run; }\n"})
	f.A = bash.New(bash.Options{Interpreter: fake, Grace: adaptertest.Grace})
	err := f.StartErr(t)
	if want := "is bash 4.3.30(1)-release; fnbridge needs bash 4.4 or newer"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Start = %v, want an error containing %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(f.Dir, "sourced")); err == nil {
		t.Fatal("the handler file was sourced by a bash the worker does not run on")
	}
}

func TestFileDefiningBuiltinOrCommandIsRefused(t *testing.T) {
	modes(t, testFileDefiningBuiltinOrCommandIsRefused)
}

func testFileDefiningBuiltinOrCommandIsRefused(t *testing.T, a *adaptertest.Adapter) {
	for file, names := range map[string]string{
		"builtin() { echo \"my builtin $*\" >&2; }\n":                                         "builtin",
		"command() { echo \"my command $*\" >&2; }\n":                                         "command",
		"set() { :; }\nunset() { :; }\nexport() { :; }\ncommand() { :; }\nbuiltin() { :; }\n": "builtin and command",
		// POSIX mode left on, its variable readonly: checked as it is.
		"readonly POSIXLY_CORRECT=y\nbuiltin() { :; }\n": "builtin",
	} {
		f := a.NewFixture(t, "sh.run", map[string]string{"sh.sh": file + "run() { echo run; }\n"})
		start := time.Now()
		err := f.StartErr(t)
		if want := "sh.sh defines a function named " + names + ", which would take the worker's own use of bash's " + names + ": rename it"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: Start = %v, want an error containing %q", file, err, want)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%q: refused after %s: it waited for a timeout", file, d)
		}
	}
	f := a.NewFixture(t, "sh.run", map[string]string{"sh.sh": `
set() { echo "shadowed set" >&2; }
unset() { echo "shadowed unset" >&2; }
export() { echo "shadowed export" >&2; }
run() { builtin printf '%s|%s|%s' "$1" "$(builtin shopt -o posix)" "$(env | grep -c BASH_FUNC)"; }
`})
	w := f.Start(t)
	if got, want := string(f.MustInvoke(t, w, "a").Output), "a|posix          \toff|0"; got != want {
		t.Fatalf("output = %q, want %q", got, want)
	}
	// A readonly POSIXLY_CORRECT (which the check must not assign) serves.
	f = a.NewFixture(t, "sh.run", map[string]string{"sh.sh": "readonly POSIXLY_CORRECT=x\nrun() { builtin printf '%s' \"$1\"; }\n"})
	if got := string(f.MustInvoke(t, f.Start(t), "b").Output); got != "b" {
		t.Fatalf("with a readonly POSIXLY_CORRECT: output = %q, want b", got)
	}
}

// The per-invocation environment is data even when the handler file gave
// one of its names an attribute: with declare -i, assigning a caller's
// tracestate would evaluate it as arithmetic, and a[$(cmd)] runs cmd.
func TestInvocationEnvIsNeverEvaluated(t *testing.T) { modes(t, testInvocationEnvIsNeverEvaluated) }

func testInvocationEnvIsNeverEvaluated(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "tr.f", map[string]string{"tr.sh": "declare -i TRACESTATE TRACEPARENT\nf() {\n  printf '%s|%s' \"$TRACEPARENT\" \"$TRACESTATE\"\n}\n"})
	w := f.Start(t)
	evil := "a[$(touch pwned)]"
	inv := f.Invocation("inv-tr", []byte("x"))
	inv.Env = map[string]string{functionruntime.EnvTracestate: evil, functionruntime.EnvTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := w.Invoke(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01|" + evil; string(res.Output) != want {
		t.Errorf("output %q, want %q", res.Output, want)
	}
	if _, err := os.Stat(filepath.Join(f.Dir, "pwned")); err == nil {
		t.Fatal("the caller's tracestate ran as code")
	}
}

// A worker whose scratch directory went away (a /dev/shm cleaner, a full
// tmpfs) cannot take an invocation: that is the worker's failure, never
// the function's, which did not run. The worker is replaced, and the next
// invocation works in a fresh directory.
func TestLostScratchDirectoryReplacesTheWorker(t *testing.T) {
	modes(t, testLostScratchDirectoryReplacesTheWorker)
}

func testLostScratchDirectoryReplacesTheWorker(t *testing.T, a *adaptertest.Adapter) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	f := a.NewFixture(t, "h.dot", map[string]string{"h.sh": handlerSh})
	w := f.Start(t)
	f.MustInvoke(t, w, "first")
	dirs, _ := filepath.Glob(filepath.Join(tmp, "fnbridge-bash-*"))
	if len(dirs) != 1 {
		t.Fatalf("scratch directories %v, want one", dirs)
	}
	if err := os.RemoveAll(dirs[0]); err != nil {
		t.Fatal(err)
	}
	_, err := f.Invoke(t, w, "second")
	var he *functionruntime.HandlerError
	if !errors.Is(err, functionruntime.ErrWorkerCrashed) || errors.As(err, &he) {
		t.Fatalf("err = %v, want a worker failure, not the handler's", err)
	}
	if got := string(f.MustInvoke(t, w, "third").Output); got != "third." {
		t.Fatalf("after a fresh worker: %q", got)
	}
}

// `kill 0` (or `kill $$`) in a function signals the worker's whole
// process group, its loop included: the worker dies, the invocation fails
// retryably as a crashed worker (its answer is not trusted: the function
// may have been cut short) and everything it started is gone; the next
// invocation gets a fresh worker. (README: end background jobs with
// `kill $(jobs -p)` instead.)
func TestKillZeroEndsTheWorker(t *testing.T) { modes(t, testKillZeroEndsTheWorker) }

func testKillZeroEndsTheWorker(t *testing.T, a *adaptertest.Adapter) {
	// Each waits until its job runs sleep: a signal that reaches a child
	// bash has only forked can be lost while bash resets its traps there
	// (seen on a loaded machine), which is bash's race, not the worker's.
	files := map[string]string{"k.sh": `started() { local c; until read -r c <"/proc/$1/comm" 2>/dev/null && [ "$c" = sleep ]; do :; done; }
work() {
  trap 'trap "" TERM; kill 0' EXIT
  sleep 30 &
  echo $! >"pid.$1"
  started $!
  printf 'result %s' "$1"
}
jobs_done() {
  trap 'kill $(jobs -p) 2>/dev/null' EXIT
  sleep 30 &
  echo $! >"pid.$1"
  started $!
  printf 'result %s' "$1"
}
`}
	f := conformance.NewFixture(t, "k.work", files)
	w := f.Start(t)
	gone := func(dir, in string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "pid."+in))
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		deadline := time.Now().Add(5 * time.Second)
		for pid != 0 && procstat.Alive(pid) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if pid == 0 || procstat.Alive(pid) {
			t.Errorf("invocation %s: its background sleep %d is still there", in, pid)
		}
	}
	for _, in := range []string{"a", "b"} {
		_, err := f.Invoke(t, w, in)
		if !errors.Is(err, functionruntime.ErrWorkerCrashed) {
			t.Fatalf("invocation %s: %v, want a crashed worker", in, err)
		}
		gone(f.Dir, in)
	}
	fj := conformance.NewFixture(t, "k.jobs_done", files)
	wj := fj.Start(t)
	if got := string(fj.MustInvoke(t, wj, "c").Output); got != "result c" {
		t.Fatalf("kill $(jobs -p): output %q", got)
	}
	gone(fj.Dir, "c")
}

// A handler file's ERR trap never runs in the worker's own loop, whose
// stdout is the response pipe: a failing function fails with its status,
// and the worker serves on.
func TestHandlerFileErrTrapStaysOutOfTheLoop(t *testing.T) {
	modes(t, testHandlerFileErrTrapStaysOutOfTheLoop)
}

func testHandlerFileErrTrapStaysOutOfTheLoop(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "e.fail", map[string]string{"e.sh": "trap 'echo \"ERR $LINENO\"' ERR\nfail() { [[ $1 != pid ]] || { printf %s \"$$\"; return 0; }; return 3; }\n"})
	w := f.Start(t)
	pid := f.PidOf(t, w)
	for i := 0; i < 2; i++ {
		_, err := f.Invoke(t, w, "x")
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.ExitCode != 3 {
			t.Fatalf("err = %v, want the function's status 3", err)
		}
	}
	if got := f.PidOf(t, w); got != pid {
		t.Fatalf("worker %d replaced by %d: the failure was taken for a crash", pid, got)
	}
}

// A function whose shell is killed fails with the signal's status, and
// the message, which the caller may see, names the signal without the
// worker's own source (bash prints a killed subshell's whole body).
func TestKilledFunctionShowsNoWorkerSource(t *testing.T) {
	f := conformance.NewFixture(t, "k.die", map[string]string{"k.sh": "die() { kill -9 $BASHPID; }\n"})
	w := f.Start(t)
	_, err := f.Invoke(t, w, "x")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.ExitCode != 137 {
		t.Fatalf("err = %v, want a failure with status 137", err)
	}
	if he.Message != "exit status 137 (killed)" {
		t.Fatalf("message %q, want the status and the signal alone (nothing of the worker)", he.Message)
	}
}

// Rule (package doc, Output): "Output over the server's bound fails the
// invocation terminally": the kinds table's adapter (the one the bridge
// and `bridge runtime serve` run) refuses 7 MiB and 20 MiB of stdout alike,
// as terminal, naming stdout and the server's 6 MiB, while exactly the
// bound with echo's trailing newline passes. An outputs file over its own
// bound is as terminal: the function already ran.
func TestKindsBashOutputBoundIsTheServers(t *testing.T) {
	modes(t, testKindsBashOutputBoundIsTheServers)
}

func testKindsBashOutputBoundIsTheServers(t *testing.T, a *adaptertest.Adapter) {
	k, _ := kinds.Lookup("bash")
	files := map[string]string{"big.sh": `
big() { head -c "$1" /dev/zero | tr '\0' x; }
exact() { head -c "$1" /dev/zero | tr '\0' x; echo; }
outs() { head -c 2000000 /dev/zero | tr '\0' a >"$FNBRIDGE_OUTPUTS"; echo ok; }
`}
	f := a.NewFixture(t, "big.big", files)
	f.A = k.New()
	w := f.Start(t)
	bound := strconv.Itoa(functionruntime.DefaultMaxOutputBytes)
	for _, n := range []int{7 << 20, 20 << 20} {
		_, err := f.Invoke(t, w, strconv.Itoa(n))
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || he.Type != "OutputTooLarge" || !he.Terminal ||
			!strings.Contains(he.Message, "stdout is "+strconv.Itoa(n)+" bytes") || !strings.Contains(he.Message, bound) {
			t.Fatalf("%d bytes: error = %#v, want a terminal OutputTooLarge naming stdout and %s", n, err, bound)
		}
	}
	exact := a.NewFixture(t, "big.exact", files)
	exact.A = k.New()
	we := exact.Start(t)
	if res := exact.MustInvoke(t, we, bound); len(res.Output) != functionruntime.DefaultMaxOutputBytes {
		t.Fatalf("exactly the bound plus a newline: %d bytes of output, want %s", len(res.Output), bound)
	}
	outs := a.NewFixture(t, "big.outs", files)
	outs.A = k.New()
	wo := outs.Start(t)
	_, err := outs.Invoke(t, wo, `1`)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "OutputTooLarge" || !he.Terminal || !strings.Contains(he.Message, "FNBRIDGE_OUTPUTS file") {
		t.Fatalf("outputs file of 2 MB: error = %#v, want a terminal OutputTooLarge naming FNBRIDGE_OUTPUTS", err)
	}
}

// The ERR trap that names a set -e failure while the file is sourced is
// gone once it is sourced: a function of a set -e file that fails fails
// with its own status and message, and a file's own ERR trap is its own.
func TestSourceErrTrapIsGoneAfterTheSource(t *testing.T) {
	modes(t, testSourceErrTrapIsGoneAfterTheSource)
}

func testSourceErrTrapIsGoneAfterTheSource(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "se.fail", map[string]string{"se.sh": "set -eE\nfalse || :\nfail() { echo 'own message' >&2; false; }\n"})
	w := f.Start(t)
	_, err := f.Invoke(t, w, "x")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.ExitCode != 1 || strings.Contains(he.Message, "ended the file") || !strings.Contains(he.Message, "own message") {
		t.Fatalf("err = %v, want the function's status 1 and its own message", err)
	}
}

// The common strict-mode header (set -Eeuo pipefail, IFS=$'\n\t', an ERR
// trap) keeps its trap in every invocation: the worker's check for
// errtrace read the options list joined with the file's IFS, and dropped
// the trap under this one.
func TestStrictModeHeaderKeepsItsErrTrap(t *testing.T) { modes(t, testStrictModeHeaderKeepsItsErrTrap) }

func testStrictModeHeaderKeepsItsErrTrap(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "s.run", map[string]string{"s.sh": `set -Eeuo pipefail
IFS=$'\n\t'
trap 'echo "ERR at line $LINENO: $BASH_COMMAND" >&2' ERR
run() { false | true; echo "not reached"; }
`})
	w := f.Start(t)
	_, err := f.Invoke(t, w, "x")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !strings.Contains(he.Message, "ERR at line") {
		t.Fatalf("err = %v, want the file's ERR trap's line as the message", err)
	}
}

// An output the function wrote is its result only if the file holding it
// is still there: a cleaner that removes it mid-invocation loses the
// output, which must not read as a successful empty result.
func TestRemovedStdoutFileIsNoEmptyResult(t *testing.T) {
	modes(t, testRemovedStdoutFileIsNoEmptyResult)
}

func testRemovedStdoutFileIsNoEmptyResult(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "r.run", map[string]string{"r.sh": `run() {
	echo '"lost"'
	[[ $1 != rm ]] || command rm -f "${FNBRIDGE_OUTPUTS%/*}"/s.*
}
`})
	w := f.Start(t)
	_, err := f.Invoke(t, w, "rm")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Terminal || !strings.Contains(he.Message, "removed during the invocation") {
		t.Fatalf("err = %v, want a retryable failure saying the output is lost", err)
	}
	if got := string(f.MustInvoke(t, w, "keep").Output); got != `"lost"` {
		t.Fatalf("the next invocation returned %q", got)
	}
}

// TMOUT set by the file is the function's (read without -t times out),
// as the file set it (exported or not, empty or not), not the worker's:
// the worker waits for its next request as long as it takes, on the same
// process.
func TestTMOUTInTheFileIsTheFunctions(t *testing.T) { modes(t, testTMOUTInTheFileIsTheFunctions) }

func testTMOUTInTheFileIsTheFunctions(t *testing.T, a *adaptertest.Adapter) {
	for _, tc := range []struct{ name, set, want string }{
		{"exported", "export TMOUT=1", "1|1"},
		{"plain", "TMOUT=1", "1|-"},
		{"empty", "TMOUT=", "|-"},
		{"none", "", "unset|-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := a.NewFixture(t, "t.run", map[string]string{"t.sh": tc.set + `
run() {
	case $1 in
	pid) printf '%s' "$$" ;;
	*) printf '%s|%s' "${TMOUT-unset}" "$(printenv TMOUT || printf -)" ;;
	esac
}
`})
			w := f.Start(t)
			pid := f.MustInvoke(t, w, "pid").Output
			// Idle past TMOUT (what is under test is time passing): neither
			// the loop waiting for the next key nor the subshell waiting for
			// its request may read it.
			time.Sleep(1500 * time.Millisecond)
			if got := f.MustInvoke(t, w, "pid").Output; string(got) != string(pid) {
				t.Fatalf("worker %s replaced by %s while idle", pid, got)
			}
			if got := string(f.MustInvoke(t, w, "x").Output); got != tc.want {
				t.Fatalf("the function's TMOUT|exported = %q, want %q", got, tc.want)
			}
		})
	}
}

// Under set -x, the message of a bare exit 100 is the function's last
// line on stderr, not the trace of the exit; a line over 1 KiB is cut at
// a character boundary.
func TestExitMessageSkipsTheExitTraceAndKeepsUTF8(t *testing.T) {
	modes(t, testExitMessageSkipsTheExitTraceAndKeepsUTF8)
}

func testExitMessageSkipsTheExitTraceAndKeepsUTF8(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "x.run", map[string]string{"x.sh": `run() {
	case $1 in
	traced) set -x; echo "order not found" >&2; exit 100 ;;
	long) { printf 'x%.0s' {1..1023}; printf 'ééééé\n'; } >&2; exit 100 ;;
	esac
}
`})
	w := f.Start(t)
	_, err := f.Invoke(t, w, "traced")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !he.Terminal || he.Message != "order not found" {
		t.Fatalf("err = %v, want terminal \"order not found\"", err)
	}
	_, err = f.Invoke(t, w, "long")
	if !errors.As(err, &he) || !utf8.ValidString(he.Message) || !strings.HasPrefix(he.Message, strings.Repeat("x", 1023)) {
		t.Fatalf("err = %v, want the line cut at a character boundary", err)
	}
}

// A file under set -x traces the function in each invocation, not the
// worker's own lines that set the file's options again before it.
func TestXtraceFileTracesTheFunctionOnly(t *testing.T) { modes(t, testXtraceFileTracesTheFunctionOnly) }

func testXtraceFileTracesTheFunctionOnly(t *testing.T, a *adaptertest.Adapter) {
	f := a.NewFixture(t, "x.run", map[string]string{"x.sh": "set -eux\nrun() { echo '\"ran\"'; }\n"})
	w := f.Start(t)
	before := len(f.Logs.Messages()) // the registration's own trace
	if got := string(f.MustInvoke(t, w, "x").Output); got != `"ran"` {
		t.Fatalf("output %q", got)
	}
	lines := f.Logs.Messages()[before:]
	for _, m := range lines {
		if strings.Contains(m, "__fnb_") {
			t.Fatalf("the invocation traced the worker's own line %q; its lines: %q", m, lines)
		}
	}
	if !slices.ContainsFunc(lines, func(m string) bool { return strings.Contains(m, "run x") }) {
		t.Fatalf("no trace of the function's call; its lines: %q", lines)
	}
}
