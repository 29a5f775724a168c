package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// ctxEnv serves a context endpoint on a unix socket and points the
// environment at it; attempt opens an attempt on the journal and sets its
// token.
type ctxEnv struct {
	t    *testing.T
	s    *stepctx.Server
	addr string
	j    *stepctxtest.Journal
	a    *stepctx.Attempt
	// opts configure every attempt (the handler it runs).
	opts []stepctx.AttemptOption
}

func newCtxEnv(t *testing.T, j *stepctxtest.Journal, opts ...stepctx.AttemptOption) *ctxEnv {
	dir := testtool.SocketDir(t)
	l, err := stepctx.Listen("unix://" + filepath.Join(dir, "c.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := stepctx.NewServer(stepctx.Config{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	e := &ctxEnv{t: t, s: s, addr: stepctx.URL(l), j: j, opts: opts}
	t.Setenv(stepctx.EnvAddr, e.addr)
	e.attempt()
	return e
}

// attempt closes the current attempt, if any, and opens the next one,
// which replays the journal.
func (e *ctxEnv) attempt() {
	if e.a != nil {
		e.a.Close()
		e.j.Restart()
	}
	a, err := e.s.Open("", e.j, e.opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(a.Close)
	e.a = a
	e.t.Setenv(stepctx.EnvToken, a.Token())
}

type ctxRun struct {
	code           int
	stdout, stderr string
}

func fnbridge(t *testing.T, stdin string, args ...string) ctxRun {
	t.Helper()
	var out, errb bytes.Buffer
	code := runCtx(args, strings.NewReader(stdin), &out, &errb)
	return ctxRun{code, out.String(), errb.String()}
}

func (r ctxRun) want(t *testing.T, code int, stdout, stderrSub string) {
	t.Helper()
	if r.code != code || r.stdout != stdout || !strings.Contains(r.stderr, stderrSub) {
		t.Fatalf("got exit %d stdout %q stderr %q\nwant exit %d stdout %q stderr containing %q", r.code, r.stdout, r.stderr, code, stdout, stderrSub)
	}
}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestCtxRunReplaysWithoutRunningCMD(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	marker := filepath.Join(t.TempDir(), "ran")
	step := []string{"run", "fetch", "--", "sh", "-c", `echo >> "$0"; printf 'value\n\n'`, marker}

	fnbridge(t, "", step...).want(t, 0, "value\n\n", "")
	if n := lines(t, marker); n != 1 {
		t.Fatalf("CMD ran %d times, want 1", n)
	}
	e.attempt()
	fnbridge(t, "", step...).want(t, 0, "value\n\n", "")
	if n := lines(t, marker); n != 1 {
		t.Fatalf("replay ran CMD again (%d runs)", n)
	}
	if got := e.j.Entries()[0]; got.Name != "fetch" || string(got.Result.Value) != "value\n\n" {
		t.Errorf("journaled %+v", got)
	}
}

func TestCtxRunTerminalFailure(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	marker := filepath.Join(t.TempDir(), "ran")
	step := []string{"run", "validate", "--", "sh", "-c", `echo >> "$0"; echo 'user not found'; exit 100`, marker}

	fnbridge(t, "", step...).want(t, 100, "", "fnbridge: run validate: user not found\n")
	e.attempt()
	fnbridge(t, "", step...).want(t, 100, "", "fnbridge: run validate: user not found\n")
	if n := lines(t, marker); n != 1 {
		t.Errorf("CMD ran %d times, want 1", n)
	}
	f := e.j.Entries()[0].Result.Failure
	if f == nil || f.Code != 500 || f.Message != "user not found" {
		t.Errorf("journaled failure %+v", f)
	}
}

func TestCtxRunRetryableFailure(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	fnbridge(t, "", "run", "flaky", "--", "sh", "-c", "echo partial; echo oops >&2; exit 3").
		want(t, 3, "", "oops\nfnbridge: run flaky: sh exited with status 3; the attempt fails and Restate retries it")
	if got := e.j.Failures(); len(got) != 1 || got[0] != "sh exited with status 3" {
		t.Errorf("Failures %q", got)
	}
	fnbridge(t, "", "invocation-id").want(t, 75, "", "step \"flaky\" failed")

	e.attempt()
	fnbridge(t, "", "run", "flaky", "--", "sh", "-c", "kill -TERM $$").
		want(t, 128+15, "", "sh was killed by signal 15 (terminated)")
	e.attempt()
	fnbridge(t, "", "run", "flaky", "--", "no-such-command-fnbridge").
		want(t, 127, "", "fnbridge: run flaky: no-such-command-fnbridge: no such program on PATH (a shell function is not one: a step runs a program)")
	e.attempt()
	noexec := filepath.Join(t.TempDir(), "noexec")
	if err := os.WriteFile(noexec, []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fnbridge(t, "", "run", "flaky", "--", noexec).
		want(t, 126, "", "fnbridge: run flaky: "+noexec+" is not executable (permission denied)")
	if e.j.Entries()[0].Result != nil {
		t.Error("a retryable failure journaled a result")
	}
}

// A step's CMD that is a script without a #! line runs as the function's
// own shell runs it (bash runs such a file as a bash script), instead of
// failing every attempt with "exec format error"; a binary the kernel
// refuses still fails the attempt, as in bash (126).
func TestCtxRunScriptWithoutInterpreterLine(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	dir := t.TempDir()
	script := filepath.Join(dir, "provision")
	if err := os.WriteFile(script, []byte("printf '%s:%s' \"${BASH_VERSION:+bash}\" \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fnbridge(t, "", "run", "provision", "--", script, "db 1").want(t, 0, "bash:db 1", "")
	if got := e.j.Entries()[0]; got.Result == nil || string(got.Result.Value) != "bash:db 1" {
		t.Errorf("journaled %+v", got)
	}

	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("\x00\x01\x02\x03binary\x00"), 0o755); err != nil {
		t.Fatal(err)
	}
	fnbridge(t, "", "run", "junk", "--", junk).want(t, 126, "", "cannot execute binary file")
}

func TestCtxArgumentsStayData(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	dir := t.TempDir()
	pwn := filepath.Join(dir, "pwned")
	evil := `$(touch ` + pwn + `); ` + "`touch " + pwn + "`" + `; touch ` + pwn + ` & | > ' "`

	fnbridge(t, "", "run", "echo", "--", "printf", "%s", evil).want(t, 0, evil, "")
	payload := `{"x":"` + strings.ReplaceAll(evil, `"`, `\"`) + `"}`
	fnbridge(t, "", "call", "Svc/h", payload).want(t, 0, payload+"\n", "")
	fnbridge(t, "", "send", "--key", evil, "Svc/h", payload).want(t, 0, "inv_send_1\n", "")
	if _, err := os.Stat(pwn); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a payload was evaluated: %v", err)
	}
	got := e.j.Entries()
	if string(got[1].Call.Input) != payload || got[2].Call.Key != evil {
		t.Errorf("journaled %q and key %q", got[1].Call.Input, got[2].Call.Key)
	}
	// Rule (Bash API): arguments are data, a step's NAME too: one that
	// starts with - is a name, as in the shell function, not a flag.
	fnbridge(t, "", "run", "-lead", "--", "printf", "x").want(t, 0, "x", "")
	fnbridge(t, "", "run", "--help", "--", "printf", "y").want(t, 0, "y", "")
	if got := e.j.Entries(); got[3].Name != "-lead" || got[4].Name != "--help" {
		t.Errorf("step names %q and %q, want -lead and --help", got[3].Name, got[4].Name)
	}
}

func TestCtxSleep(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	for _, arg := range []string{"90", "90s", "5m", "1h", "1m30s", "1.5", ".5", "2."} {
		fnbridge(t, "", "sleep", arg).want(t, 0, "", "")
	}
	want := []time.Duration{90 * time.Second, 90 * time.Second, 5 * time.Minute, time.Hour, 90 * time.Second, 1500 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}
	for i, en := range e.j.Entries() {
		if en.Kind != "sleep" || en.Duration != want[i] {
			t.Errorf("entry %d: %+v, want sleep %v", i, en, want[i])
		}
	}
	fnbridge(t, "", "sleep", "5 minutes").want(t, 2, "", `duration "5 minutes"`)
	for _, bad := range []string{".", "1.5.2", "1d", "0x10", "1.5x"} {
		fnbridge(t, "", "sleep", bad).want(t, 2, "", `duration "`+bad+`": want seconds (90, 1.5)`)
	}
	for _, neg := range []string{"-5s", "-1", "-1.5", "-.5"} {
		fnbridge(t, "", "sleep", "--", neg).want(t, 2, "", `duration "`+neg+`": must not be negative`)
	}
	fnbridge(t, "", "sleep", "-1").want(t, 2, "", `duration "-1": must not be negative`)
	// Past the longest duration: the bound, as Python says it, not "want seconds".
	for _, long := range []string{"9223372037", "99999999999999999999", "2562048h", "9999999999999m"} {
		fnbridge(t, "", "sleep", long).want(t, 2, "", `duration "`+long+`": must be at most 9223372036 seconds (about 292 years)`)
	}
	fnbridge(t, "", "sleep", "--", "-").want(t, 2, "", `duration "-": want seconds (90, 1.5)`)
	fnbridge(t, "", "sleep").want(t, 2, "", "usage: fnbridge sleep")

	e.j.HoldSleeps = true
	fnbridge(t, "", "sleep", "1h").want(t, 75, "", "the invocation suspended")
	fnbridge(t, "", "sleep", "1h").want(t, 75, "", "the invocation suspended")
}

func TestCtxCallSendAwait(t *testing.T) {
	j := &stepctxtest.Journal{ID: "inv_abc", CallResult: func(r stepctx.CallRequest) stepctx.Result {
		if r.Handler == "fail" {
			return stepctx.Result{Failure: &stepctx.Failure{Code: 404, Message: "no such user"}}
		}
		return stepctx.Result{Value: []byte(`{"to":"` + r.Key + `"}`)}
	}}
	e := newCtxEnv(t, j)

	fnbridge(t, "", "call", "--key", "k1", "--idempotency-key", "i1", "--header", "x-a=b", "Users/get", `{"id": 1}`).
		want(t, 0, `{"to":"k1"}`+"\n", "")
	c := e.j.Entries()[0].Call
	if c.Service != "Users" || c.Handler != "get" || c.IdempotencyKey != "i1" || c.Headers["x-a"] != "b" || string(c.Input) != `{"id": 1}` {
		t.Errorf("journaled call %+v", c)
	}
	fnbridge(t, `{"from":"stdin"}`, "call", "Users/get", "-").want(t, 0, `{"to":""}`+"\n", "")
	if in := e.j.Entries()[1].Call.Input; string(in) != `{"from":"stdin"}` {
		t.Errorf("payload from stdin journaled as %q", in)
	}
	fnbridge(t, "", "call", "Users/fail").want(t, 100, "", "fnbridge: call Users/fail failed (code 404): no such user")
	fnbridge(t, "", "call", "Users", "{}").want(t, 2, "", `"Users": want SERVICE/HANDLER`)
	fnbridge(t, "", "call", "Users/get", "{not json").want(t, 2, "", "not valid JSON")

	fnbridge(t, "", "send", "--delay", "5m", "Mail/send", `"hi"`).want(t, 0, "inv_send_1\n", "")
	if s := e.j.Entries()[3]; s.Kind != "send" || s.Delay != 5*time.Minute {
		t.Errorf("journaled send %+v", s)
	}
	// A bad delay names the flag, and sends nothing.
	fnbridge(t, "", "send", "--delay", "-1s", "Mail/send", `"hi"`).want(t, 2, "", `--delay "-1s": must not be negative`)
	fnbridge(t, "", "send", "--delay", "soon", "Mail/send", `"hi"`).want(t, 2, "", `--delay "soon": want seconds (90, 1.5) or a number with a unit (90s, 5m, 1h, 250ms)`)
	if n := len(e.j.Entries()); n != 4 {
		t.Errorf("%d journal entries after the refused sends, want 4", n)
	}

	timer := fnbridge(t, "", "sleep", "--async", "10s")
	call := fnbridge(t, "", "call", "--async", "--key", "k2", "Users/get")
	failing := fnbridge(t, "", "call", "--async", "Users/fail")
	for _, r := range []ctxRun{timer, call, failing} {
		if r.code != 0 || !strings.HasPrefix(r.stdout, "fut-") {
			t.Fatalf("async: %+v, want a handle", r)
		}
	}
	th, ch, fh := strings.TrimSpace(timer.stdout), strings.TrimSpace(call.stdout), strings.TrimSpace(failing.stdout)
	fnbridge(t, "", "await", ch, th).want(t, 0, `{"to":"k2"}`+"\n\n", "")
	fnbridge(t, "", "await", "--any", ch, th).want(t, 0, ch+"\n"+`{"to":"k2"}`+"\n", "")
	fnbridge(t, "", "await", th, fh, ch).want(t, 100, "\n\n"+`{"to":"k2"}`+"\n", fh+" failed (code 404): no such user")
	fnbridge(t, "", "await", "fut-404").want(t, 2, "", `unknown handle "fut-404"`)
	fnbridge(t, "", "await").want(t, 2, "", "usage: fnbridge await [--any] HANDLE...")

	fnbridge(t, "", "invocation-id").want(t, 0, "inv_abc\n", "")
	r1 := fnbridge(t, "", "random")
	u1 := fnbridge(t, "", "uuid")
	e.attempt()
	// A fresh attempt replays from the start; random values repeat in order.
	if r2 := fnbridge(t, "", "random"); r2.code != 0 || r2.stdout != r1.stdout {
		t.Errorf("random on replay %q, first %q", r2.stdout, r1.stdout)
	}
	if u2 := fnbridge(t, "", "uuid"); u2.code != 0 || u2.stdout != u1.stdout || len(u1.stdout) != 37 {
		t.Errorf("uuid on replay %q, first %q", u2.stdout, u1.stdout)
	}
}

func TestCtxUsageAndEnvironment(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	// Each usage error says what is wrong, then the usage.
	fnbridge(t, "", "run", "x", "echo", "hi").want(t, 2, "", "run x: want -- between NAME and CMD, not echo; usage: fnbridge run [--var VAR] NAME -- CMD")
	fnbridge(t, "", "run", "x", "--").want(t, 2, "", "run x: CMD is missing after --; usage: fnbridge run [--var VAR] NAME -- CMD")
	fnbridge(t, "", "run", "x").want(t, 2, "", "run x: -- CMD is missing after NAME; usage:")
	fnbridge(t, "", "run").want(t, 2, "", "run: NAME -- CMD is missing; usage:")
	fnbridge(t, "", "run", "", "--", "true").want(t, 2, "", "run: NAME is empty (an unset variable?); usage:")
	fnbridge(t, "", "run", "--retries", "3", "x", "--", "true").want(t, 2, "", "run: unknown option --retries (only --var VAR may come before NAME); usage:")
	// The binary cannot assign a variable of the shell that started it.
	fnbridge(t, "", "run", "--var", "v", "x", "--", "true").want(t, 2, "", "run --var works only in the function's own shell")
	fnbridge(t, "", "run", "--var=v", "x", "--", "true").want(t, 2, "", "run --var works only in the function's own shell")
	fnbridge(t, "", "run", "--", "echo", "hi").want(t, 2, "", "run: NAME is missing before --; usage: fnbridge run [--var VAR] NAME -- CMD")
	fnbridge(t, "", "frobnicate").want(t, 2, "", "unknown command")
	if n := len(e.j.Entries()); n != 0 {
		t.Errorf("usage errors journaled %d commands", n)
	}
	if code := ctxMain([]string{"sleep"}); code != 2 {
		t.Errorf("ctxMain: exit %d, want 2", code)
	}

	t.Setenv(stepctx.EnvToken, stepctx.NewToken())
	fnbridge(t, "", "invocation-id").want(t, 3, "", "not issued by this bridge")
	t.Setenv(stepctx.EnvAddr, "")
	fnbridge(t, "", "invocation-id").want(t, 3, "", "FNBRIDGE_CONTEXT and FNBRIDGE_CONTEXT_TOKEN are not set")
}

// TestCtxAsSubcommand drives the command as `bridge ctx ...`, the way
// main.go registers it, exit status included.
func TestCtxAsSubcommand(t *testing.T) {
	newCtxEnv(t, &stepctxtest.Journal{ID: "inv_sub"})
	root := &cobra.Command{Use: "bridge", SilenceErrors: true, SilenceUsage: true}
	root.AddCommand(newCtxCmd())
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs([]string{"ctx", "run", "s", "--", "sh", "-c", "printf x; exit 100"})
	code, ok := ctxExitStatus(&errb, root.Execute())
	if !ok || code != 100 || out.String() != "" || errb.String() != "fnbridge: run s: x\n" {
		t.Fatalf("bridge ctx run: exit %d (%v) stdout %q stderr %q", code, ok, out.String(), errb.String())
	}
	out.Reset()
	root.SetArgs([]string{"ctx", "invocation-id"})
	if err := root.Execute(); err != nil || out.String() != "inv_sub\n" {
		t.Fatalf("bridge ctx invocation-id: %v %q", err, out.String())
	}
}

// `fnbridge run` parses its own arguments (a NAME may start with -), and
// the bridge's global flags still parse before and after ctx and before
// NAME.
func TestCtxRunTakesTheGlobalFlags(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	for _, args := range [][]string{
		{"--log-level", "debug", "ctx", "run", "a", "--", "true"},
		{"ctx", "--log-level=debug", "run", "b", "--", "true"},
		{"ctx", "run", "--log-format", "console", "c", "--", "true"},
	} {
		root := newRootCmd()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("bridge %s: %v (stderr %q)", strings.Join(args, " "), err, errb.String())
		}
	}
	var names []string
	for _, en := range e.j.Entries() {
		names = append(names, en.Name)
	}
	if got := strings.Join(names, ","); got != "a,b,c" {
		t.Fatalf("steps %q, want a,b,c", got)
	}
}

// The step agent outlives no worker: waitGone returns when the process
// ends, even before its parent reaps it (a zombie still answers kill -0,
// and a pid the kernel reuses would too).
func TestAgentWaitGoneSeesTheProcessEnd(t *testing.T) {
	cmd := exec.Command("sleep", "0.1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }() // reaped only after the check
	done := make(chan struct{})
	go func() { waitGone(cmd.Process.Pid); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("waitGone did not return after the process ended")
	}
}

// `fnbridge fail` as a command (a child process, a step's CMD) cannot end
// the function: it prints the message and exits 100, saying that a code
// other than 500 is only kept in the function's own shell.
func TestCtxFailOutsideTheFunctionsShell(t *testing.T) {
	fnbridge(t, "", "fail", "order", "gone").want(t, 100, "", "order gone\n")
	r := fnbridge(t, "", "fail", "--code", "410", "order gone")
	r.want(t, 100, "", "order gone (fnbridge fail --code 410 works in the function's own shell and its subshells only")
	// Whatever the message looks like, the status is 100: a usage error's
	// would make the terminal failure a retry.
	fnbridge(t, "", "fail", "-1 items left").want(t, 100, "", "-1 items left\n")
	fnbridge(t, "", "fail", "--verbose", "x").want(t, 100, "", "--verbose x\n")
	fnbridge(t, "", "fail", "--help").want(t, 100, "", "--help\n")
	fnbridge(t, "", "fail", "--code=abc", "bad").want(t, 100, "", `bad (fnbridge fail --code "abc": want a code from 1 to 65535; failing with 500)`)
	fnbridge(t, "", "fail", "--code").want(t, 100, "", `(fnbridge fail --code "": want a code from 1 to 65535; failing with 500)`)
	fnbridge(t, "", "fail", "--code", "500", "plain").want(t, 100, "", "plain\n")
	// Without a message it is still terminal, as asked, with a message
	// saying so rather than an empty one.
	fnbridge(t, "", "fail").want(t, 100, "", "fnbridge: the function failed (fnbridge fail was given no message)\n")
}

// A mistyped or missing subcommand of a command that only groups others
// is a usage error (ctx: "2 bad arguments"), never the help on stdout
// with status 0, which `v=$(fnbridge state gte count)` took for a value.
// `bridge ctx` exits as fnbridge does; other bridge commands exit 1.
func TestGroupCommandsRefuseUnknownSubcommands(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	fnbridge(t, "", "state", "gte", "count").want(t, 2, "", `unknown command "gte" for "fnbridge state"; its subcommands: clear, clear-all, get, keys, set`)
	fnbridge(t, "", "bogus").want(t, 2, "", `unknown command "bogus" for "fnbridge"; its subcommands: await, awakeable, call, cancel, fail, invocation-id, key, promise, random, reject-awakeable, resolve-awakeable, run, send, sleep, state, uuid`)
	fnbridge(t, "", "promise", "reslove", "p", "1").want(t, 2, "", `unknown command "reslove" for "fnbridge promise"`)
	fnbridge(t, "", "state").want(t, 2, "", "fnbridge state needs a subcommand")
	if n := len(e.j.Entries()); n != 0 {
		t.Errorf("usage errors journaled %d commands", n)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ctx", "nosuch"}, 2, `unknown command "nosuch" for "bridge ctx"`},
		{[]string{"ctx", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"ctx", "state", "gte"}, 2, `unknown command "gte" for "bridge ctx state"`},
		{[]string{"runtime", "nosuch"}, 2, `unknown command "nosuch" for "bridge runtime"`},
		{[]string{"runtime"}, 2, "bridge runtime needs a subcommand: serve"},
	} {
		var out, errb bytes.Buffer
		if code := runBridge(c.args, &out, &errb); code != c.code || out.Len() != 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("bridge %v: exit %d stdout %q stderr %q, want exit %d and %q", c.args, code, out.String(), errb.String(), c.code, c.want)
		}
	}
}

// A step's stdout needs no writable directory: the function's TMPDIR may
// be missing or read-only, and fnbridge run works all the same.
func TestCtxRunNeedsNoTempDirectory(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	fnbridge(t, "", "run", "s", "--", "printf", "hi").want(t, 0, "hi", "")
	fnbridge(t, "", "run", "t", "--", "printf", "again").want(t, 0, "again", "")
	if n := len(e.j.Entries()); n != 2 {
		t.Fatalf("%d entries, want the two steps", n)
	}
}

// The agent reads a request line of any length whole: a line past its
// 4 KiB buffer used to come back garbled (the next read reused the
// buffer), so the step's answer lost its nonce and the shell waited for
// good; past the limit it is reported, not fatal.
func TestAgentReadsLongRequestLines(t *testing.T) {
	long := "S\tn.1\t" + strings.Repeat("x", 5000) + "\n"
	huge := "S\tn.2\t" + strings.Repeat("y", agentMaxLine+10) + "\n"
	r := bufio.NewReaderSize(strings.NewReader("S\tn.0\tshort\n"+long+huge+"S\tn.3\tafter\n"), 4096)
	for i, want := range []struct {
		line    string
		tooLong bool
	}{{"S\tn.0\tshort\n", false}, {long, false}, {huge[:agentMaxLine], true}, {"S\tn.3\tafter\n", false}} {
		line, tooLong, err := readRequest(r)
		if err != nil || string(line) != want.line || tooLong != want.tooLong {
			t.Fatalf("line %d: %d bytes (%q...), too long %v, %v; want %d bytes, too long %v", i, len(line), line[:min(len(line), 20)], tooLong, err, len(want.line), want.tooLong)
		}
	}
}

// Restate takes text as UTF-8: a step name, key, idempotency key, header
// or state name with other bytes is refused (exit 2) before it is sent,
// never sent with the bytes replaced (two keys reaching one object).
func TestCtxTextMustBeUTF8(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	fnbridge(t, "", "run", "step\xe9", "--", "true").want(t, 2, "", `run/start: name "step\xe9" is not valid UTF-8`)
	fnbridge(t, "", "call", "--key", "caf\xe9", "Svc/h", "1").want(t, 2, "", `call: key "caf\xe9" is not valid UTF-8`)
	fnbridge(t, "", "send", "--idempotency-key", "\xff\xfe", "Svc/h", "1").want(t, 2, "", `send: idempotency_key "\xff\xfe" is not valid UTF-8`)
	fnbridge(t, "", "call", "--header", "X-A=\xff", "Svc/h", "1").want(t, 2, "", `call: headers["X-A"] "\xff" is not valid UTF-8`)
	fnbridge(t, "", "call", "Sv\xe9/h", "1").want(t, 2, "", `call: service "Sv\xe9" is not valid UTF-8`)
	if n := len(e.j.Entries()); n != 0 {
		t.Errorf("refused text journaled %d commands", n)
	}
	fnbridge(t, "", "run", "caf\u00e9", "--", "printf", "ok").want(t, 0, "ok", "")
}

// A message of several lines (a step's CMD printing them before exit
// 100) is printed on one line, as the shell function prints it: the
// runtime takes a failure's message from the last line of stderr.
func TestCtxMessagesAreOneLine(t *testing.T) {
	newCtxEnv(t, &stepctxtest.Journal{})
	fnbridge(t, "", "run", "c2", "--", "sh", "-c", `printf 'line1\nline2\n'; exit 100`).
		want(t, 100, "", "fnbridge: run c2: line1 line2\n")
}
