package bridge

import (
	"context"
	"fmt"
	"testing"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/restate"
)

// The outcome definitions of the README, one row per way an attempt ends:
// what the handler returns, whether the function ran, the run closure's
// or steps attempt's own error, and why the handler's context ended.
func TestAttemptOutcome(t *testing.T) {
	retryable := &restate.RetryableError{Code: 500, Message: "ValueError"}
	pause := &restate.RetryableError{Code: 500, Message: "no FunctionRuntime", Pause: true}
	terminal := &restate.TerminalError{Code: 500, Message: "order not found"}
	cases := []struct {
		name     string
		executed bool
		err      error
		causes   []error
		ctxCause error
		want     telemetry.Outcome
	}{
		{"the function ran and returned", true, nil, nil, nil, telemetry.OutcomeOK},
		{"the journal held the run's value", false, nil, nil, nil, telemetry.OutcomeReplayed},
		{"the journal held the run's terminal failure", false, terminal, nil, nil, telemetry.OutcomeReplayed},
		{"the function failed terminally", true, terminal, []error{terminal}, nil, telemetry.OutcomeTerminalFailure},
		{"the run failed retryably (Run hides it as ErrAttemptEnded)", true, restate.ErrAttemptEnded, []error{retryable}, nil, telemetry.OutcomeRetryableFailure},
		{"a permanent failure asked for a pause", true, restate.ErrAttemptEnded, []error{pause}, nil, telemetry.OutcomePaused},
		{"the steps handler returned a pause itself", true, pause, nil, nil, telemetry.OutcomePaused},
		{"Restate cancelled", true, restate.ErrCancelled, nil, restate.ErrCancelled, telemetry.OutcomeCancelled},
		{"cancelled while the run's result was awaited", true, restate.ErrAttemptEnded, nil, restate.ErrCancelled, telemetry.OutcomeCancelled},
		{"request/response: the run's completion comes in a later attempt", true, restate.ErrAttemptEnded, nil, restate.ErrSuspended, telemetry.OutcomeSuspended},
		{"a steps wait suspended", true, restate.ErrAttemptEnded, []error{stepctx.ErrSuspended}, nil, telemetry.OutcomeSuspended},
		{"the stream ended without CANCEL (shutdown)", true, restate.ErrAttemptEnded, nil, context.Canceled, telemetry.OutcomeRetryableFailure},
		{"a journal mismatch", true, restate.ErrAttemptEnded, []error{restate.ErrAttemptEnded}, restate.ErrAttemptEnded, telemetry.OutcomeRetryableFailure},
		{"the run closure failed with a wrapped pause", true, restate.ErrAttemptEnded, []error{fmt.Errorf("step: %w", pause)}, nil, telemetry.OutcomePaused},
		// A step's value over the message size: the endpoint paused it.
		{"the endpoint failed the attempt asking for a pause", true, restate.ErrAttemptEnded, []error{&restate.AttemptFailedError{Code: 500, Message: "too big", Pause: true}}, nil, telemetry.OutcomePaused},
		{"the endpoint failed the attempt", true, restate.ErrAttemptEnded, []error{&restate.AttemptFailedError{Code: 571, Message: "bad frame"}}, nil, telemetry.OutcomeRetryableFailure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			if c.ctxCause != nil {
				cancel(c.ctxCause)
			}
			if got := attemptOutcome(ctx, c.executed, c.err, c.causes...); got != c.want {
				t.Errorf("outcome %s, want %s", got, c.want)
			}
		})
	}
}
