package functionruntime

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorClass is what a FunctionRuntime client needs to know about a failed
// call to decide what to do next. It is derived from the gRPC code and the
// ErrorInfo reason, so it works the same for the in-process client and a
// remote server.
type ErrorClass int

// The error classes. The comment of each says what a caller should do.
const (
	// ClassNone: no error.
	ClassNone ErrorClass = iota
	// ClassHandlerTerminal: the handler failed and asked not to be
	// retried, or returned a result that breaks the bounds. Record the
	// failure; do not retry.
	ClassHandlerTerminal
	// ClassHandlerRetryable: the handler failed (exception, non-zero
	// status). Retry with the caller's policy.
	ClassHandlerRetryable
	// ClassCrash: the worker died or the adapter failed mid-invocation.
	// Retryable; the next invocation gets a fresh worker.
	ClassCrash
	// ClassTimeout: the invocation exceeded its timeout (or the caller's
	// deadline). Retryable; the registration stays READY.
	ClassTimeout
	// ClassBusy: the registration already runs an invocation. Retry later
	// or use another registration (HTTP 429).
	ClassBusy
	// ClassStale: the registration reference is stale, draining, not yet
	// ready, or gone. Nothing was dispatched: re-lease or re-register
	// (HTTP 503).
	ClassStale
	// ClassRegistrationFailed: the registration is FAILED (initialization
	// or worker restart failed). Register a higher attempt, or treat as
	// permanent if initialization itself fails.
	ClassRegistrationFailed
	// ClassAborted: the invocation was cancelled because its registration
	// was unregistered, superseded or shut down, or because the caller
	// cancelled. The handler may have run partially.
	ClassAborted
	// ClassUnimplemented: the server does not implement FunctionRuntime, a
	// permanent configuration failure.
	ClassUnimplemented
	// ClassInvalid: the request was rejected as malformed, out of bounds or
	// conflicting (InvalidArgument, AlreadyExists, attempt superseded).
	// Retrying the same request cannot succeed.
	ClassInvalid
	// ClassUnavailable: the server could not be reached or is shutting
	// down. Retryable.
	ClassUnavailable
	// ClassInternal: anything else. Retryable.
	ClassInternal
)

var classNames = [...]string{
	ClassNone:               "none",
	ClassHandlerTerminal:    "handler_terminal",
	ClassHandlerRetryable:   "handler_retryable",
	ClassCrash:              "crash",
	ClassTimeout:            "timeout",
	ClassBusy:               "busy",
	ClassStale:              "stale",
	ClassRegistrationFailed: "registration_failed",
	ClassAborted:            "aborted",
	ClassUnimplemented:      "unimplemented",
	ClassInvalid:            "invalid",
	ClassUnavailable:        "unavailable",
	ClassInternal:           "internal",
}

// String names the class for logs and metrics.
func (c ErrorClass) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// Retryable reports whether running the same call again may succeed
// without changing configuration. ClassStale is retryable only after
// re-leasing or re-registering.
func (c ErrorClass) Retryable() bool {
	switch c {
	case ClassHandlerRetryable, ClassCrash, ClassTimeout, ClassBusy, ClassStale,
		ClassAborted, ClassUnavailable, ClassInternal:
		return true
	}
	return false
}

// Classify tells apart the failures of a FunctionRuntime call. It accepts
// any error: gRPC status errors from this package's server (with or without
// ErrorInfo), bare context errors, and nil (ClassNone).
func Classify(err error) ErrorClass {
	if err == nil {
		return ClassNone
	}
	st, ok := status.FromError(err)
	if !ok {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return ClassTimeout
		case errors.Is(err, context.Canceled):
			return ClassAborted
		}
		return ClassInternal
	}
	reason := reasonOf(st)
	switch st.Code() {
	case codes.OK:
		return ClassNone
	case codes.Unknown:
		switch reason {
		case ReasonHandlerTerminalError, ReasonOutputsInvalid:
			return ClassHandlerTerminal
		case ReasonHandlerError:
			return ClassHandlerRetryable
		}
		return ClassInternal
	case codes.Internal, codes.DataLoss:
		return ClassCrash
	case codes.DeadlineExceeded:
		return ClassTimeout
	case codes.ResourceExhausted:
		// gRPC's own refusal of a message over a size limit, on either
		// end, carries no ErrorInfo: the same request can never pass, so
		// it is not the busy registration the contract's ResourceExhausted
		// means. grpc-go words it "received message larger than max" and
		// "trying to send message larger than max".
		if reason == "" && strings.Contains(st.Message(), "message larger than max") {
			return ClassInvalid
		}
		return ClassBusy
	case codes.FailedPrecondition:
		switch reason {
		case ReasonRegistrationFailed:
			return ClassRegistrationFailed
		case ReasonAttemptSuperseded:
			return ClassInvalid
		}
		return ClassStale
	case codes.NotFound:
		return ClassStale
	case codes.Aborted, codes.Canceled:
		return ClassAborted
	case codes.Unimplemented:
		return ClassUnimplemented
	case codes.InvalidArgument, codes.AlreadyExists, codes.OutOfRange:
		return ClassInvalid
	case codes.Unavailable:
		return ClassUnavailable
	}
	return ClassInternal
}

// ErrorInfo returns the google.rpc.ErrorInfo this package's server attached
// to err, or nil. Its Metadata carries details such as error_type,
// exit_code, fatal_error and field.
func ErrorInfo(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	return errorInfoOf(st)
}

func errorInfoOf(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info
		}
	}
	return nil
}

func reasonOf(st *status.Status) string {
	return errorInfoOf(st).GetReason()
}
