package functionruntime

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every error detail this
// server attaches to a gRPC status.
const ErrorDomain = "fnbridge.dev/functionruntime"

// Reasons carried in google.rpc.ErrorInfo.reason. Together with the status
// code they tell a caller what happened without parsing messages; Classify
// turns them into an ErrorClass.
const (
	// ReasonHandlerError: the handler failed and did not ask to stop
	// retries (codes.Unknown).
	ReasonHandlerError = "HANDLER_ERROR"
	// ReasonHandlerTerminalError: the handler failed and asked not to be
	// retried (codes.Unknown).
	ReasonHandlerTerminalError = "HANDLER_TERMINAL_ERROR"
	// ReasonOutputsInvalid: the handler returned, but its output or outputs
	// break the bounds (codes.Unknown). Treated as terminal: the handler
	// already ran to completion, and running it again would most likely
	// return the same result after repeating its side effects.
	ReasonOutputsInvalid = "OUTPUTS_INVALID"
	// ReasonWorkerCrashed: the worker process died during the invocation
	// (codes.Internal); the next invocation gets a fresh worker.
	ReasonWorkerCrashed = "WORKER_CRASHED"
	// ReasonAdapterError: the adapter failed in a way it did not classify
	// (codes.Internal); treated like a crash.
	ReasonAdapterError = "ADAPTER_ERROR"
	// ReasonInvocationTimeout: the invocation exceeded its timeout
	// (codes.DeadlineExceeded); the registration stays READY.
	ReasonInvocationTimeout = "INVOCATION_TIMEOUT"
	// ReasonInvocationAborted: the registration was unregistered, superseded
	// or shut down while the invocation ran, and it was cancelled
	// (codes.Aborted). The handler may have run partially.
	ReasonInvocationAborted = "INVOCATION_ABORTED"
	// ReasonRegistrationBusy: the registration already has its one
	// in-flight invocation; v0.x does not queue (codes.ResourceExhausted).
	ReasonRegistrationBusy = "REGISTRATION_BUSY"
	// ReasonRegistrationStale: the registration ID names an older
	// generation than the current one for the Run UID
	// (codes.FailedPrecondition).
	ReasonRegistrationStale = "REGISTRATION_STALE"
	// ReasonRegistrationDraining: the registration is being unregistered
	// or superseded (codes.FailedPrecondition).
	ReasonRegistrationDraining = "REGISTRATION_DRAINING"
	// ReasonRegistrationNotReady: the registration is still initializing
	// (codes.FailedPrecondition).
	ReasonRegistrationNotReady = "REGISTRATION_NOT_READY"
	// ReasonRegistrationFailed: the registration is FAILED (initialization
	// or worker restart failed) (codes.FailedPrecondition). Metadata
	// fatal_error holds the bounded diagnostic.
	ReasonRegistrationFailed = "REGISTRATION_FAILED"
	// ReasonRegistrationNotFound: no registration has this Run UID
	// (codes.NotFound).
	ReasonRegistrationNotFound = "REGISTRATION_NOT_FOUND"
	// ReasonAttemptSuperseded: RegisterFunction named a lower attempt than
	// the current registration's (codes.FailedPrecondition).
	ReasonAttemptSuperseded = "ATTEMPT_SUPERSEDED"
	// ReasonDigestMismatch: RegisterFunction repeated a Run UID and attempt
	// with a different digest (codes.AlreadyExists).
	ReasonDigestMismatch = "DIGEST_MISMATCH"
	// ReasonRegistrationMismatch: RegisterFunction repeated a Run UID,
	// attempt and digest with other settings (working_dir, handler, env,
	// idle timeout, worker limits or interpreter) (codes.AlreadyExists).
	// Metadata field names them, comma-separated.
	ReasonRegistrationMismatch = "REGISTRATION_MISMATCH"
	// ReasonInvalidArgument: a request field is malformed or out of bounds
	// (codes.InvalidArgument). Metadata field names it.
	ReasonInvalidArgument = "INVALID_ARGUMENT"
	// ReasonInputTooLarge: the invocation input exceeds MaxInputBytes
	// (codes.InvalidArgument).
	ReasonInputTooLarge = "INPUT_TOO_LARGE"
	// ReasonShuttingDown: the server is shutting down (codes.Unavailable).
	ReasonShuttingDown = "SHUTTING_DOWN"
)

// maxStatusMessageBytes bounds the message of a status this server returns:
// it travels in an HTTP/2 trailer, and handler messages (tracebacks) can be
// long.
const maxStatusMessageBytes = 4 << 10

// maxMetadataValueBytes bounds one ErrorInfo metadata value.
const maxMetadataValueBytes = 1 << 10

