package bridge

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/restate"
)

// fakeDurable records what the adapter asks of restate and answers as
// scripted.
type fakeDurable struct {
	calls     []string
	recorded  *rsOutcome // RunStart's replayed outcome
	completed []rsOutcome
	call      rsCallRequest
	send      rsSendRequest
	awaited   []rsFuture
	mode      rsAwaitMode
	budget    time.Duration
	outcomes  []*rsOutcome
	err       error // returned by every operation
}

var _ durableContext = (*fakeDurable)(nil)

func (f *fakeDurable) InvocationID() string { return "inv_fake" }
func (f *fakeDurable) RandomSeed() uint64   { return 42 }

func (f *fakeDurable) RunStart(name string) (*rsOutcome, rsFuture, error) {
	f.calls = append(f.calls, "run "+name)
	if f.recorded != nil {
		return f.recorded, nil, f.err
	}
	return nil, "run-future", f.err
}

func (f *fakeDurable) RunStartDone(name string) (*rsOutcome, rsFuture, error) {
	f.calls = append(f.calls, "run-done "+name)
	if f.recorded != nil {
		return f.recorded, nil, f.err
	}
	return nil, "run-future", f.err
}

func (f *fakeDurable) RunCompleteContext(_ context.Context, run rsFuture, out rsOutcome) error {
	f.calls = append(f.calls, "complete "+run.(string))
	f.completed = append(f.completed, out)
	return f.err
}

func (f *fakeDurable) RunFail(run rsFuture, err *restate.RetryableError) error {
	f.calls = append(f.calls, "fail "+run.(string)+": "+err.Message)
	return restate.ErrAttemptEnded
}

func (f *fakeDurable) Sleep(d time.Duration) (rsFuture, error) {
	f.calls = append(f.calls, "sleep "+d.String())
	return "timer", f.err
}

func (f *fakeDurable) Call(req rsCallRequest) (rsFuture, error) {
	f.calls = append(f.calls, "call")
	f.call = req
	return "call-future", f.err
}

func (f *fakeDurable) Send(req rsSendRequest) (string, error) {
	f.calls = append(f.calls, "send")
	f.send = req
	return "inv_callee", f.err
}

func (f *fakeDurable) AwaitContext(_ context.Context, futures []rsFuture, mode rsAwaitMode, suspendAfter time.Duration) ([]*rsOutcome, error) {
	f.calls = append(f.calls, "await")
	f.awaited, f.mode, f.budget = futures, mode, suspendAfter
	return f.outcomes, f.err
}

func (f *fakeDurable) Key() string { return "k1" }

func (f *fakeDurable) GetState(name string) ([]byte, bool, error) {
	f.calls = append(f.calls, "get "+name)
	return []byte("v-" + name), name != "none", f.err
}

func (f *fakeDurable) StateKeys() ([]string, error) {
	f.calls = append(f.calls, "keys")
	return []string{"a", "b"}, f.err
}

func (f *fakeDurable) SetState(name string, value []byte) error {
	f.calls = append(f.calls, "set "+name+"="+string(value))
	return f.err
}

func (f *fakeDurable) ClearState(name string) error {
	f.calls = append(f.calls, "clear "+name)
	return f.err
}

func (f *fakeDurable) ClearAllState() error {
	f.calls = append(f.calls, "clear-all")
	return f.err
}

func (f *fakeDurable) Awakeable() (string, rsFuture, error) {
	f.calls = append(f.calls, "awakeable")
	return "sign_1x", "awakeable-future", f.err
}

func (f *fakeDurable) CompleteAwakeable(id string, out rsOutcome) error {
	f.calls = append(f.calls, "complete-awakeable "+id)
	f.completed = append(f.completed, out)
	return f.err
}

func (f *fakeDurable) Promise(name string) (rsFuture, error) {
	f.calls = append(f.calls, "promise "+name)
	return "promise-future", f.err
}

func (f *fakeDurable) PeekPromise(name string) (*rsOutcome, error) {
	f.calls = append(f.calls, "peek "+name)
	if name == "unresolved" {
		return nil, f.err
	}
	return &rsOutcome{Value: []byte("p")}, f.err
}

