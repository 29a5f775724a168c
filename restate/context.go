package restate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fnbridge/fnbridge/journal"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// invocationContext is the Context handed to a HandlerFunc.
type invocationContext struct{ inv *invocation }

var _ Context = invocationContext{}

func (c invocationContext) Deadline() (deadline time.Time, ok bool) { return c.inv.ctx.Deadline() }
func (c invocationContext) Done() <-chan struct{}                   { return c.inv.ctx.Done() }
func (c invocationContext) Err() error                              { return c.inv.ctx.Err() }
func (c invocationContext) Value(key any) any                       { return c.inv.ctx.Value(key) }

func (c invocationContext) InvocationID() string       { return c.inv.m.InvocationID() }
func (c invocationContext) Key() string                { return c.inv.m.Key() }
func (c invocationContext) Headers() map[string]string { return c.inv.headers }

func (c invocationContext) EndsCancelled(err error) bool {
	inv := c.inv
	var te *TerminalError
	if err == nil || !inv.h.deliverCancel || errors.Is(err, ErrCancelled) || errors.As(err, &te) {
		return false
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.cancelVerdict == 0 {
		inv.cancelVerdict = -1
		if !inv.m.Done() && inv.m.Cancelled() && !inv.m.CancelTaken() {
			inv.cancelVerdict = 1
		}
	}
	return inv.cancelVerdict > 0
}

func (c invocationContext) Run(name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	return c.RunReady(name, nil, fn)
}

func (c invocationContext) RunReady(name string, ready func(ctx context.Context) error, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	return c.runReady(name, ready, fn, false)
}

func (c invocationContext) RunLast(name string, ready func(ctx context.Context) error, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	// The hook's moment, between a durable run and the output, exists
	// only when the run is awaited.
	return c.runReady(name, ready, fn, c.inv.ep.cfg.AfterRunJournaled == nil)
}

// runReady is RunReady, and with last set RunLast: an executed run's
// result is returned as proposed, without waiting until it is durable.
func (c invocationContext) runReady(name string, ready func(ctx context.Context) error, fn func(ctx context.Context) ([]byte, error), last bool) ([]byte, error) {
	inv := c.inv
	inv.mu.Lock()
	id, execute, err := inv.m.RunStart(name)
	index := inv.m.CommandIndex() - 1
	cancelled := inv.m.Cancelled()
	inv.mu.Unlock()
	if err != nil {
		return nil, ErrAttemptEnded
	}
	if execute {
		if cancelled && !inv.h.deliverCancel {
			return nil, ErrCancelled
		}
		var out []byte
		ferr := runReady(inv.ctx, ready)
		if ferr == nil {
			inv.flush() // the RunCommand reaches Restate before fn runs
			out, ferr = runClosure(inv.ctx, fn)
		}
		inv.mu.Lock()
		err = inv.settleRun(id, index, name, out, ferr, last)
		inv.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if last {
			// settleRun proposed a value or a *TerminalError.
			if ferr != nil {
				var te *TerminalError
				errors.As(ferr, &te)
				return nil, &TerminalError{Code: orInternal(te.Code), Message: te.Message}
			}
			return out, nil
		}
	}
	res, st := inv.await(id)
	switch st {
	case journal.Ready:
		if execute && inv.ep.cfg.AfterRunJournaled != nil {
			inv.ep.cfg.AfterRunJournaled(inv.m.InvocationID(), name)
		}
		if res.Failure != nil {
			return nil, &TerminalError{Code: res.Failure.Code, Message: res.Failure.Message}
		}
		return res.Value, nil
	case journal.Cancelled:
		return nil, inv.statusErr(st)
	case journal.Suspended:
		// As the Context promises: its cause says the attempt suspended.
		_ = inv.statusErr(st)
		return nil, ErrAttemptEnded
	default:
		return nil, ErrAttemptEnded
	}
}

// settleRun proposes the result of an executed run, unless the attempt
// must not record it: after a CANCEL signal the invocation ends with 409
// instead; after the handler's context ended for any other reason (the
// stream closed, the server shutting down) nothing is proposed, since a
// result produced under a cancelled context, ErrCancelled above all, is
// not the run's; and a closure reporting ErrCancelled on its own is
// retried, because only Restate's CANCEL may journal the terminal 409.
// Callers hold inv.mu.
func (inv *invocation) settleRun(id uint32, index int, name string, out []byte, ferr error, last bool) error {
	if inv.m.Cancelled() && !inv.h.deliverCancel {
		return ErrCancelled
	}
	if inv.interruptedLocked(index, name) {
		return ErrAttemptEnded
	}
	res := journal.Result{Value: out}
	if ferr != nil {
		// Declared here: errors.As moves them to the heap, which a
		// successful run need not pay for.
		var te *TerminalError
		if errors.Is(ferr, ErrCancelled) || !errors.As(ferr, &te) {
			inv.m.Fail(retryableToJournal(runRetryable(name, ferr), index, wire.RunCommandType, name))
			return ErrAttemptEnded
		}
		res = journal.Result{Failure: &journal.Failure{Code: orInternal(te.Code), Message: te.Message}}
	}
	propose := inv.m.ProposeRunOf
	if last {
		propose = inv.m.ProposeLastRunOf
	}
	if err := propose(id, res, index, name); err != nil {
		return inv.endedLocked()
	}
	return nil
}

// runRetryable is the attempt failure for a run closure's non-terminal
// error; an ErrCancelled without a CANCEL signal is one too.
func runRetryable(name string, err error) *RetryableError {
	if errors.Is(err, ErrCancelled) {
		return &RetryableError{Code: CodeUnavailable, Message: fmt.Sprintf("run %q reported cancellation, but Restate did not cancel the invocation: %v", name, err)}
	}
	var re *RetryableError
	if errors.As(err, &re) {
		return re
	}
	return &RetryableError{Code: CodeInternal, Message: err.Error()}
}

// runClosure calls fn, turning a panic into a retryable failure.
// runReady runs a RunReady readiness step (nil: none) as runClosure runs
// the closure: a panic is a retryable failure of the attempt.
func runReady(ctx context.Context, ready func(context.Context) error) (err error) {
	if ready == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = &RetryableError{Code: CodeInternal, Message: fmt.Sprintf("run readiness step panicked: %v", p)}
		}
	}()
	return ready(ctx)
}

func runClosure(ctx context.Context, fn func(context.Context) ([]byte, error)) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &RetryableError{Code: CodeInternal, Message: fmt.Sprintf("run closure panicked: %v", p)}
		}
	}()
	return fn(ctx)
}
