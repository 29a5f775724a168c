package bridge

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
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

func (f *fakeDurable) RunComplete(run rsFuture, out rsOutcome) error {
	f.calls = append(f.calls, "complete "+run.(string))
	f.completed = append(f.completed, out)
	return f.err
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

func (f *fakeDurable) Await(futures []rsFuture, mode rsAwaitMode, suspendAfter time.Duration) ([]*rsOutcome, error) {
	f.calls = append(f.calls, "await")
	f.awaited, f.mode, f.budget = futures, mode, suspendAfter
	return f.outcomes, f.err
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
	if err := j.RunComplete(ctx, run, stepctx.RunOutcome{Retryable: &stepctx.RetryableFailure{Message: "flaky"}}); err != nil {
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
	wantCalls := []string{"run fetch", "complete run-future", "complete run-future", "sleep 3s", "call", "send", "await", "await"}
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
		{restate.ErrCancelled, restate.ErrCancelled},
	} {
		f := &fakeDurable{err: tc.in}
		j := restateJournal{dc: f}
		_, _, e1 := j.RunStart(ctx, "x")
		e2 := j.RunComplete(ctx, "run-future", stepctx.RunOutcome{})
		_, e3 := j.Sleep(ctx, 0)
		_, e4 := j.Call(ctx, stepctx.CallRequest{})
		_, e5 := j.Send(ctx, stepctx.SendRequest{})
		_, e6 := j.Await(ctx, []stepctx.Future{"timer"}, stepctx.AwaitAll, time.Second)
		for i, e := range []error{e1, e2, e3, e4, e5, e6} {
			if !errors.Is(e, tc.want) {
				t.Errorf("%v: operation %d returned %v, want %v", tc.in, i, e, tc.want)
			}
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
	if err := stepsToRestate(&Error{Class: ClassTerminal, Message: "bad"}); !errors.As(err, &te) || te.Message != "bad" {
		t.Errorf("terminal handler failure → %v, want terminal", err)
	}
	if err := stepsToRestate(&Error{Class: ClassTimeout, Message: "slow"}); !errors.As(err, &re) || re.Code != restate.CodeGatewayTimeout {
		t.Errorf("timeout → %v, want retryable 504", err)
	}
}