func (f *fakeDurable) CompletePromise(name string, out rsOutcome) error {
	f.calls = append(f.calls, "complete-promise "+name)
	f.completed = append(f.completed, out)
	return f.err
}

func (f *fakeDurable) CancelInvocation(id string) error {
	f.calls = append(f.calls, "cancel "+id)
	return f.err
}

// The keyed operations pass through to restate as they are; a value or
// failure of a completion keeps its bytes and code.
func TestRestateJournalMapsKeyedOperations(t *testing.T) {
	ctx := context.Background()
	f := &fakeDurable{}
	j := restateJournal{dc: f}
	if v, found, err := j.GetState(ctx, "count"); err != nil || !found || string(v) != "v-count" {
		t.Fatalf("GetState = %q %v %v", v, found, err)
	}
	if _, found, _ := j.GetState(ctx, "none"); found {
		t.Fatal("GetState of a missing key found it")
	}
	if keys, err := j.StateKeys(ctx); err != nil || !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Fatalf("StateKeys = %v %v", keys, err)
	}
	for _, err := range []error{j.SetState(ctx, "count", []byte("2")), j.ClearState(ctx, "old"), j.ClearAllState(ctx),
		j.CompleteAwakeable(ctx, "sign_1y", stepctx.Result{Value: []byte("ok")}),
		j.CompleteAwakeable(ctx, "sign_1z", stepctx.Result{Failure: &stepctx.Failure{Code: 500, Message: "no"}}),
		j.CompletePromise(ctx, "approval", stepctx.Result{Value: []byte("yes")}), j.CancelInvocation(ctx, "inv_1v")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if id, fut, err := j.Awakeable(ctx); err != nil || id != "sign_1x" || fut != "awakeable-future" {
		t.Fatalf("Awakeable = %q %v %v", id, fut, err)
	}
	if fut, err := j.Promise(ctx, "approval"); err != nil || fut != "promise-future" {
		t.Fatalf("Promise = %v %v", fut, err)
	}
	if r, err := j.PeekPromise(ctx, "approval"); err != nil || r == nil || string(r.Value) != "p" {
		t.Fatalf("PeekPromise = %+v %v", r, err)
	}
	if r, err := j.PeekPromise(ctx, "unresolved"); err != nil || r != nil {
		t.Fatalf("PeekPromise of an unresolved promise = %+v %v, want nil", r, err)
	}
	want := []rsOutcome{{Value: []byte("ok")}, {Failure: &restate.TerminalError{Code: 500, Message: "no"}}, {Value: []byte("yes")}}
	if !reflect.DeepEqual(f.completed, want) {
		t.Fatalf("completed %+v, want %+v", f.completed, want)
	}
	wantCalls := []string{"get count", "get none", "keys", "set count=2", "clear old", "clear-all", "complete-awakeable sign_1y",
		"complete-awakeable sign_1z", "complete-promise approval", "cancel inv_1v", "awakeable", "promise approval", "peek approval", "peek unresolved"}
	if !reflect.DeepEqual(f.calls, wantCalls) {
		t.Fatalf("calls %v, want %v", f.calls, wantCalls)
	}
	// A promise completed before: restate's TerminalError fails the call
	// alone, keeping its code, and says which promise (restate-server's
	// message does not).
	var cf *stepctx.CallFailedError
	err := restateJournal{dc: &fakeDurable{err: &restate.TerminalError{Code: 409, Message: "promise was already completed"}}}.CompletePromise(ctx, "p", stepctx.Result{})
	if !errors.As(err, &cf) || cf.Failure.Code != 409 || cf.Failure.Message != `promise "p": promise was already completed` {
		t.Fatalf("CompletePromise of a completed promise = %v, want a 409 call failure", err)
	}
	// Cancelled meanwhile: the cancellation as every call reports it.
	err = restateJournal{dc: &fakeDurable{err: restate.ErrCancelled}}.CompletePromise(ctx, "p", stepctx.Result{})
	if !errors.As(err, &cf) || cf.Failure.Message != stepctx.Cancelled().Failure.Message {
		t.Fatalf("CompletePromise cancelled = %v, want the plain cancellation", err)
	}
}

