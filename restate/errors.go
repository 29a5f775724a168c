package restate

import (
	"errors"
	"fmt"
	"time"
)

// TerminalError is a failure that must not be retried. Returned by a
// HandlerFunc it becomes the invocation's output (OutputCommand with a
// failure, then End). Returned by a Run closure it is journaled as the
// run's result, and Run returns it, on this attempt and on every replay.
type TerminalError struct {
	// Code is an HTTP-like status code; 0 means 500.
	Code uint16
	// Message is shown to the caller of the invocation.
	Message string
}

func (e *TerminalError) Error() string {
	return fmt.Sprintf("terminal error %d: %s", e.code(), e.Message)
}

func (e *TerminalError) code() uint16 {
	if e.Code == 0 {
		return 500
	}
	return e.Code
}

// RetryableError fails the current attempt with an ErrorMessage the runtime
// retries per its policy. Returned by a Run closure it fails the attempt
// without recording a result, so the run executes again on the next
// attempt. Any other non-terminal error behaves like a RetryableError with
// code 500.
type RetryableError struct {
	// Code is an HTTP-like status code; 0 means 500.
	Code uint16
	// Message describes the failure for operators.
	Message string
	// RetryAfter, when positive, overrides the delay before the next
	// attempt (next_retry_delay).
	RetryAfter time.Duration
	// Pause asks the runtime to pause the invocation until an operator
	// resumes it. Protocol v7 says so in the ErrorMessage; v5 and v6 cannot,
	// so the endpoint asks for a retry after RetryAfter instead, or after
	// journal.PauseFallbackDelay when RetryAfter is not set.
	Pause bool
}

func (e *RetryableError) Error() string {
	code := e.Code
	if code == 0 {
		code = 500
	}
	return fmt.Sprintf("retryable error %d: %s", code, e.Message)
}

// ErrCancelled is the TerminalError an invocation ends with after the
// runtime's CANCEL signal: code 409. Run returns it once the invocation is
// cancelled, and context.Cause of the handler's Context reports it.
var ErrCancelled = &TerminalError{Code: 409, Message: "cancelled"}

// ErrAttemptEnded is returned by Run when this attempt cannot continue: the
// invocation suspended (its next result can only arrive on a later
// attempt), the runtime broke the protocol, or a run failed retryably. The
// handler should return; what it returns is then ignored.
var ErrAttemptEnded = errors.New("restate: this invocation attempt has ended")
