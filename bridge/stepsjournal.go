package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/restate"
)

// restateJournal is the stepctx.Journal of one attempt served by Restate:
// each context call of the function becomes one operation of the
// invocation's durableContext.
type restateJournal struct {
	dc durableContext
	// suspendAfter is used when the Server passes no budget.
	suspendAfter time.Duration
	// cancelled is set once a wait returned the invocation's cancellation
	// (the handler delivers CANCEL as a failure, restate.DeliverCancel).
	cancelled *atomic.Bool
	// replaying is restate.Replaying of the attempt's Context; nil: true.
	replaying func() bool
}

var _ stepctx.Journal = restateJournal{}

// journalErr maps a durableContext error onto what the Server expects:
// restate's suspension is stepctx.ErrSuspended; the cancellation fails the
// call alone with 409 (the function may compensate); a *TerminalError
// (a promise completed before) fails the call alone; anything else
// (attempt ended) ends the attempt as is.
func (j restateJournal) journalErr(err error) error {
	var te *restate.TerminalError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errRestateSuspended):
		return stepctx.ErrSuspended
	case errors.Is(err, errRestateCancelled):
		if j.cancelled != nil {
			j.cancelled.Store(true)
		}
		return stepctx.Cancelled()
	case errors.As(err, &te):
		return &stepctx.CallFailedError{Failure: stepctx.Failure{Code: uint16(te.Code), Message: te.Message}}
	}
	return err
}

func resultOf(o *rsOutcome) *stepctx.Result {
	if o.Failure != nil {
		return &stepctx.Result{Failure: &stepctx.Failure{Code: uint16(o.Failure.Code), Message: o.Failure.Message}}
	}
	return &stepctx.Result{Value: o.Value}
}

func futureOf(f stepctx.Future) (rsFuture, error) {
	rf, ok := f.(rsFuture)
	if !ok || f == nil {
		return nil, fmt.Errorf("bridge: a future of another journal (%T) was passed to the Restate journal", f)
	}
	return rf, nil
}

func (j restateJournal) RunStart(_ context.Context, name string) (*stepctx.Result, stepctx.Future, error) {
	return j.runStarted(j.dc.RunStart(name))
}

// RunStartDone implements stepctx.DoneRunStarter: the RunCommand goes out
// with the completion's proposal.
func (j restateJournal) RunStartDone(_ context.Context, name string) (*stepctx.Result, stepctx.Future, error) {
	return j.runStarted(j.dc.RunStartDone(name))
}

func (j restateJournal) runStarted(out *rsOutcome, run rsFuture, err error) (*stepctx.Result, stepctx.Future, error) {
	if err != nil {
		return nil, nil, j.journalErr(err)
	}
	if out != nil {
		return resultOf(out), nil, nil
	}
	return nil, run, nil
}

// RunComplete journals a value or terminal failure. A retryable failure
// journals nothing: it is recorded on the run (RunFail), the Server ends
// the attempt with a StepFailedError, and the handler's
// *restate.RetryableError then fails it with an ErrorMessage naming the
// step as its related command.
func (j restateJournal) RunComplete(ctx context.Context, run stepctx.Future, out stepctx.RunOutcome) error {
	f, err := futureOf(run)
	if err != nil {
		return err
	}
	if r := out.Retryable; r != nil {
		sf := &stepctx.StepFailedError{Name: r.Step, Message: r.Message}
		_ = j.dc.RunFail(f, &restate.RetryableError{Code: restate.CodeInternal, Message: sf.Error()})
		return nil
	}
	o := rsOutcome{Value: out.Result.Value}
	if fl := out.Result.Failure; fl != nil {
		o = rsOutcome{Failure: &restate.TerminalError{Code: restate.Code(fl.Code), Message: fl.Message}}
	}
	// ctx is the attempt's: once it ends (the function was stopped), the
	// wait for the run's acknowledgement must not hold the attempt's end.
	return j.journalErr(j.dc.RunCompleteContext(ctx, f, o))
}

func (j restateJournal) Sleep(_ context.Context, d time.Duration) (stepctx.Future, error) {
	f, err := j.dc.Sleep(d)
	return f, j.journalErr(err)
}

func callOf(req stepctx.CallRequest) rsCallRequest {
	return rsCallRequest{Service: req.Service, Handler: req.Handler, Key: req.Key,
		IdempotencyKey: req.IdempotencyKey, Headers: req.Headers, Input: req.Input}
}