func TestRestateJournalMapsEveryOperation(t *testing.T) {
	ctx := context.Background()
	f := &fakeDurable{}
	j := restateJournal{dc: f, suspendAfter: 7 * time.Second}

	res, run, err := j.RunStart(ctx, "fetch")
	if err != nil || res != nil || run != "run-future" {
		t.Fatalf("RunStart = %v, %v, %v; want execute with the run future", res, run, err)
	}
	if err := j.RunComplete(ctx, run, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte(`"v"`)}}); err != nil {
		t.Fatal(err)
	}
	if err := j.RunComplete(ctx, run, stepctx.RunOutcome{Result: stepctx.Result{Failure: &stepctx.Failure{Code: 404, Message: "gone"}}}); err != nil {
		t.Fatal(err)
	}
	if err := j.RunComplete(ctx, run, stepctx.RunOutcome{Retryable: &stepctx.RetryableFailure{Step: "fetch", Message: "flaky"}}); err != nil {
		t.Fatal(err)
	}
	want := []rsOutcome{{Value: []byte(`"v"`)}, {Failure: &restate.TerminalError{Code: 404, Message: "gone"}}}
	if !reflect.DeepEqual(f.completed, want) {
		t.Fatalf("completed %+v, want %+v (a retryable failure journals nothing)", f.completed, want)
	}

	if fut, err := j.Sleep(ctx, 3*time.Second); err != nil || fut != "timer" {
		t.Fatalf("Sleep = %v, %v", fut, err)
	}
	creq := stepctx.CallRequest{Service: "S", Handler: "h", Key: "k", IdempotencyKey: "i", Headers: map[string]string{"a": "b"}, Input: []byte("in")}
	if fut, err := j.Call(ctx, creq); err != nil || fut != "call-future" {
		t.Fatalf("Call = %v, %v", fut, err)
	}
	wantCall := rsCallRequest{Service: "S", Handler: "h", Key: "k", IdempotencyKey: "i", Headers: map[string]string{"a": "b"}, Input: []byte("in")}
	if !reflect.DeepEqual(f.call, wantCall) {
		t.Fatalf("call %+v, want %+v", f.call, wantCall)
	}
	id, err := j.Send(ctx, stepctx.SendRequest{CallRequest: creq, Delay: time.Minute})
	if err != nil || id != "inv_callee" {
		t.Fatalf("Send = %q, %v", id, err)
	}
	if !reflect.DeepEqual(f.send.CallRequest, wantCall) || f.send.Delay != time.Minute {
		t.Fatalf("send %+v", f.send)
	}

	f.outcomes = []*rsOutcome{nil, {Failure: &restate.TerminalError{Code: 0, Message: "boom"}}}
	got, err := j.Await(ctx, []stepctx.Future{"timer", "call-future"}, stepctx.AwaitAny, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != nil || got[1].Failure == nil || got[1].Failure.Message != "boom" || f.mode != rsAwaitAny || f.budget != 7*time.Second {
		t.Fatalf("Await = %+v (mode %v, budget %s); want the second failed, any, the handler's budget", got, f.mode, f.budget)
	}
	if !reflect.DeepEqual(f.awaited, []rsFuture{"timer", "call-future"}) {
		t.Fatalf("awaited %v", f.awaited)
	}
	f.outcomes = []*rsOutcome{{Value: []byte("x")}}
	if got, err := j.Await(ctx, []stepctx.Future{"timer"}, stepctx.AwaitAll, time.Second); err != nil || string(got[0].Value) != "x" || f.mode != rsAwaitAll || f.budget != time.Second {
		t.Fatalf("Await all = %+v, %v (mode %v, budget %s)", got, err, f.mode, f.budget)
	}
	if j.InvocationID() != "inv_fake" || j.RandomSeed() != 42 {
		t.Fatal("InvocationID/RandomSeed not passed through")
	}
	// A step whose completion came with its start: restate's RunStartDone.
	if res, run, err := j.RunStartDone(ctx, "quick"); err != nil || res != nil || run != "run-future" {
		t.Fatalf("RunStartDone = %v, %v, %v; want execute with the run future", res, run, err)
	}
	// The retryable failure ends the attempt naming its step.
	wantCalls := []string{"run fetch", "complete run-future", "complete run-future", `fail run-future: step "fetch" failed and will be retried: flaky`, "sleep 3s", "call", "send", "await", "await", "run-done quick"}
	if !reflect.DeepEqual(f.calls, wantCalls) {
		t.Fatalf("calls %v, want %v", f.calls, wantCalls)
	}
}

