package journal

import (
	"errors"
	"fmt"
	"time"

	"github.com/fnbridge/fnbridge/restate/wire"
)

// Code is the HTTP-like status code of a failure: of a Failure (the
// invocation's or a run's terminal result) and of an Error (a failed
// attempt). The wire carries it as a uint32; Restate uses 16 bits.
type Code uint16

// The codes fnbridge sends. Package restate re-exports those a handler
// returns, so each is defined here only.
const (
	// CodeBadRequest: the input can never succeed (a terminal failure).
	CodeBadRequest Code = 400
	// CodeCancelled is the code of the terminal failure an invocation ends
	// with after a CANCEL signal.
	CodeCancelled Code = 409
	// CodeTooManyRequests: no capacity now; retried later.
	CodeTooManyRequests Code = 429
	// CodeInternal is the code of an unclassified handler failure, and
	// what a zero code means.
	CodeInternal Code = 500
	// CodeUnavailable: what the handler needs is unavailable for now.
	CodeUnavailable Code = 503
	// CodeGatewayTimeout: the handler's work exceeded its timeout.
	CodeGatewayTimeout Code = 504
	// CodeJournalMismatch: the replayed journal differs from what the
	// handler does (reserved for SDKs by the protocol).
	CodeJournalMismatch Code = 570
	// CodeProtocolViolation: the runtime sent a message unexpected in the
	// current state (reserved for SDKs by the protocol).
	CodeProtocolViolation Code = 571
)

// ErrClosed is returned by handler operations once the machine has sent
// its terminal message: the handler should return; its result is ignored.
var ErrClosed = errors.New("journal: invocation stream already ended")

// Error is an attempt failure, sent as ErrorMessage. The runtime retries
// the attempt according to its policy unless Pause is set.
type Error struct {
	Code       Code
	Message    string
	Stacktrace string
	// Related locates the failure in the journal; RelatedIndex < 0 means
	// no related command.
	RelatedIndex int
	RelatedName  string
	RelatedType  wire.MessageType
	// RetryAfter overrides the delay before the next attempt (0: policy).
	RetryAfter time.Duration
	// Pause asks the runtime to pause the invocation instead of retrying.
	Pause bool
}

func (e *Error) Error() string {
	if e.RelatedIndex >= 0 {
		return fmt.Sprintf("[%d] %s (command %d %s %q)", e.Code, e.Message, e.RelatedIndex, e.RelatedType, e.RelatedName)
	}
	return fmt.Sprintf("[%d] %s", e.Code, e.Message)
}

func newError(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), RelatedIndex: -1}
}

func (e *Error) related(index int, t wire.MessageType, name string) *Error {
	e.RelatedIndex, e.RelatedType, e.RelatedName = index, t, name
	return e
}
