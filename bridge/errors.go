package bridge

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fnbridge/fnbridge/restate"
)

// Class is what kind of failure an invocation met, which decides what
// Restate sees (docs/ARCHITECTURE.md, error classification).
type Class int

const (
	// ClassTerminal: the handler signalled a terminal failure. The run
	// completes with a failure; the invocation ends with it, no retry.
	ClassTerminal Class = iota + 1
	// ClassHandler: the handler failed otherwise (exception, non-zero
	// status). Retried by Restate (500). Outputs over their bounds are a
	// terminal failure of the handler instead (ClassTerminal): a retry
	// would break them again.
	ClassHandler
	// ClassCrashed: the worker died during the invocation. Retried (500).
	ClassCrashed
	// ClassTimeout: the invocation exceeded its timeout. Retried (504).
	ClassTimeout
	// ClassBusy: no registration was free in time. Retried (429).
	ClassBusy
	// ClassUnavailable: stale, draining or unready registration that
	// re-leasing did not cure, or the runtime is unreachable. Retried (503).
	ClassUnavailable
	// ClassPermanent: the runtime lacks FunctionRuntime, the registration
	// is invalid, or initialization failed permanently. The invocation
	// pauses (v7) or retries slowly (v5/v6) until an operator fixes it.
	ClassPermanent
	// ClassCancelled: Restate cancelled the invocation; the worker was
	// killed and the invocation ends with a terminal 409.
	ClassCancelled
	// ClassInvalidInput: the runtime rejected the invocation itself (input
	// over its bound). The same input can never succeed, so the run
	// completes with a terminal 400 instead of retrying forever.
	ClassInvalidInput
)

var classNames = map[Class]string{
	ClassTerminal: "terminal", ClassHandler: "handler_error", ClassCrashed: "crashed",
	ClassTimeout: "timeout", ClassBusy: "busy", ClassUnavailable: "unavailable",
	ClassPermanent: "permanent", ClassCancelled: "cancelled", ClassInvalidInput: "invalid_input",
}

func (c Class) String() string {
	if n, ok := classNames[c]; ok {
		return n
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Terminal reports whether Restate ends an invocation failing with the
// class (a terminal failure), rather than retrying or pausing it.
func (c Class) Terminal() bool {
	return c == ClassTerminal || c == ClassCancelled || c == ClassInvalidInput
}

// Code is the HTTP-style code Restate records for the class.
func (c Class) Code() restate.Code {
	switch c {
	case ClassTimeout:
		return restate.CodeGatewayTimeout
	case ClassBusy:
		return restate.CodeTooManyRequests
	case ClassUnavailable:
		return restate.CodeUnavailable
	case ClassCancelled:
		return restate.CodeCancelled
	case ClassInvalidInput:
		return restate.CodeBadRequest
	}
	return restate.CodeInternal
}

// Error is a classified invocation failure.
type Error struct {
	Class   Class
	Message string
	Cause   error
	// Code overrides Class.Code for a terminal failure whose handler gave
	// one (a Python TerminalError's code); 0: the class's code.
	Code restate.Code
}

func (e *Error) Error() string {
	what := e.Class.String()
	if code := e.Code; code != 0 || e.Class == ClassTerminal {
		// The code Restate records: the handler's own, or the class's
		// (500 for a terminal failure without one, as Bash's exit 100).
		if code == 0 {
			code = e.Class.Code()
		}
		what += " " + strconv.Itoa(int(code))
	}
	if e.Class == ClassTerminal && e.Message == "" {
		// The handler's own (empty) message is what Restate's caller
		// sees; the cause is the gRPC status around it.
		return what + ": (the handler gave no message)"
	}
	if e.Cause != nil && e.Message == "" {
		return what + ": " + e.Cause.Error()
	}
	return what + ": " + e.Message
}

// Unwrap exposes the underlying gRPC or context error.
func (e *Error) Unwrap() error { return e.Cause }

// PermanentRetryDelay is the delay asked of Restate for a permanent failure
// on protocol versions that cannot pause an invocation.
const PermanentRetryDelay = 5 * time.Minute
