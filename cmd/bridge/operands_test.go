package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
)

// A negative number is a payload (state set, call, send, resolve,
// invoke) or a duration (sleep), never shorthand flags: before, -5 was
// "unknown shorthand flag: '5' in -5" unless the user wrote "--".
func TestCtxNegativeNumbersAreOperands(t *testing.T) {
	e := keyedEnv(t, &stepctxtest.Journal{CallResult: func(r stepctx.CallRequest) stepctx.Result {
		return stepctx.Result{Value: r.Input}
	}}, stepctx.HandlerInfo{Name: "Account/add", Keyed: true})
	fnbridge(t, "", "state", "set", "balance", "-5").want(t, 0, "", "")
	fnbridge(t, "", "state", "get", "balance").want(t, 0, "-5\n", "")
	fnbridge(t, "", "call", "--key", "k1", "Users/get", "-1.5e3").want(t, 0, "-1.5e3\n", "")
	fnbridge(t, "", "call", "Users/get", "--key", "k2", "-0.5").want(t, 0, "-0.5\n", "")
	var calls []stepctx.CallRequest
	for _, en := range e.j.Entries() {
		if en.Kind == "call" {
			calls = append(calls, en.Call)
		}
	}
	if len(calls) != 2 || calls[0].Key != "k1" || string(calls[0].Input) != "-1.5e3" || calls[1].Key != "k2" || string(calls[1].Input) != "-0.5" {
		t.Errorf("journaled calls %+v, want k1 with -1.5e3 and k2 with -0.5", calls)
	}
	// A flag's value stays the flag's, negative or not.
	fnbridge(t, "", "send", "--delay", "-1s", "Mail/send", "-1").want(t, 2, "", `--delay "-1s": must not be negative`)
	fnbridge(t, "", "sleep", "-5s").want(t, 2, "", `duration "-5s"`)
	fnbridge(t, "", "sleep", "-.5").want(t, 2, "", `duration "-.5"`)
	// A payload spelled like a flag is a payload too (not JSON here).
	fnbridge(t, "", "call", "Users/get", "-x").want(t, 2, "", "the payload is not valid JSON")
}

// The operands of a fnbridge command are data, whatever they start with:
// a caller's payload or name such as --help or -x, passed on as "$1", was
// taken for a flag: --help printed the help and exited 0 having written
// nothing (state set, state clear, call, resolve), -x exited 2. Only the
// command's own flags are flags; `fnbridge help CMD` shows the help.
func TestCtxOperandsAreData(t *testing.T) {
	e := keyedEnv(t, &stepctxtest.Journal{CallResult: func(r stepctx.CallRequest) stepctx.Result {
		return stepctx.Result{Value: r.Input}
	}}, stepctx.HandlerInfo{Name: "Account/add", Keyed: true})
	fnbridge(t, "", "state", "set", "last", "--help").want(t, 2, "", "the value is not valid JSON")
	fnbridge(t, "", "state", "set", "--help", "1").want(t, 0, "", "")
	fnbridge(t, "", "state", "set", "-x", `"a"`).want(t, 0, "", "")
	fnbridge(t, "", "state", "get", "--help").want(t, 0, "1\n", "")
	fnbridge(t, "", "state", "get", "-h").want(t, 1, "", "")
	fnbridge(t, "", "state", "keys").want(t, 0, "--help\n-x\n", "")
	fnbridge(t, "", "state", "clear", "--help").want(t, 0, "", "")
	fnbridge(t, "", "state", "keys").want(t, 0, "-x\n", "")
	// A name with a newline is one name, NUL-terminated, with -z.
	fnbridge(t, "", "state", "set", "two\nlines", "2").want(t, 0, "", "")
	fnbridge(t, "", "state", "keys", "-z").want(t, 0, "-x\x00two\nlines\x00", "")
	fnbridge(t, "", "call", "--key", "k", "Users/get", "--help").want(t, 2, "", "the payload is not valid JSON")
	fnbridge(t, "", "call", "Users/get", "--key", "--help", `{}`).want(t, 0, "{}\n", "")
	var calls []stepctx.CallRequest
	for _, en := range e.j.Entries() {
		if en.Kind == "call" {
			calls = append(calls, en.Call)
		}
	}
	if len(calls) != 1 || calls[0].Key != "--help" {
		t.Errorf("journaled calls %+v, want one, keyed --help (a flag's value is the flag's)", calls)
	}
	// A command without operands keeps its help; so does help itself.
	for _, args := range [][]string{{"invocation-id", "--help"}, {"help", "state", "set"}} {
		if r := fnbridge(t, "", args...); r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("fnbridge %q: exit %d stdout %q, want the help", args, r.code, r.stdout)
		}
	}
	// The help says so: a data command lists no --help, and every footer
	// points to `fnbridge help`, not to a --help a data command takes
	// for a name.
	if r := fnbridge(t, "", "help", "state", "get"); strings.Contains(r.stdout, "--help") || strings.Contains(r.stdout, "[flags]") {
		t.Errorf("fnbridge help state get lists a --help it does not take:\n%s", r.stdout)
	}
	for _, c := range []struct {
		args   []string
		footer string
	}{
		{[]string{"help"}, `Use "fnbridge help [command]"`},
		{[]string{"help", "state"}, `Use "fnbridge help state [command]"`},
		{[]string{"state", "--help"}, `Use "fnbridge help state [command]"`},
	} {
		if r := fnbridge(t, "", c.args...); !strings.Contains(r.stdout, c.footer) {
			t.Errorf("fnbridge %q: footer is not %s:\n%s", c.args, c.footer, r.stdout)
		}
	}
}