func TestRestateJournalReplayedRun(t *testing.T) {
	f := &fakeDurable{recorded: &rsOutcome{Failure: &restate.TerminalError{Code: 409, Message: "no"}}}
	res, run, err := restateJournal{dc: f}.RunStart(context.Background(), "x")
	if err != nil || run != nil || res == nil || res.Failure == nil || res.Failure.Code != 409 || res.Failure.Message != "no" {
		t.Fatalf("RunStart on replay = %+v, %v, %v; want the recorded failure and no future", res, run, err)
	}
}

func TestRestateJournalMapsErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		in   error
		want error
	}{
		{errRestateSuspended, stepctx.ErrSuspended},
		{restate.ErrAttemptEnded, restate.ErrAttemptEnded},
		// The invocation's cancellation fails the call (409) alone, and
		// the journal remembers the function saw it.
		{restate.ErrCancelled, stepctx.Cancelled()},
	} {
		f := &fakeDurable{err: tc.in}
		var cancelled atomic.Bool
		j := restateJournal{dc: f, cancelled: &cancelled}
		_, _, e1 := j.RunStart(ctx, "x")
		e2 := j.RunComplete(ctx, "run-future", stepctx.RunOutcome{})
		_, e3 := j.Sleep(ctx, 0)
		_, e4 := j.Call(ctx, stepctx.CallRequest{})
		_, e5 := j.Send(ctx, stepctx.SendRequest{})
		_, e6 := j.Await(ctx, []stepctx.Future{"timer"}, stepctx.AwaitAll, time.Second)
		for i, e := range []error{e1, e2, e3, e4, e5, e6} {
			var cf *stepctx.CallFailedError
			if !errors.Is(e, tc.want) && !(errors.As(tc.want, &cf) && reflect.DeepEqual(e, tc.want)) {
				t.Errorf("%v: operation %d returned %v, want %v", tc.in, i, e, tc.want)
			}
		}
		if cancelled.Load() != errors.Is(tc.in, restate.ErrCancelled) {
			t.Errorf("%v: cancelled recorded %v", tc.in, cancelled.Load())
		}
	}
	if _, err := (restateJournal{dc: &fakeDurable{}}).Await(ctx, []stepctx.Future{nil}, stepctx.AwaitAll, time.Second); err == nil {
		t.Fatal("a nil future was accepted")
	}
}

