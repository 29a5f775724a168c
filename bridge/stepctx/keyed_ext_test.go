package stepctx_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
)

// Well-formed ids in restate-server's format: the invocation ids are
// those of bridge/invocation_id_test.go and internal/restateserver's
// tests, the sign_1 ids are derived from them (signal index 17), the
// prom_1 one is the protocol specification's example.
const (
	realInvocationID  = "inv_1jZ1vppOUVxj16ugSTA4IHb26d8Zo1CWOT"
	realInvocationID2 = "inv_1gdJBtdVEcM942bjcDmb1c1khoaJe11Hbz"
	realSignID        = "sign_16MThzWyQU_UkS5kx_hYOdYGSSOJcQnVbAAAAEQ"
	realSignID2       = "sign_1vPE8HO1CPEmElYB-9PP0t30AmLlXUo4BAAAAEQ"
	realPromID        = "prom_1NMyOAvDK2CcBjUH4Rmb7eGBp0DNNDnmsAAAAAQ"
)

// Malformed ids restate-server rejects when the command reaches it, so a
// journaled one failed every retry: each is the call's terminal failure
// (400) and journals nothing.
var (
	badAwakeableIDs = []string{"", "nonsense", "sign_1AAAA", "prom_2abc", "sign_1", "sign_1 spaces", "awk_1abc",
		realSignID[:len(realSignID)-1],       // 37 characters: 27 bytes and a half
		realSignID + "AA",                    // 29 bytes
		realSignID[:len(realSignID)-1] + "R", // non-zero trailing bits
		realSignID[:20] + "\n" + realSignID[20:],
		"sign_2" + realSignID[6:], "inv_1" + realSignID[6:]}
	badInvocationIDs = []string{"", "42", "nonsense", "inv_", "inv_1abc", "1gHJ", "inv_a-b", "inv_a b",
		realInvocationID[:len(realInvocationID)-1], realInvocationID + "x",
		"inv_2" + realInvocationID[5:],                             // another scheme version
		"inv_1" + strings.Repeat("z", 11) + realInvocationID[16:],  // the partition key overflows u64
		"inv_1" + realInvocationID[5:16] + strings.Repeat("Z", 22), // the uuid overflows u128
		"inv_1" + realInvocationID[5:20] + "-" + realInvocationID[21:],
		"sign_1" + realInvocationID[5:]}
)

var (
	exclusive = stepctx.HandlerInfo{Name: "Counter/add", Keyed: true}
	shared    = stepctx.HandlerInfo{Name: "Counter/get", Keyed: true, Shared: true}
	wfRun     = stepctx.HandlerInfo{Name: "Signup/run", Keyed: true, Workflow: true}
	wfShared  = stepctx.HandlerInfo{Name: "Signup/approve", Keyed: true, Workflow: true, Shared: true}
	// withServices is a plain handler of a deployment that also serves a
	// virtual object and a workflow.
	withServices = stepctx.HandlerInfo{Name: "Greeter/greet", Services: map[string]string{
		"Greeter": "service", "Counter": "virtual_object", "Signup": "workflow"},
		Handlers: map[string][]string{"Greeter": {"greet"}, "Counter": {"add", "get"}, "Signup": {"run"}}}
)

// wantFailure asserts err is the terminal failure of one call (the
// attempt goes on) with code and a message containing substr.
func wantFailure(t *testing.T, err error, code uint16, substr string) {
	t.Helper()
	var cf *stepctx.CallFailedError
	if !errors.As(err, &cf) || cf.Failure.Code != code || !strings.Contains(cf.Failure.Message, substr) {
		t.Fatalf("got %v, want a terminal call failure %d containing %q", err, code, substr)
	}
}

