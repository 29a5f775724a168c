package main

import (
	"os"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/functionruntime"
)

// keyedEnv is a context endpoint whose attempts run handler h.
func keyedEnv(t *testing.T, j *stepctxtest.Journal, h stepctx.HandlerInfo) *ctxEnv {
	t.Helper()
	return newCtxEnv(t, j, stepctx.WithHandler(h))
}

// fnbridge key prints the invocation's key without the context endpoint
// (durability: function too); without one it says why, status 3, and
// outside any attempt it does not claim to know the handler.
func TestCtxKey(t *testing.T) {
	t.Setenv(stepctx.EnvAddr, "")
	t.Setenv(functionruntime.EnvKey, "user 42\nsecond line")
	fnbridge(t, "", "key").want(t, 0, "user 42\nsecond line\n", "")
	t.Setenv(functionruntime.EnvKey, "")
	fnbridge(t, "", "key").want(t, 0, "\n", "")
	unsetEnv(t, functionruntime.EnvKey)
	fnbridge(t, "", "key").want(t, 3, "", "FNBRIDGE_KEY is not set: not inside an invocation of a virtual_object or workflow handler")
	// Inside a steps-mode attempt the handler is known to be a plain one.
	newCtxEnv(t, &stepctxtest.Journal{})
	fnbridge(t, "", "key").want(t, 3, "", "FNBRIDGE_KEY is not set: this handler's service is a plain service")
}

// fnbridge state: get prints the JSON value (nothing and status 1 when
// absent), set takes JSON (refusing anything else), keys prints one key a
// line, sorted; clear and clear-all remove.
func TestCtxState(t *testing.T) {
	e := keyedEnv(t, &stepctxtest.Journal{State: map[string][]byte{"count": []byte("41")}}, stepctx.HandlerInfo{Name: "Counter/add", Keyed: true})
	fnbridge(t, "", "state", "get", "count").want(t, 0, "41\n", "")
	fnbridge(t, "", "state", "get", "none").want(t, 1, "", "")
	fnbridge(t, "", "state", "set", "count", "42").want(t, 0, "", "")
	fnbridge(t, `{"name": "$(touch pwned)"}`, "state", "set", "profile", "-").want(t, 0, "", "")
	fnbridge(t, "", "state", "set", "bad", "not json").want(t, 2, "", "the value is not valid JSON")
	fnbridge(t, "", "state", "get", "count").want(t, 0, "42\n", "")
	fnbridge(t, "", "state", "get", "profile").want(t, 0, `{"name": "$(touch pwned)"}`+"\n", "")
	// A value from stdin (echo, a here-string) or an argument is stored
	// without the whitespace around it, as Python's would be: other SDKs
	// and restate state get see the value alone.
	fnbridge(t, "\"x\"\n", "state", "set", "piped", "-").want(t, 0, "", "")
	fnbridge(t, "", "state", "set", "spaced", " [1]\t").want(t, 0, "", "")
	if got, want := string(e.j.State["piped"])+"|"+string(e.j.State["spaced"]), `"x"|[1]`; got != want {
		t.Fatalf("stored %q, want %q", got, want)
	}
	fnbridge(t, "", "state", "clear", "piped").want(t, 0, "", "")
	fnbridge(t, "", "state", "clear", "spaced").want(t, 0, "", "")
	fnbridge(t, "", "state", "keys").want(t, 0, "count\nprofile\n", "")
	fnbridge(t, "", "state", "clear", "count").want(t, 0, "", "")
	fnbridge(t, "", "state", "keys").want(t, 0, "profile\n", "")
	fnbridge(t, "", "state", "clear-all").want(t, 0, "", "")
	fnbridge(t, "", "state", "keys").want(t, 0, "", "")
	fnbridge(t, "", "state", "get").want(t, 2, "", "usage: fnbridge state get NAME")
	// Bad arguments are exit 2 before any call, as in Python (a TypeError):
	// an empty name, a value that is not UTF-8 (JSON is; json.Valid lets
	// such bytes through and a Python reader could not decode them).
	fnbridge(t, "", "state", "get", "").want(t, 2, "", "NAME is empty")
	fnbridge(t, "", "state", "set", "", "1").want(t, 2, "", "fnbridge: state set: NAME is empty")
	fnbridge(t, "", "promise", "get", "").want(t, 2, "", "NAME is empty")
	fnbridge(t, "", "resolve-awakeable", "", "1").want(t, 2, "", "ID is empty")
	fnbridge(t, "", "state", "set", "bad", "\"a\xffb\"").want(t, 2, "", "not UTF-8")
	fnbridge(t, "\"a\xffb\"", "state", "set", "bad", "-").want(t, 2, "", "not UTF-8")
	fnbridge(t, "", "call", "Svc/h", "\"a\xffb\"").want(t, 2, "", "not UTF-8")
	// A read that could not be made is not "absent": 3, not 1.
	e.a.Close()
	fnbridge(t, "", "state", "get", "profile").want(t, 3, "", "belongs to an attempt that has ended")
	fnbridge(t, "", "promise", "peek", "approval").want(t, 3, "", "belongs to an attempt that has ended")
	if len(e.j.State) != 0 {
		t.Fatalf("state after clear-all: %q", e.j.State)
	}
}