// statusError builds a gRPC status error with an ErrorInfo detail.
func statusError(code codes.Code, reason string, md map[string]string, format string, args ...any) error {
	msg := truncateUTF8(fmt.Sprintf(format, args...), maxStatusMessageBytes)
	st := status.New(code, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
	if len(md) > 0 {
		info.Metadata = make(map[string]string, len(md))
		for k, v := range md {
			info.Metadata[k] = truncateUTF8(v, maxMetadataValueBytes)
		}
	}
	if withInfo, err := st.WithDetails(info); err == nil {
		st = withInfo
	}
	return st.Err()
}

// invalidArgument names the offending field both in the message and in the
// ErrorInfo metadata.
func invalidArgument(field, format string, args ...any) error {
	return statusError(codes.InvalidArgument, ReasonInvalidArgument, map[string]string{"field": field},
		"%s: %s", field, fmt.Sprintf(format, args...))
}

// truncateUTF8 returns s as valid UTF-8 of at most max bytes. Invalid bytes
// become U+FFFD; a cut keeps whole runes and ends with "…" so a reader can
// tell the text was shortened.
func truncateUTF8(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	out := s[:cut] + ellipsis
	if len(out) > max { // max smaller than the ellipsis itself
		return s[:0]
	}
	return out
}

// fatalText turns an initialization or restart failure into fatal_error.
func fatalText(err error) string {
	return truncateUTF8(err.Error(), MaxFatalErrorBytes)
}

// MetadataTerminalCode is the ErrorInfo metadata key of a terminal
// handler failure's code (HANDLER_TERMINAL_ERROR), in decimal, present
// only when the handler gave one: out of band, so the executor.v1
// messages stay as the contract defines them.
const MetadataTerminalCode = "terminal_code"

// TerminalCode is the code a HANDLER_TERMINAL_ERROR carries in its
// ErrorInfo (MetadataTerminalCode), or 0 when it carries none or one out
// of 1..65535.
func TerminalCode(err error) uint16 {
	info := ErrorInfo(err)
	if info == nil || info.GetReason() != ReasonHandlerTerminalError {
		return 0
	}
	c, perr := strconv.Atoi(info.GetMetadata()[MetadataTerminalCode])
	if perr != nil || c < 1 || c > 65535 {
		return 0
	}
	return uint16(c)
}

// TerminalMessage is the message a handler's terminal failure gave (a
// Python TerminalError's message, the MESSAGE of Bash `fnbridge fail`),
// without the words this package's server puts around it in the status
// ("invocation ID: handler failed terminally: TYPE: "), which a caller
// should not see in the invocation's failure; for an invalid result
// (OUTPUTS_INVALID), the status message less its "invocation ID: ". For
// any other error, or a server that words its status otherwise, it is the
// status message.
func TerminalMessage(err error) string {
	st := status.Convert(err)
	msg := st.Message()
	info := errorInfoOf(st)
	if info == nil || (info.GetReason() != ReasonHandlerTerminalError && info.GetReason() != ReasonOutputsInvalid) {
		return msg
	}
	md := info.GetMetadata()
	if info.GetReason() == ReasonOutputsInvalid {
		// invalidResultStatus's words, less the invocation id, which the
		// invocation's own failure need not repeat.
		rest, _ := strings.CutPrefix(msg, "invocation "+md["invocation_id"]+": ")
		return rest
	}
	prefix := "invocation " + md["invocation_id"] + ": handler failed terminally: " // see HandlerError.Error
	if t := md["error_type"]; t != "" {
		prefix += t + ": "
	}
	if rest, ok := strings.CutPrefix(msg, prefix); ok {
		return rest
	}
	return msg
}

// handlerStatus maps a *HandlerError to codes.Unknown with its reason.
func handlerStatus(he *HandlerError, runUID, invocationID string) error {
	if he.Terminal && (he.Type == InvalidOutputsType || he.Type == OutputTooLargeType || he.Type == UnserializableOutputType) {
		return invalidResultStatus(runUID, invocationID, he.Message)
	}
	reason := ReasonHandlerError
	if he.Terminal {
		reason = ReasonHandlerTerminalError
	}
	md := map[string]string{
		"run_uid":       runUID,
		"invocation_id": invocationID,
		"error_type":    he.Type,
		"exit_code":     strconv.Itoa(he.ExitCode),
		"terminal":      strconv.FormatBool(he.Terminal),
	}
	if he.Terminal && he.Code > 0 && he.Code <= 65535 {
		md[MetadataTerminalCode] = strconv.Itoa(he.Code)
	}
	return statusError(codes.Unknown, reason, md, "invocation %s: %s", invocationID, he.Error())
}

// invalidResultStatus is OUTPUTS_INVALID: the handler returned, but its
// result breaks a bound (terminal: a retry would return it again).
func invalidResultStatus(runUID, invocationID, why string) error {
	return statusError(codes.Unknown, ReasonOutputsInvalid,
		map[string]string{"run_uid": runUID, "invocation_id": invocationID, "terminal": "true"},
		"invocation %s: the handler returned, but its result is invalid: %s", invocationID, why)
}

// Errors used as context causes so the server can tell why an invocation's
// context ended.
var (
	errInvocationTimeout = errors.New("invocation timeout")
	// errRegistrationGone is wrapped by every teardown cause.
	errRegistrationGone = errors.New("registration removed")
)

// goneCause explains why a registration is being torn down; it wraps
// errRegistrationGone.
func goneCause(why string) error {
	return fmt.Errorf("%w: %s", errRegistrationGone, why)
}
