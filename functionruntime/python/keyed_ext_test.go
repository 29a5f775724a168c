package python_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc/steptest"
)

// keyedPy is the test module keyed.py: the keyed API of the fnbridge
// module (state, key, awakeables, promises, cancel).
const keyedPy = `
import fnbridge

def counter(event):
    n = fnbridge.state.get("count", 0)
    fnbridge.state.set("count", n + event)
    return {"key": fnbridge.key(), "count": fnbridge.state.get("count"), "keys": fnbridge.state.keys(),
            "missing": fnbridge.state.get("none", "default"), "absent": fnbridge.state.get("none")}

def raw(event):
    text = fnbridge.state.get("text")
    fnbridge.state.set("copy", text + b"\xff")
    fnbridge.state.set("arr", bytearray(b"[1]"))
    return [repr(fnbridge.state.get("empty", 0)), repr(text), repr(fnbridge.state.get("none", 0)),
            repr(fnbridge.state.get("copy")), repr(fnbridge.state.get("arr"))]

def clearing(event):
    fnbridge.state.clear("a")
    after_clear = fnbridge.state.keys()
    fnbridge.state.clear_all()
    return [after_clear, fnbridge.state.keys()]

def shared_write(event):
    out = []
    for write in (lambda: fnbridge.state.set("count", 1), lambda: fnbridge.state.clear("count"), fnbridge.state.clear_all):
        try:
            write()
        except fnbridge.TerminalError as e:
            out.append([type(e).__name__, e.code, e.message])
    out.append(fnbridge.state.get("count"))
    return out

def bad_values(event):
    out = []
    for call in (lambda: fnbridge.state.set("x", {1, 2}), lambda: fnbridge.state.get(""), lambda: fnbridge.state.set(3, 1)):
        try:
            call()
        except TypeError as e:
            out.append(str(e))
    return out

def approval(event):
    aid, fut = fnbridge.awakeable()
    fnbridge.run("publish", lambda: aid)
    try:
        return ["ok", aid, fut.result()]
    except fnbridge.TerminalError as e:
        return ["rejected", aid, e.code, e.message]

def awakeable_any(event):
    aid, fut = fnbridge.awakeable()
    timer = fnbridge.sleep_async(3600)
    first = fnbridge.wait_any(timer, fut)
    return [first is fut, fut.result(), fnbridge.wait_all(fut)]

def completer(event):
    fnbridge.resolve_awakeable(event["id"], {"v": 1})
    fnbridge.reject_awakeable(event["other"], "nope", code=404)
    fnbridge.cancel(event["victim"])
    caught = []
    for call in (lambda: fnbridge.resolve_awakeable("sign_1AAAA", 1),
                 lambda: fnbridge.reject_awakeable("nonsense", "no"),
                 lambda: fnbridge.cancel("inv_1abc"),
                 lambda: fnbridge.reject_awakeable(event["other"], "no", code=0),
                 lambda: fnbridge.reject_awakeable(event["other"], "bad \udce9"),
                 lambda: fnbridge.promise("p").reject("bad \udce9")):
        try:
            call()
        except fnbridge.TerminalError as e:
            caught.append(e.code)
        except (TypeError, ValueError) as e:
            caught.append(str(e))
    return ["done", caught]

def workflow(event):
    p = fnbridge.promise("approval")
    before = p.peek()
    p.resolve("yes")
    try:
        p.resolve("again")
        again = None
    except fnbridge.TerminalError as e:
        again = e.code
    fnbridge.promise("other").reject("denied", code=403)
    try:
        fnbridge.promise("other").get()
    except fnbridge.TerminalError as e:
        rejected = "%d %s" % (e.code, e.message)
    timer = fnbridge.sleep_async(3600)
    first = fnbridge.wait_any(p.get_async(), timer)
    return [before, p.get(), p.peek(), again, rejected, repr(p), first is not timer and first.result()]

def wait_promise(event):
    return fnbridge.promise("never").get()

def function_mode(event):
    out = [fnbridge.key()]
    for call in (lambda: fnbridge.state.get("x"), fnbridge.awakeable, lambda: fnbridge.promise("p").peek()):
        try:
            call()
        except RuntimeError as e:
            out.append(str(e))
    return out

def no_key(event):
    try:
        return fnbridge.key()
    except RuntimeError as e:
        return str(e)

def cancelled(event):
    try:
        fnbridge.sleep(3600)
        return "not cancelled"
    except fnbridge.TerminalError as e:
        return [e.code, e.message, fnbridge.run("undo", lambda: "undone")]
`