// State through the context endpoint: reads see the journal's state and
// this attempt's writes; keys are sorted; values are bytes as written.
func TestStateRoundTrips(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{State: map[string][]byte{"count": []byte("1"), "b": []byte(`"x"`)}}
	a, c := open(t, s, addr, j, stepctx.WithHandler(exclusive))
	ctx := context.Background()
	if v, found, err := c.GetState(ctx, "count"); err != nil || !found || string(v) != "1" {
		t.Fatalf("GetState = %q %v %v", v, found, err)
	}
	if v, found, err := c.GetState(ctx, "none"); err != nil || found || v != nil {
		t.Fatalf("GetState of a missing key = %q %v %v, want not found", v, found, err)
	}
	if err := c.SetState(ctx, "count", []byte("2\n\xff")); err != nil {
		t.Fatal(err)
	}
	if err := c.ClearState(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := c.GetState(ctx, "count"); string(v) != "2\n\xff" {
		t.Fatalf("the write is not read back byte for byte: %q", v)
	}
	if keys, err := c.StateKeys(ctx); err != nil || !reflect.DeepEqual(keys, []string{"count"}) {
		t.Fatalf("StateKeys = %v %v", keys, err)
	}
	if err := c.ClearAllState(ctx); err != nil {
		t.Fatal(err)
	}
	if keys, err := c.StateKeys(ctx); err != nil || len(keys) != 0 || keys == nil {
		t.Fatalf("StateKeys after clear-all = %#v %v, want an empty list", keys, err)
	}
	kinds := []string{}
	for _, e := range j.Entries() {
		kinds = append(kinds, e.Kind+" "+e.Name)
	}
	want := []string{"state-get count", "state-get none", "state-set count", "state-clear b", "state-get count",
		"state-keys ", "state-clear-all ", "state-keys "}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("journal %v, want %v", kinds, want)
	}
	if a.Err() != nil {
		t.Fatalf("the attempt ended: %v", a.Err())
	}
}

