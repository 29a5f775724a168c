package journal

import (
	"errors"
	"fmt"
	"time"

	"github.com/fnbridge/fnbridge/restate/wire"
)

// Protocol-level error codes reserved for SDKs.
const (
	// CodeJournalMismatch: the replayed journal differs from what the
	// handler does.
	CodeJournalMismatch uint16 = 570
	// CodeProtocolViolation: the runtime sent a message unexpected in the
	// current state.
	CodeProtocolViolation uint16 = 571
	// CodeInternal is the code of an unclassified handler failure.
	CodeInternal uint16 = 500
	// CodeCancelled is the code of the terminal failure an invocation ends
	// with after a CANCEL signal.
	CodeCancelled uint16 = 409
)

// ErrClosed is returned by handler operations once the machine has sent
// its terminal message: the handler should return; its result is ignored.
var ErrClosed = errors.New("journal: invocation stream already ended")

// Error is an attempt failure, sent as ErrorMessage. The runtime retries
// the attempt according to its policy unless Pause is set.
type Error struct {
	Code       uint16
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

func newError(code uint16, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), RelatedIndex: -1}
}

func (e *Error) related(index int, t wire.MessageType, name string) *Error {
	e.RelatedIndex, e.RelatedType, e.RelatedName = index, t, name
	return e
}
