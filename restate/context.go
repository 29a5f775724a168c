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

func (c invocationContext) Run(name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
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
		if cancelled {
			return nil, ErrCancelled
		}
		out, ferr := runClosure(inv.ctx, fn)
		var te *TerminalError
		if ferr != nil && !errors.As(ferr, &te) {
			if errors.Is(context.Cause(inv.ctx), ErrCancelled) {
				return nil, ErrCancelled
			}
			var re *RetryableError
			if !errors.As(ferr, &re) {
				re = &RetryableError{Code: CodeInternal, Message: ferr.Error()}
			}
			inv.mu.Lock()
			inv.m.Fail(retryableToJournal(re, index, wire.RunCommandType, name))
			inv.mu.Unlock()
			return nil, ErrAttemptEnded
		}
		res := journal.Result{Value: out}
		if te != nil {
			res = journal.Result{Failure: &journal.Failure{Code: orInternal(te.Code), Message: te.Message}}
		}
		inv.mu.Lock()
		if inv.m.Cancelled() {
			inv.mu.Unlock()
			return nil, ErrCancelled
		}
		err = inv.m.ProposeRun(id, res)
		inv.mu.Unlock()
		if err != nil {
			return nil, ErrAttemptEnded
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
		inv.cancel(ErrCancelled)
		return nil, ErrCancelled
	default:
		return nil, ErrAttemptEnded
	}
}

// runClosure calls fn, turning a panic into a retryable failure.
func runClosure(ctx context.Context, fn func(context.Context) ([]byte, error)) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &RetryableError{Code: CodeInternal, Message: fmt.Sprintf("run closure panicked: %v", p)}
		}
	}()
	return fn(ctx)
}