// keyed is one registration of keyed.<fn>.
func keyed(t *testing.T, fn string) *steps {
	t.Helper()
	f := conformance.NewFixture(t, "keyed."+fn, map[string]string{"keyed.py": keyedPy})
	return &steps{Server: steptest.New(t), f: f, w: f.Start(t)}
}

// invokeKeyed runs one invocation with key (nil: none) and the step
// context of a (nil: none).
func (s *steps) invokeKeyed(t *testing.T, a *stepctx.Attempt, key *string, input string) (functionruntime.Result, error) {
	t.Helper()
	inv := s.Invocation(s.f, a, input)
	if key != nil {
		inv.Env = map[string]string{functionruntime.EnvKey: *key}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.w.Invoke(ctx, inv)
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	exclusiveHandler = stepctx.WithHandler(stepctx.HandlerInfo{Name: "Counter/add", Keyed: true})
	sharedHandler    = stepctx.WithHandler(stepctx.HandlerInfo{Name: "Counter/get", Keyed: true, Shared: true})
	workflowHandler  = stepctx.WithHandler(stepctx.HandlerInfo{Name: "Signup/run", Keyed: true, Workflow: true})
)

// fnbridge.key() and fnbridge.state: reads return the JSON values (a
// default when absent), writes are seen by later reads, keys() is a
// sorted list, and the journal records each call.
func TestKeyedState(t *testing.T) {
	s := keyed(t, "counter")
	j := &stepctxtest.Journal{State: map[string][]byte{"count": []byte("40"), "b": []byte(`"x"`)}}
	key := "user-ü 1"
	res, err := s.invokeKeyed(t, s.Open(t, j, exclusiveHandler), &key, `2`)
	steptest.MustOutput(t, res, err, `{"key":"user-ü 1","count":42,"keys":["b","count"],"missing":"default","absent":null}`)
	if string(j.State["count"]) != "42" {
		t.Fatalf("state %q, want count=42 journaled as JSON", j.State)
	}

	// A value that is not JSON reads as bytes; an empty one is a value
	// too (Restate's state map says so), never the default. bytes are
	// written as they are (a value that is JSON then reads as JSON).
	r := keyed(t, "raw")
	j = &stepctxtest.Journal{State: map[string][]byte{"empty": {}, "text": []byte("plain")}}
	res, err = r.invokeKeyed(t, r.Open(t, j, exclusiveHandler), &key, `null`)
	steptest.MustOutput(t, res, err, `["b''","b'plain'","0","b'plain\\xff'","[1]"]`)
	if string(j.State["copy"]) != "plain\xff" || string(j.State["arr"]) != "[1]" {
		t.Fatalf("state %q, want copy and arr journaled as the bytes given", j.State)
	}

	c := keyed(t, "clearing")
	j = &stepctxtest.Journal{State: map[string][]byte{"a": []byte("1"), "b": []byte("2")}}
	res, err = c.invokeKeyed(t, c.Open(t, j, exclusiveHandler), &key, `null`)
	steptest.MustOutput(t, res, err, `[["b"],[]]`)

	b := keyed(t, "bad_values")
	res, err = b.invokeKeyed(t, b.Open(t, &stepctxtest.Journal{}, exclusiveHandler), &key, `null`)
	steptest.MustOutput(t, res, err, jsonOf(t, []string{
		"fnbridge.state.set: the value is not JSON-serializable: TypeError: Object of type set is not JSON serializable",
		"fnbridge.state.get: name must be a non-empty str, not ''",
		"fnbridge.state.set: name must be a non-empty str, not 3",
	}))
}

// Rule (issue 12): a state write from a shared handler raises
// fnbridge.TerminalError (code 500) naming the handler and saying it is
// shared; nothing is journaled and the function goes on (reads work).
func TestKeyedSharedWriteRaises(t *testing.T) {
	s := keyed(t, "shared_write")
	j := &stepctxtest.Journal{State: map[string][]byte{"count": []byte("7")}}
	key := "k"
	res, err := s.invokeKeyed(t, s.Open(t, j, sharedHandler), &key, `null`)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	if err := json.Unmarshal(res.Output, &out); err != nil || len(out) != 4 {
		t.Fatalf("output %s", res.Output)
	}
	for i, op := range []string{"set", "clear", "clear-all"} {
		e := out[i].([]any)
		if e[0] != "TerminalError" || e[1] != float64(500) || !strings.Contains(e[2].(string), "state "+op+" refused: Counter/get is a shared handler") {
			t.Fatalf("write %d: %v", i, e)
		}
	}
	if out[3] != float64(7) {
		t.Fatalf("read after the refusals: %v", out[3])
	}
	if en := j.Entries(); len(en) != 1 || en[0].Kind != "state-get" {
		t.Fatalf("journal %+v, want the read only", en)
	}
}

// fnbridge.awakeable(): the id is the same on every attempt; its future
// suspends until the awakeable is resolved, then result() is the value,
// or raises TerminalError when rejected.
func TestKeyedAwakeable(t *testing.T) {
	s := keyed(t, "approval")
	j := &stepctxtest.Journal{}
	res, err := s.invokeKeyed(t, s.Open(t, j), nil, `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, Message: "suspended"})
	_ = res
	id := stepctxtest.AwakeableID(0)
	j.ResolveAwakeable(id, stepctx.Result{Value: []byte(`{"approved":true}`)})
	j.Restart()
	res, err = s.invokeKeyed(t, s.Open(t, j), nil, `null`)
	steptest.MustOutput(t, res, err, `["ok","`+id+`",{"approved":true}]`)
	if m := marks(t, s.f.Dir); len(m) != 0 {
		t.Fatalf("marks %v", m)
	}

	j = &stepctxtest.Journal{}
	j.ResolveAwakeable(id, stepctx.Result{Failure: &stepctx.Failure{Code: 500, Message: "not approved"}})
	res, err = s.invokeKeyed(t, s.Open(t, j), nil, `null`)
	steptest.MustOutput(t, res, err, `["rejected","`+id+`",500,"not approved"]`)

	// An awakeable future is a Future like the others.
	a := keyed(t, "awakeable_any")
	j = &stepctxtest.Journal{HoldSleeps: true}
	j.ResolveAwakeable(id, stepctx.Result{Value: []byte(`5`)})
	res, err = a.invokeKeyed(t, a.Open(t, j), nil, `null`)
	steptest.MustOutput(t, res, err, `[true,5,[5]]`)
}

// resolve_awakeable, reject_awakeable and cancel journal one command each;
// with a malformed id each raises TerminalError 400, journaling nothing.
func TestKeyedCompleteAndCancel(t *testing.T) {
	s := keyed(t, "completer")
	j := &stepctxtest.Journal{}
	// Ids as restate-server prints them.
	const id, other, victim = "sign_16MThzWyQU_UkS5kx_hYOdYGSSOJcQnVbAAAAEQ", "sign_1vPE8HO1CPEmElYB-9PP0t30AmLlXUo4BAAAAEQ", "inv_1jZ1vppOUVxj16ugSTA4IHb26d8Zo1CWOT"
	res, err := s.invokeKeyed(t, s.Open(t, j), nil, `{"id":"`+id+`","other":"`+other+`","victim":"`+victim+`"}`)
	steptest.MustOutput(t, res, err, `["done",[400,400,400,"fnbridge.reject_awakeable: code must be an int from 1 to 65535, not 0",`+
		`"fnbridge.reject_awakeable: message 'bad \\udce9' is not valid Unicode text (a lone surrogate): Restate takes text as UTF-8 only",`+
		`"fnbridge.promise.reject: message 'bad \\udce9' is not valid Unicode text (a lone surrogate): Restate takes text as UTF-8 only"]]`)
	var got []string
	for _, e := range j.Entries() {
		got = append(got, e.Kind+" "+e.Name)
	}
	if want := []string{"complete-awakeable " + id, "complete-awakeable " + other, "cancel " + victim}; !reflect.DeepEqual(got, want) {
		t.Fatalf("journal %v, want %v", got, want)
	}
	if en := j.Entries(); string(en[0].Result.Value) != `{"v":1}` || en[1].Result.Failure == nil || en[1].Result.Failure.Message != "nope" || en[1].Result.Failure.Code != 404 {
		t.Fatalf("completions %+v %+v", en[0].Result, en[1].Result)
	}
}

// fnbridge.promise(name): peek is None while unresolved, resolve then get
// and peek return the value, a second resolve raises TerminalError (409),
// a rejected promise raises from get; an unresolved get suspends.
func TestKeyedPromises(t *testing.T) {
	s := keyed(t, "workflow")
	res, err := s.invokeKeyed(t, s.Open(t, &stepctxtest.Journal{}, workflowHandler), nil, `null`)
	steptest.MustOutput(t, res, err, `[null,"yes","yes",409,"403 denied","<fnbridge.Promise 'approval'>","yes"]`)

	w := keyed(t, "wait_promise")
	_, err = w.invokeKeyed(t, w.Open(t, &stepctxtest.Journal{}, workflowHandler), nil, `null`)
	steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, Message: "suspended"})
}

// In durability: function the key is the only context there is; every
// other keyed call says it needs durability: steps. Without a key (a
// plain service) fnbridge.key() says why.
func TestKeyedFunctionMode(t *testing.T) {
	s := keyed(t, "function_mode")
	key := "k9"
	res, err := s.invokeKeyed(t, nil, &key, `null`)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := json.Unmarshal(res.Output, &out); err != nil || len(out) != 4 || out[0] != "k9" {
		t.Fatalf("output %s", res.Output)
	}
	for i, api := range []string{"state.get", "awakeable", "promise.peek"} {
		if !strings.HasPrefix(out[i+1], "fnbridge."+api+" needs durability: steps") {
			t.Fatalf("%s in function mode: %q", api, out[i+1])
		}
	}
	n := keyed(t, "no_key")
	res, err = n.invokeKeyed(t, nil, nil, `null`)
	steptest.MustOutput(t, res, err, `"fnbridge.key(): this handler's service is a plain service (type: service), whose invocations have no key; keys belong to services of type virtual_object or workflow"`)
}

// A cancelled invocation's pending wait raises TerminalError 409; the
// function may compensate with a step.
func TestKeyedCancelledWaitRaises(t *testing.T) {
	s := keyed(t, "cancelled")
	j := &stepctxtest.Journal{HoldSleeps: true, CancelNextWait: true}
	res, err := s.invokeKeyed(t, s.Open(t, j), nil, `null`)
	steptest.MustOutput(t, res, err, `[409,"cancelled","undone"]`)
}

// The module's keyed names exist and are documented (no name is missing
// for a user's import).
func TestKeyedAPIIsDocumented(t *testing.T) {
	f := conformance.NewFixture(t, "names.check", map[string]string{"names.py": `
import fnbridge
def check(event):
    names = ["key", "state", "awakeable", "resolve_awakeable", "reject_awakeable", "promise", "cancel", "Promise"]
    return [n for n in names if not getattr(getattr(fnbridge, n, None), "__doc__", None)] + \
        [m for m in ("get", "set", "clear", "clear_all", "keys") if not getattr(fnbridge.state, m).__doc__]
`})
	res := f.MustInvoke(t, f.Start(t), `null`)
	if string(res.Output) != `[]` {
		t.Fatalf("undocumented or missing: %s", res.Output)
	}
}