func TestStepsToRestate(t *testing.T) {
	var re *restate.RetryableError
	var te *restate.TerminalError
	if err := stepsToRestate(stepctx.ErrSuspended); !errors.Is(err, restate.ErrAttemptEnded) {
		t.Errorf("suspended → %v, want attempt ended", err)
	}
	if err := stepsToRestate(errors.Join(errors.New("journal"), restate.ErrCancelled)); !errors.Is(err, restate.ErrCancelled) {
		t.Errorf("cancelled → %v", err)
	}
	if err := stepsToRestate(&stepctx.StepFailedError{Name: "fetch", Message: "flaky"}); !errors.As(err, &re) || re.Pause {
		t.Errorf("step failed → %v, want retryable", err)
	}
	if err := stepsToRestate(&stepctx.StepTooLargeError{Name: "dump", Size: 60 << 20, Limit: 48 << 20}); !errors.As(err, &re) || !re.Pause || !strings.Contains(re.Message, `step "dump"`) {
		t.Errorf("step value too large → %v, want a pause naming the step", err)
	}
	if err := stepsToRestate(&Error{Class: ClassTerminal, Message: "bad"}); !errors.As(err, &te) || te.Message != "bad" {
		t.Errorf("terminal handler failure → %v, want terminal", err)
	}
	if err := stepsToRestate(&Error{Class: ClassTimeout, Message: "slow"}); !errors.As(err, &re) || re.Code != restate.CodeGatewayTimeout {
		t.Errorf("timeout → %v, want retryable 504", err)
	}
	// A function that saw its cancellation and failed terminally ends
	// the invocation with 409 and its own message; before a cancellation
	// a terminal failure keeps its class.
	var cancelled atomic.Bool
	if err := stepsToRestate(cancelledFailure(&Error{Class: ClassTerminal, Message: "rolled back"}, &cancelled)); !errors.As(err, &te) || te.Code != restate.CodeInternal {
		t.Errorf("terminal failure without a cancellation → %v, want 500", err)
	}
	cancelled.Store(true)
	if err := stepsToRestate(cancelledFailure(&Error{Class: ClassTerminal, Message: "rolled back"}, &cancelled)); !errors.As(err, &te) || te.Code != restate.CodeCancelled || te.Message != "rolled back" {
		t.Errorf("terminal failure after the cancellation → %v, want 409 with the function's message", err)
	}
	// A failure with its own code keeps it (a compensation's 422).
	if err := stepsToRestate(cancelledFailure(&Error{Class: ClassTerminal, Message: "rolled back", Code: 422}, &cancelled)); !errors.As(err, &te) || te.Code != 422 || te.Message != "rolled back" {
		t.Errorf("terminal failure with a code after the cancellation → %v, want that code", err)
	}
	if err := stepsToRestate(cancelledFailure(&Error{Class: ClassHandler, Message: "flaky"}, &cancelled)); !errors.As(err, &re) {
		t.Errorf("retryable failure after the cancellation → %v, want it retried", err)
	}
}

// waitingDurable is a fakeDurable whose waits end only with their
// context, as restate's do while nothing completes, or suspend when their
// budget is below a millisecond, as restate's then do at once.
type waitingDurable struct {
	fakeDurable
	entered, left chan struct{}
}

func (w *waitingDurable) AwaitContext(ctx context.Context, _ []rsFuture, _ rsAwaitMode, suspendAfter time.Duration) ([]*rsOutcome, error) {
	if suspendAfter < time.Millisecond {
		return nil, errRestateSuspended
	}
	w.entered <- struct{}{}
	<-ctx.Done()
	w.left <- struct{}{}
	return nil, ctx.Err()
}

// A function that gives up a wait (`timeout 2 fnbridge sleep 60`) goes on
// as if it were incomplete, which a replay, finding it complete, would not
// reproduce: the attempt suspends on the wait at once, and its next call
// finds it ended. It went on before, journaling steps a replay could never
// match (570 on every retry).
func TestRestateJournalWaitGivenUpSuspendsTheAttempt(t *testing.T) {
	srv, addr, _ := stepctxtest.Serve(t)
	w := &waitingDurable{entered: make(chan struct{}, 1), left: make(chan struct{}, 1)}
	a, err := srv.Open("", restateJournal{dc: w, suspendAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, err := stepctx.NewClient(addr, a.Token())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	slept := make(chan error, 1)
	go func() {
		_, err := c.Sleep(ctx, time.Minute)
		slept <- err
	}()
	<-w.entered
	cancel() // the client hangs up mid-wait
	if err := <-slept; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned sleep returned %v", err)
	}
	<-w.left // the server noticed the hang-up and ended the wait
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt went on after its wait was given up")
	}
	if err := a.Err(); !errors.Is(err, stepctx.ErrSuspended) {
		t.Fatalf("the attempt ended with %v, want it suspended", err)
	}
	if _, _, err := c.RunStart(context.Background(), "next"); err == nil {
		t.Fatal("a step after the given-up wait was served; want the attempt's end")
	}
}