// Rule (issue 12): a state write from a shared handler fails with the
// reason on stderr, naming the handler as shared, and exit status 100;
// reads work.
func TestCtxStateSharedWriteExits100(t *testing.T) {
	e := keyedEnv(t, &stepctxtest.Journal{State: map[string][]byte{"count": []byte("7")}}, stepctx.HandlerInfo{Name: "Counter/get", Keyed: true, Shared: true})
	fnbridge(t, "", "state", "set", "count", "1").want(t, 100, "", "state set refused: Counter/get is a shared handler (shared: true)")
	fnbridge(t, "", "state", "clear-all").want(t, 100, "", "state clear-all refused: Counter/get is a shared handler")
	fnbridge(t, "", "state", "get", "count").want(t, 0, "7\n", "")
	if n := len(e.j.Entries()); n != 1 {
		t.Fatalf("%d journal entries, want the read only", n)
	}
}

// fnbridge awakeable prints an id that fnbridge await takes; a rejection
// is reported on stderr with status 100; resolve-awakeable and
// reject-awakeable journal completions.
func TestCtxAwakeable(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	id := stepctxtest.AwakeableID(0)
	fnbridge(t, "", "awakeable").want(t, 0, id+"\n", "")
	fnbridge(t, "", "await", id).want(t, 75, "", "suspended")
	e.j.ResolveAwakeable(id, stepctx.Result{Value: []byte(`{"ok":true}`)})
	e.j.ResolveAwakeable(stepctxtest.AwakeableID(1), stepctx.Result{Failure: &stepctx.Failure{Code: 500, Message: "denied"}})
	e.attempt()
	fnbridge(t, "", "awakeable").want(t, 0, id+"\n", "")
	fnbridge(t, "", "await", id).want(t, 0, "{\"ok\":true}\n", "")
	second := stepctxtest.AwakeableID(1)
	fnbridge(t, "", "awakeable").want(t, 0, second+"\n", "")
	fnbridge(t, "", "await", second).want(t, 100, "\n", "denied")
	other := "sign_16MThzWyQU_UkS5kx_hYOdYGSSOJcQnVbAAAAEQ" // as restate-server prints it
	fnbridge(t, "", "resolve-awakeable", other, `"yes"`).want(t, 0, "", "")
	fnbridge(t, "", "reject-awakeable", "--code", "404", other, "no; $(touch pwned)").want(t, 0, "", "")
	fnbridge(t, "", "reject-awakeable", "--code", "0", other, "no").want(t, 2, "", "--code 0: want a failure code from 1 to 65535")
	// A malformed id fails that call terminally (exit 100), journaling nothing.
	fnbridge(t, "", "resolve-awakeable", "nonsense", "1").want(t, 100, "", `"nonsense" is not an awakeable id`)
	fnbridge(t, "", "reject-awakeable", "sign_1AAAA", "no").want(t, 100, "", `"sign_1AAAA" is not an awakeable id`)
	en := e.j.Entries()
	if len(en) != 2 || string(en[0].Result.Value) != `"yes"` || en[1].Result.Failure.Message != "no; $(touch pwned)" || en[1].Result.Failure.Code != 404 {
		t.Fatalf("journal %+v", en)
	}
}

