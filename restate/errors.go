package restate

import (
	"errors"
	"fmt"
	"time"

	"github.com/fnbridge/fnbridge/journal"
)

// Code is the HTTP-like status code of a TerminalError or RetryableError;
// it is journal.Code, so the endpoint passes it on unchanged.
type Code = journal.Code

// Codes a handler commonly returns (each defined once, in package journal).
const (
	CodeBadRequest      = journal.CodeBadRequest
	CodeCancelled       = journal.CodeCancelled
	CodeTooManyRequests = journal.CodeTooManyRequests
	CodeInternal        = journal.CodeInternal
	CodeUnavailable     = journal.CodeUnavailable
	CodeGatewayTimeout  = journal.CodeGatewayTimeout
	// CodeJournalMismatch: the replayed journal is not what the handler
	// can replay; retried, so a deployment that can is given the chance.
	CodeJournalMismatch = journal.CodeJournalMismatch
)

// orInternal is code, or 500 when code is zero: a zero Code means 500.
func orInternal(code Code) Code {
	if code == 0 {
		return CodeInternal
	}
	return code
}

// TerminalError is a failure that must not be retried. Returned by a
// HandlerFunc it becomes the invocation's output (OutputCommand with a
// failure, then End). Returned by a Run closure it is journaled as the
// run's result, and Run returns it, on this attempt and on every replay.
type TerminalError struct {
	// Code is an HTTP-like status code; 0 means 500.
	Code Code
	// Message is shown to the caller of the invocation.
	Message string
}

func (e *TerminalError) Error() string {
	return fmt.Sprintf("terminal error %d: %s", orInternal(e.Code), e.Message)
}

// RetryableError fails the current attempt with an ErrorMessage the runtime
// retries per its policy. Returned by a Run closure it fails the attempt
// without recording a result, so the run executes again on the next
// attempt. Any other non-terminal error behaves like a RetryableError with
// code 500.
type RetryableError struct {
	// Code is an HTTP-like status code; 0 means 500.
	Code Code
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
	return fmt.Sprintf("retryable error %d: %s", orInternal(e.Code), e.Message)
}

// ErrCancelled is the terminal failure an invocation ends with after the
// runtime's CANCEL signal: code 409. Run returns it once the invocation is
// cancelled, and context.Cause of the handler's Context reports it. Test
// for it with errors.Is; errors.As to a *TerminalError yields a fresh copy
// (code 409, message "cancelled"), so no caller can alter the sentinel.
// Returned by a handler or run closure without a CANCEL signal it fails
// the attempt retryably: only Restate's CANCEL journals the 409.
var ErrCancelled error = cancelled{}

// cancelledMessage is the failure message of ErrCancelled.
const cancelledMessage = "cancelled"

// cancelled is ErrCancelled's type: comparable and without fields, so the
// sentinel has nothing to mutate.
type cancelled struct{}

func (cancelled) Error() string { return cancelled{}.terminal().Error() }

// As lets errors.As treat ErrCancelled as the *TerminalError it stands for,
// as it was when ErrCancelled was one.
func (cancelled) As(target any) bool {
	te, ok := target.(**TerminalError)
	if ok {
		*te = cancelled{}.terminal()
	}
	return ok
}

func (cancelled) terminal() *TerminalError {
	return &TerminalError{Code: CodeCancelled, Message: cancelledMessage}
}

// ErrAttemptEnded is returned by Run when this attempt cannot continue: the
// invocation suspended (its next result can only arrive on a later
// attempt), the runtime broke the protocol, or a run failed retryably. The
// handler should return; what it returns is then ignored.
var ErrAttemptEnded = errors.New("restate: this invocation attempt has ended")

// AttemptFailedError is ErrAttemptEnded (errors.Is holds) when the
// endpoint failed the attempt itself with an ErrorMessage, as for a run's
// value over the message size: what it sent, so the handler can log why
// and tell a pause from a retry.
type AttemptFailedError struct {
	Code    Code
	Message string // with the code and the related command, as logged
	Pause   bool
}

func (e *AttemptFailedError) Error() string { return e.Message }

// Is makes an AttemptFailedError an ErrAttemptEnded.
func (e *AttemptFailedError) Is(target error) bool { return target == ErrAttemptEnded }

// endedLocked is ErrAttemptEnded, as an AttemptFailedError when the
// machine failed the attempt. Callers hold inv.mu.
func (inv *invocation) endedLocked() error {
	if f := inv.m.Failure(); f != nil {
		return &AttemptFailedError{Code: f.Code, Message: f.Error(), Pause: f.Pause}
	}
	return ErrAttemptEnded
}