func TestSeparateOperandsRewrite(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"invoke", "--config", "c.yaml", "Svc/h", "-5"}, []string{"invoke", "--config", "c.yaml", "--", "Svc/h", "-5"}},
		{[]string{"invoke", "Svc/h", "-5", "--config=c.yaml"}, []string{"invoke", "--config=c.yaml", "--", "Svc/h", "-5"}},
		{[]string{"ctx", "call", "Svc/h", "--key", "-1", "-2"}, []string{"ctx", "call", "--key", "-1", "--", "Svc/h", "-2"}},
		{[]string{"ctx", "sleep", "--async", "-3"}, []string{"ctx", "sleep", "--async", "--", "-3"}},
		// Unchanged: no negative number, one only after "--", a command
		// that parses its own flags.
		{[]string{"invoke", "--config", "c.yaml", "Svc/h", "5"}, nil},
		{[]string{"ctx", "call", "Svc/h", "--", "-5"}, []string{"ctx", "call", "--", "Svc/h", "-5"}},
		// A fnbridge command's operands are data, dashes or not.
		{[]string{"ctx", "state", "set", "--help", "-x"}, []string{"ctx", "state", "set", "--", "--help", "-x"}},
		{[]string{"ctx", "call", "--key", "--help", "Svc/h", "--x"}, []string{"ctx", "call", "--key", "--help", "--", "Svc/h", "--x"}},
		// Global flags before or between the command's words: the same
		// command, its operands data all the same.
		{[]string{"--log-level", "warn", "invoke", "--config", "c.yaml", "Svc/h", "-1"}, []string{"invoke", "--log-level", "warn", "--config", "c.yaml", "--", "Svc/h", "-1"}},
		{[]string{"--log-level=info", "ctx", "--log-format", "json", "state", "set", "last", "--help"}, []string{"ctx", "state", "set", "--log-level=info", "--log-format", "json", "--", "last", "--help"}},
		{[]string{"--bogus", "ctx", "state", "set", "last", "--help"}, nil},
		// bridge's own commands keep unknown flags as flags (refused).
		{[]string{"invoke", "--bogus", "Svc/h"}, nil},
		{[]string{"ctx", "run", "n", "--", "printf", "-5"}, nil},
	} {
		want := c.want
		if want == nil {
			want = c.in
		}
		if got := separateOperands(newRootCmd(), c.in); !slices.Equal(got, want) {
			t.Errorf("separateOperands(%q) = %q, want %q", c.in, got, want)
		}
	}
}