// fnbridge promise: peek prints nothing and exits 1 while unresolved;
// resolve, then get and peek print the value; a second resolve and a
// rejected promise exit 100; outside a workflow, refused with 100.
func TestCtxPromise(t *testing.T) {
	keyedEnv(t, &stepctxtest.Journal{}, stepctx.HandlerInfo{Name: "Signup/approve", Keyed: true, Workflow: true, Shared: true})
	fnbridge(t, "", "promise", "peek", "approval").want(t, 1, "", "")
	fnbridge(t, "", "promise", "resolve", "approval", `"yes"`).want(t, 0, "", "")
	fnbridge(t, "", "promise", "resolve", "approval", `"again"`).want(t, 100, "", `promise "approval" was completed already`)
	fnbridge(t, "", "promise", "peek", "approval").want(t, 0, "\"yes\"\n", "")
	fnbridge(t, "", "promise", "get", "approval").want(t, 0, "\"yes\"\n", "")
	fnbridge(t, "", "promise", "reject", "other", "denied").want(t, 0, "", "")
	fnbridge(t, "", "promise", "get", "other").want(t, 100, "", "denied")
	fnbridge(t, "", "promise", "peek", "other").want(t, 100, "", "denied")
	// --async: a handle await takes with others, e.g. a promise or a timeout.
	h := fnbridge(t, "", "promise", "get", "--async", "approval")
	if h.code != 0 || !strings.HasPrefix(h.stdout, "fut-") {
		t.Fatalf("promise get --async: exit %d stdout %q stderr %q, want a handle", h.code, h.stdout, h.stderr)
	}
	timer := fnbridge(t, "", "sleep", "--async", "1h")
	fnbridge(t, "", "await", "--any", strings.TrimSpace(h.stdout), strings.TrimSpace(timer.stdout)).want(t, 0, h.stdout+"\"yes\"\n", "")
	fnbridge(t, "", "promise", "get", "never").want(t, 75, "", "suspended")

	keyedEnv(t, &stepctxtest.Journal{}, stepctx.HandlerInfo{Name: "Counter/add", Keyed: true})
	fnbridge(t, "", "promise", "get", "approval").want(t, 100, "", "promise get refused: Counter/add is not a handler of a workflow")
}

// fnbridge cancel journals the cancellation of a well-formed id; a
// malformed one fails that call with status 100; a cancelled invocation's
// wait fails with status 100.
func TestCtxCancel(t *testing.T) {
	e := newCtxEnv(t, &stepctxtest.Journal{})
	const victim = "inv_1jZ1vppOUVxj16ugSTA4IHb26d8Zo1CWOT" // as restate-server prints it
	fnbridge(t, "", "cancel", victim).want(t, 0, "", "")
	fnbridge(t, "", "cancel", "42").want(t, 100, "", `"42" is not an invocation id`)
	fnbridge(t, "", "cancel", "inv_1abc").want(t, 100, "", `"inv_1abc" is not an invocation id`)
	if en := e.j.Entries(); len(en) != 1 || en[0].Kind != "cancel" || en[0].Name != victim {
		t.Fatalf("journal %+v", en)
	}
	e.j.CancelNextWait = true
	fnbridge(t, "", "sleep", "1h").want(t, 100, "", "cancelled")
}

// unsetEnv removes name for the rest of the test (t.Setenv restores it).
func unsetEnv(t *testing.T, name string) {
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