func (j restateJournal) Call(_ context.Context, req stepctx.CallRequest) (stepctx.Future, error) {
	f, err := j.dc.Call(callOf(req))
	return f, j.journalErr(err)
}

func (j restateJournal) Send(_ context.Context, req stepctx.SendRequest) (string, error) {
	// Fields are set through promotion so this reads the same once
	// rsSendRequest is an alias of restate.SendRequest.
	var s rsSendRequest
	c := callOf(req.CallRequest)
	s.Service, s.Handler, s.Key, s.IdempotencyKey, s.Headers, s.Input = c.Service, c.Handler, c.Key, c.IdempotencyKey, c.Headers, c.Input
	s.Delay = req.Delay
	id, err := j.dc.Send(s)
	return id, j.journalErr(err)
}

func (j restateJournal) Await(ctx context.Context, futures []stepctx.Future, mode stepctx.AwaitMode, suspendAfter time.Duration) ([]*stepctx.Result, error) {
	fs := make([]rsFuture, len(futures))
	for i, f := range futures {
		rf, err := futureOf(f)
		if err != nil {
			return nil, err
		}
		fs[i] = rf
	}
	m := rsAwaitAll
	if mode == stepctx.AwaitAny {
		m = rsAwaitAny
	}
	if suspendAfter <= 0 {
		suspendAfter = j.suspendAfter
	}
	outs, err := j.dc.AwaitContext(ctx, fs, m, suspendAfter)
	if err != nil {
		return nil, j.journalErr(err)
	}
	res := make([]*stepctx.Result, len(outs))
	for i, o := range outs {
		if o != nil {
			res[i] = resultOf(o)
		}
	}
	return res, nil
}

func (j restateJournal) InvocationID() string { return j.dc.InvocationID() }

func (j restateJournal) RandomSeed() uint64 { return j.dc.RandomSeed() }

func (j restateJournal) Replaying() bool { return j.replaying == nil || j.replaying() }

func rsOutcomeOf(r stepctx.Result) rsOutcome {
	if r.Failure != nil {
		return rsOutcome{Failure: &restate.TerminalError{Code: restate.Code(r.Failure.Code), Message: r.Failure.Message}}
	}
	return rsOutcome{Value: r.Value}
}

func (j restateJournal) GetState(_ context.Context, name string) ([]byte, bool, error) {
	v, found, err := j.dc.GetState(name)
	return v, found, j.journalErr(err)
}

func (j restateJournal) StateKeys(context.Context) ([]string, error) {
	keys, err := j.dc.StateKeys()
	return keys, j.journalErr(err)
}

func (j restateJournal) SetState(_ context.Context, name string, value []byte) error {
	return j.journalErr(j.dc.SetState(name, value))
}

func (j restateJournal) ClearState(_ context.Context, name string) error {
	return j.journalErr(j.dc.ClearState(name))
}

func (j restateJournal) ClearAllState(context.Context) error {
	return j.journalErr(j.dc.ClearAllState())
}

func (j restateJournal) Awakeable(context.Context) (string, stepctx.Future, error) {
	id, f, err := j.dc.Awakeable()
	return id, f, j.journalErr(err)
}

func (j restateJournal) CompleteAwakeable(_ context.Context, id string, res stepctx.Result) error {
	return j.journalErr(j.dc.CompleteAwakeable(id, rsOutcomeOf(res)))
}

func (j restateJournal) Promise(_ context.Context, name string) (stepctx.Future, error) {
	f, err := j.dc.Promise(name)
	return f, j.journalErr(err)
}

func (j restateJournal) PeekPromise(_ context.Context, name string) (*stepctx.Result, error) {
	o, err := j.dc.PeekPromise(name)
	if err != nil || o == nil {
		return nil, j.journalErr(err)
	}
	return resultOf(o), nil
}

func (j restateJournal) CompletePromise(_ context.Context, name string, res stepctx.Result) error {
	raw := j.dc.CompletePromise(name, rsOutcomeOf(res))
	err := j.journalErr(raw)
	if cf := (*stepctx.CallFailedError)(nil); errors.As(err, &cf) && !errors.Is(raw, errRestateCancelled) {
		// restate-server's "promise was already completed" names none.
		return &stepctx.CallFailedError{Failure: stepctx.Failure{Code: cf.Failure.Code, Message: fmt.Sprintf("promise %q: %s", name, cf.Failure.Message)}}
	}
	return err
}

func (j restateJournal) CancelInvocation(_ context.Context, id string) error {
	return j.journalErr(j.dc.CancelInvocation(id))
}

var _ stepctx.DoneRunStarter = restateJournal{}