// Rule (issue 12): "a state-writing call from a shared handler" fails
// that call terminally, naming the handler and saying it is shared; it
// journals nothing and the attempt goes on (reads stay allowed). State in
// a plain service and promises outside a workflow are refused the same
// way.
func TestRefusedCalls(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		h    stepctx.HandlerInfo
		call func(c *stepctx.Client) error
		want string
	}{
		{"set from a shared handler", shared, func(c *stepctx.Client) error { return c.SetState(ctx, "n", []byte("1")) },
			"state set refused: Counter/get is a shared handler (shared: true): shared handlers read state but cannot change it"},
		{"clear from a shared handler", shared, func(c *stepctx.Client) error { return c.ClearState(ctx, "n") },
			"state clear refused: Counter/get is a shared handler"},
		{"clear-all from a shared handler", shared, func(c *stepctx.Client) error { return c.ClearAllState(ctx) },
			"state clear-all refused: Counter/get is a shared handler"},
		{"set from a workflow's shared handler", wfShared, func(c *stepctx.Client) error { return c.SetState(ctx, "n", []byte("1")) },
			"state set refused: Signup/approve is a shared handler (every workflow handler but run is shared)"},
		{"state in a plain service", stepctx.HandlerInfo{Name: "Greeter/greet"}, func(c *stepctx.Client) error { _, _, err := c.GetState(ctx, "n"); return err },
			"state get refused: Greeter/greet belongs to a plain service, which has no state"},
		{"promise in a virtual object", exclusive, func(c *stepctx.Client) error { _, err := c.Promise(ctx, "p"); return err },
			"promise get refused: Counter/add is not a handler of a workflow"},
		{"peek in a plain service", stepctx.HandlerInfo{}, func(c *stepctx.Client) error { _, err := c.PeekPromise(ctx, "p"); return err },
			"promise peek refused: this handler is not a handler of a workflow"},
		{"resolve in a virtual object", exclusive, func(c *stepctx.Client) error { return c.ResolvePromise(ctx, "p", []byte("1")) },
			"promise resolve refused"},
		// A call's key checked against the callee's type, when this
		// deployment serves it: Restate would run a keyed handler under
		// the empty key.
		{"call to an object without a key", withServices, func(c *stepctx.Client) error {
			_, err := c.Call(ctx, stepctx.CallRequest{Service: "Counter", Handler: "add"})
			return err
		}, "call Counter/add refused: Counter is a virtual object, whose handlers run under a key: give one (key= in Python, --key in Bash)"},
		{"send to a workflow without a key", withServices, func(c *stepctx.Client) error {
			_, err := c.Send(ctx, stepctx.SendRequest{CallRequest: stepctx.CallRequest{Service: "Signup", Handler: "run"}})
			return err
		}, "send Signup/run refused: Signup is a workflow, whose handlers run under a key"},
		{"call to a plain service with a key", withServices, func(c *stepctx.Client) error {
			_, err := c.Call(ctx, stepctx.CallRequest{Service: "Greeter", Handler: "greet", Key: "k"})
			return err
		}, "call Greeter/greet refused: Greeter is a plain service (type: service), whose handlers take no key; call it without one"},
		// A handler the deployment's service lacks: Restate would fail the
		// invocation and retry it until it paused, the function never told.
		{"call to a handler the service lacks", withServices, func(c *stepctx.Client) error {
			_, err := c.Call(ctx, stepctx.CallRequest{Service: "Counter", Handler: "ad", Key: "k"})
			return err
		}, `call Counter/ad refused: Counter has no handler "ad" (its handlers: add, get)`},
		{"send to a handler the service lacks", withServices, func(c *stepctx.Client) error {
			_, err := c.Send(ctx, stepctx.SendRequest{CallRequest: stepctx.CallRequest{Service: "Greeter", Handler: "nosuch"}})
			return err
		}, `send Greeter/nosuch refused: Greeter has no handler "nosuch" (its handlers: greet)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &stepctxtest.Journal{}
			a, c := open(t, s, addr, j, stepctx.WithHandler(tc.h))
			wantFailure(t, tc.call(c), 500, tc.want)
			if n := len(j.Entries()); n != 0 || a.Err() != nil {
				t.Fatalf("%d journal entries, attempt %v: a refused call journals nothing and ends nothing", n, a.Err())
			}
			if _, err := c.InvocationID(ctx); err != nil {
				t.Fatalf("the attempt does not go on: %v", err)
			}
		})
	}
	// Calls whose key fits go on, as do calls to services the deployment
	// does not serve (Restate's to check).
	j0 := &stepctxtest.Journal{}
	_, c0 := open(t, s, addr, j0, stepctx.WithHandler(withServices))
	for _, req := range []stepctx.CallRequest{{Service: "Counter", Handler: "add", Key: "k"}, {Service: "Greeter", Handler: "greet"}, {Service: "Elsewhere", Handler: "h"}, {Service: "Elsewhere", Handler: "h", Key: "k"}} {
		if _, err := c0.Send(ctx, stepctx.SendRequest{CallRequest: req}); err != nil {
			t.Fatalf("send %+v: %v", req, err)
		}
	}
	if n := len(j0.Entries()); n != 4 {
		t.Fatalf("%d sends journaled, want 4", n)
	}
	// A shared handler reads.
	j := &stepctxtest.Journal{State: map[string][]byte{"n": []byte("5")}}
	_, c := open(t, s, addr, j, stepctx.WithHandler(shared))
	if v, _, err := c.GetState(ctx, "n"); err != nil || string(v) != "5" {
		t.Fatalf("a shared handler's read: %q %v", v, err)
	}
	if keys, err := c.StateKeys(ctx); err != nil || len(keys) != 1 {
		t.Fatalf("a shared handler's listing: %v %v", keys, err)
	}
}

// Awakeables: the id is its own handle (Await takes it), it is the same
// on every attempt, and a rejection is the future's terminal failure.
func TestAwakeables(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	j := &stepctxtest.Journal{}
	a1, c := open(t, s, addr, j)
	id, err := c.Awakeable(ctx)
	if err != nil || id != stepctxtest.AwakeableID(0) {
		t.Fatalf("Awakeable = %q %v", id, err)
	}
	_, err = c.Await(ctx, id)
	if !errors.Is(err, stepctx.ErrSuspended) {
		t.Fatalf("awaiting an unresolved awakeable: %v, want suspension", err)
	}
	a1.Close()
	j.ResolveAwakeable(id, stepctx.Result{Value: []byte(`{"approved":true}`)})
	j.ResolveAwakeable(stepctxtest.AwakeableID(1), stepctx.Result{Failure: &stepctx.Failure{Code: 500, Message: "denied"}})
	j.Restart()
	a2, c := open(t, s, addr, j)
	again, _ := c.Awakeable(ctx)
	second, _ := c.Awakeable(ctx)
	if again != id {
		t.Fatalf("the next attempt's first awakeable is %q, want %q again", again, id)
	}
	rs, err := c.Await(ctx, again, second)
	if err != nil || string(rs[0].Value) != `{"approved":true}` || rs[1].Failure == nil || rs[1].Failure.Message != "denied" {
		t.Fatalf("Await = %+v %v, want the value and the rejection", rs, err)
	}
	if err := c.ResolveAwakeable(ctx, realSignID, []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	if err := c.RejectAwakeable(ctx, realSignID2, "no way", 0); err != nil {
		t.Fatal(err)
	}
	en := j.Entries()
	if len(en) != 2 || en[0].Kind != "complete-awakeable" || en[0].Name != realSignID || string(en[0].Result.Value) != "1" ||
		en[1].Result.Failure == nil || en[1].Result.Failure.Message != "no way" || en[1].Result.Failure.Code != 500 {
		t.Fatalf("journal %+v", en)
	}
	// The older prom_1 form and padding: restate-server takes both.
	for _, ok := range []string{realPromID, realSignID + "==", realSignID + "=", id} {
		if err := c.ResolveAwakeable(ctx, ok, []byte(`2`)); err != nil {
			t.Fatalf("%q: %v", ok, err)
		}
	}
	before := len(j.Entries())
	for _, bad := range badAwakeableIDs {
		wantFailure(t, c.ResolveAwakeable(ctx, bad, []byte("1")), 400, "is not an awakeable id")
		wantFailure(t, c.RejectAwakeable(ctx, bad, "no", 0), 400, "is not an awakeable id")
	}
	if n := len(j.Entries()); n != before || a2.Err() != nil {
		t.Fatalf("malformed ids journaled %d commands; attempt %v", n-before, a2.Err())
	}
}

// Workflow promises: get waits (suspends when unresolved), peek reads
// without waiting, resolve and reject complete, and completing twice is
// the call's terminal failure.
func TestPromisesRoundTrip(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	j := &stepctxtest.Journal{}
	a, c := open(t, s, addr, j, stepctx.WithHandler(wfShared))
	if r, err := c.PeekPromise(ctx, "approval"); err != nil || r != nil {
		t.Fatalf("peek of an unresolved promise = %+v %v, want nil", r, err)
	}
	if err := c.ResolvePromise(ctx, "approval", []byte(`"yes"`)); err != nil {
		t.Fatal(err)
	}
	if r, err := c.PeekPromise(ctx, "approval"); err != nil || r == nil || string(r.Value) != `"yes"` {
		t.Fatalf("peek = %+v %v", r, err)
	}
	wantFailure(t, c.ResolvePromise(ctx, "approval", []byte(`"again"`)), 409, "completed already")
	if err := c.RejectPromise(ctx, "other", "no", 451); err != nil {
		t.Fatal(err)
	}
	if a.Err() != nil {
		t.Fatalf("attempt ended: %v", a.Err())
	}

	_, run := open(t, s, addr, j, stepctx.WithHandler(wfRun))
	if r, err := run.Promise(ctx, "approval"); err != nil || string(r.Value) != `"yes"` {
		t.Fatalf("get = %+v %v", r, err)
	}
	if r, err := run.Promise(ctx, "other"); err != nil || r.Failure == nil || r.Failure.Message != "no" || r.Failure.Code != 451 {
		t.Fatalf("get of the rejected promise = %+v %v, want its failure", r, err)
	}
	if _, err := run.Promise(ctx, "never"); !errors.Is(err, stepctx.ErrSuspended) {
		t.Fatalf("get of an unresolved promise: %v, want suspension", err)
	}
}

// Cancel: one SendSignal per call, to a well-formed invocation id.
func TestCancel(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	j := &stepctxtest.Journal{}
	a, c := open(t, s, addr, j)
	for _, id := range []string{realInvocationID, realInvocationID2} {
		if err := c.CancelInvocation(ctx, id); err != nil {
			t.Fatalf("%q: %v", id, err)
		}
	}
	for _, bad := range badInvocationIDs {
		wantFailure(t, c.CancelInvocation(ctx, bad), 400, "is not an invocation id")
	}
	if en := j.Entries(); len(en) != 2 || en[0].Kind != "cancel" || en[0].Name != realInvocationID || en[1].Name != realInvocationID2 {
		t.Fatalf("journal %+v", en)
	}
	if a.Err() != nil {
		t.Fatalf("attempt ended: %v", a.Err())
	}
}

// A Journal's CallFailedError (the invocation's cancellation while
// waiting) fails that call alone: the function may go on.
func TestCallFailureLeavesTheAttemptOpen(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	j := &stepctxtest.Journal{CancelNextWait: true}
	a, c := open(t, s, addr, j)
	_, err := c.Sleep(ctx, 0)
	wantFailure(t, err, 409, "cancelled")
	if a.Err() != nil {
		t.Fatalf("attempt ended: %v", a.Err())
	}
	if _, h, err := c.RunStart(ctx, "compensate"); err != nil || h == "" {
		t.Fatalf("a step after the cancellation: %q %v", h, err)
	}
}
