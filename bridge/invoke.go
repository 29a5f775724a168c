package bridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate"
)

// runName is the journal name of the one run entry each invocation writes.
const runName = "invoke"

// handlerFunc is one invocation: Input → Run("invoke") → InvokeFunction →
// the run's completion proposed → Output, in the same write. On replay with a recorded completion
// the run closure is not called, so InvokeFunction is not either.
func (b *Bridge) handlerFunc(p *pool) restate.HandlerFunc {
	return func(ctx restate.Context, input []byte) ([]byte, error) {
		start := time.Now()
		att := p.tel.startAttempt(ctx)
		var (
			executed bool
			runUID   string
			runErr   error
		)
		// The worker is leased before the RunCommand is flushed: a run
		// queued for a busy pool does not show in flight, and Restate gets
		// the command and its result close together rather than a queue's
		// wait apart (which costs restate-server measurably more per run).
		var (
			ictx   context.Context
			leased *slot
		)
		// RunLast: the output follows from the run's record alone, so the
		// proposal and the Output go to Restate together.
		value, err := ctx.RunLast(runName, func(rctx context.Context) error {
			executed = true
			if err := b.keyed[p].checkKey(ctx.Key()); err != nil {
				runErr = toRestate(err)
				return runErr
			}
			ictx = b.keyed[p].withKey(att.context(rctx), ctx.Key())
			s, err := p.lease(ictx)
			if err != nil {
				runErr = toRestate(classifyCtx(ictx, err))
				return runErr
			}
			leased = s
			return nil
		}, func(context.Context) ([]byte, error) {
			res, uid, err := p.invokeLeased(ictx, leased, runtimeInvocationID(ctx.InvocationID()), input, contentTypeOf(ctx))
			runUID = uid
			if err != nil {
				runErr = toRestate(err)
				return nil, runErr
			}
			return encodeRecord(res)
		})
		ev := b.log.Info()
		var out []byte
		if err == nil {
			var res *Result
			if res, err = decodeRecord(value); err == nil {
				out = res.Output
			} else {
				// A record this bridge cannot read (written by another
				// version, or not by fnbridge): a journal mismatch, retried,
				// so the deployment that wrote it (a rollback undone) can
				// still replay it. Never a wrong result, never terminal.
				err = &restate.RetryableError{Code: restate.CodeJournalMismatch, Message: err.Error()}
			}
		}
		// The run's own failure says why the attempt ended: the endpoint
		// only answers that it did.
		why := err
		if runErr != nil && errors.Is(err, restate.ErrAttemptEnded) {
			why = runErr
		}
		if err != nil {
			ev = b.log.Warn().Str("error", why.Error())
		}
		outcome := attemptOutcome(ctx, executed, err, runErr)
		att.end(outcome, why)
		ev.Str("restate_invocation_id", ctx.InvocationID()).
			Str("service", p.service).Str("handler", p.h.Name).
			Str("run_uid", runUID).Str("invocation_id", ctx.InvocationID()).
			Str("outcome", outcome.String()).Dur("duration_ms", time.Since(start)).
			Msg("invocation")
		return out, err
	}
}

// runtimeInvocationID is the invocation_id sent to the runtime: Restate's
// invocation id as is when the runtime accepts it (at most
// functionruntime.MaxInvocationIDBytes of UTF-8 without control
// characters, which every id restate-server issues is), otherwise a
// stable digest of it. The id comes from the StartMessage, not from the
// caller's input, so a runtime that refused it must not fail the
// invocation terminally as if its input were invalid; the digest still
// correlates the runtime's logs across attempts.
func runtimeInvocationID(id string) string {
	ok := len(id) <= functionruntime.MaxInvocationIDBytes && utf8.ValidString(id)
	for _, r := range id {
		if !ok {
			break
		}
		ok = !unicode.IsControl(r)
	}
	if ok {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// contentTypeOf is the input's content type as the caller sent it, JSON
// when the caller said nothing.
func contentTypeOf(ctx restate.Context) string {
	for k, v := range ctx.Headers() {
		if strings.EqualFold(k, "content-type") && v != "" {
			return v
		}
	}
	return "application/json"
}

// Invoke runs one function once, without Restate and without a journal:
// `bridge invoke`, a developer's inner loop. A steps-mode function's
// context calls go to a local journal (localJournal). A keyed handler
// gets the key "" (InvokeKeyed names one).
func (b *Bridge) Invoke(ctx context.Context, service, handler string, input []byte) (*Result, error) {
	return b.InvokeKeyed(ctx, service, handler, "", input)
}

// InvokeKeyed is Invoke with the virtual object key or workflow id of a
// keyed handler (FNBRIDGE_KEY); a plain service's handler has no key, and
// one given is an error.
func (b *Bridge) InvokeKeyed(ctx context.Context, service, handler, key string, input []byte) (*Result, error) {
	p, ok := b.pools[service+"/"+handler]
	if !ok {
		return nil, b.unknownHandler(service, handler)
	}
	k := b.keyed[p]
	if key != "" && !k.keyed {
		return nil, &KeyNotAllowedError{Name: service + "/" + handler}
	}
	ctx = k.withKey(ctx, key)
	if p.h.StepsMode() {
		return b.invokeSteps(ctx, p, input)
	}
	res, _, err := p.invoke(ctx, "", input, p.h.LocalInputContentType())
	return res, err
}

// LocalInputContentType is the content type a run without Restate
// (`bridge invoke`) gives the handler's input, as a caller would send it:
// input_content_type when it names one type; application/json when it is
// a pattern (text/*), which no caller sends.
func (h *HandlerConfig) LocalInputContentType() string {
	if h.InputContentType == "" || strings.Contains(h.InputContentType, "*") {
		return "application/json"
	}
	return h.InputContentType
}

// IsJSON reports whether a content type is JSON: application/json or a
// type ending in +json, parameters ignored.
func IsJSON(contentType string) bool { return isJSON(contentType) }

// Handler returns the configured handler service/handler, or nil.
func (c *Config) Handler(service, handler string) *HandlerConfig {
	for si := range c.Services {
		if c.Services[si].Name != service {
			continue
		}
		for hi := range c.Services[si].Handlers {
			if h := &c.Services[si].Handlers[hi]; h.Name == handler {
				return h
			}
		}
	}
	return nil
}

// invoke leases a registration and calls InvokeFunction. A registration
// that turns out stale, draining or failed before dispatch is
// re-registered once; only then does the invocation fail with 503.
func (p *pool) invoke(ctx context.Context, invocationID string, input []byte, contentType string) (*Result, string, error) {
	return p.invokeLeased(ctx, nil, invocationID, input, contentType)
}

// InvokeDeadlineMargin is how long past the handler's timeout the bridge
// waits for InvokeFunction to answer before it gives up on its own. The
// runtime enforces the timeout itself (timeout_millis) and answers
// DeadlineExceeded once it has stopped the worker (TERM, then KILL after
// its 2s grace): the margin covers that and the answer's way back. A
// runtime that has not answered by then is hung or unreachable, and the
// invocation fails as a timeout would (504, retried). The deadline
// travels with the call (grpc-timeout), so a runtime that comes back
// stops the invocation too and frees its registration.
const InvokeDeadlineMargin = 5 * time.Second

// errNoAnswer is why an InvokeFunction call's own deadline ended it.
var errNoAnswer = errors.New("the runtime did not answer within the handler's timeout and margin")

// invokeLeased is invoke whose first try uses leased, a registration the
// caller already leased (nil: lease one). A registration found stale or
// failed is re-registered in place for the retry: leasing the next free
// one instead would, after a runtime restart, pick one just as stale and
// fail again without registering anything.
func (p *pool) invokeLeased(ctx context.Context, leased *slot, invocationID string, input []byte, contentType string) (*Result, string, error) {
	var lastErr error
	for try := 0; try < 2; try++ {
		s := leased
		leased = nil
		if s == nil {
			var err error
			if s, err = p.lease(ctx); err != nil {
				return nil, "", classifyCtx(ctx, err)
			}
		}
		ictx, exec := p.tel.startExecution(ctx, s)
		deadline := time.Now().Add(p.h.Timeout.Std() + InvokeDeadlineMargin)
		callCtx, cancelCall := context.WithDeadlineCause(ictx, deadline, errNoAnswer)
		resp, err := p.client.InvokeFunction(callCtx, &executorv1.InvokeFunctionRequest{
			Registration:  &executorv1.FunctionRegistration{RunUid: s.runUID, RegistrationId: s.regID},
			InvocationId:  invocationID,
			Input:         input,
			ContentType:   contentType,
			TimeoutMillis: p.h.Timeout.Std().Milliseconds(),
		})
		// Past the deadline, the call ended by it: on this side, or on the
		// runtime's, which got it with the call (grpc-timeout) and whose
		// own timer may fire first; either way the runtime did not answer
		// by its own timeout.
		class := functionruntime.Classify(err)
		noAnswer := err != nil && ctx.Err() == nil && !time.Now().Before(deadline) &&
			(class == functionruntime.ClassTimeout || class == functionruntime.ClassAborted)
		cancelCall()
		exec.end(ictx, err)
		if err == nil {
			p.release(s)
			return &Result{Output: resp.GetOutput(), ContentType: resp.GetContentType(), Outputs: resp.GetOutputs()}, s.runUID, nil
		}
		if noAnswer {
			// The runtime may still run the invocation (it was hung, or
			// the network partitioned): the registration goes back once
			// the runtime reports it idle, or at the latest after
			// settleTimeout, so the next attempt is not refused as busy
			// by this one.
			p.settle(s)
			return nil, s.runUID, &Error{Class: ClassTimeout, Message: fmt.Sprintf("timed out after %s: the %s runtime did not answer within %s more (hung or unreachable)",
				p.h.Timeout.Std(), p.h.Runtime, InvokeDeadlineMargin), Cause: err}
		}
		switch class {
		case functionruntime.ClassStale:
			s.regID = "" // never use this ID again; resolve afresh
		case functionruntime.ClassRegistrationFailed:
			// The worker could not be restarted: the next try registers a
			// new attempt at once; if that fails too, it is permanent.
			s.regID = ""
			s.attempt++
		}
		if ctx.Err() != nil {
			p.settle(s)
			return nil, s.runUID, p.classifyInvoke(ctx, err)
		}
		lastErr = err
		if class != functionruntime.ClassStale && class != functionruntime.ClassRegistrationFailed {
			p.release(s)
			return nil, s.runUID, p.classifyInvoke(ctx, err)
		}
		if try > 0 {
			p.release(s)
			break
		}
		// Nothing was dispatched: register this same registration afresh
		// (still held, so no other invocation can take it meanwhile).
		if err := p.reRegister(ctx, s); err != nil {
			return nil, s.runUID, classifyCtx(ctx, err)
		}
		leased = s
	}
	return nil, "", &Error{Class: ClassUnavailable, Message: "registration stayed unusable after re-registering: " + status.Convert(lastErr).Message(), Cause: lastErr}
}

// classifyCtx turns a failure under an ended context into what ended it.
func classifyCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return interrupted(ctx, err, "invocation cancelled")
	}
	return err
}

// interrupted classifies a failure whose context ended: ClassCancelled only
// for Restate's CANCEL (the context's cause); anything else (the stream
// closed, the bridge shutting down, a suspension) interrupted this attempt
// alone, and Restate retries it.
func interrupted(ctx context.Context, err error, cancelled string) *Error {
	cause := context.Cause(ctx)
	if errors.Is(cause, restate.ErrCancelled) {
		return &Error{Class: ClassCancelled, Message: cancelled, Cause: err}
	}
	return &Error{Class: ClassUnavailable, Message: "attempt interrupted before the function answered: " + cause.Error(), Cause: err}
}

// classifyInvoke maps an InvokeFunction failure onto the bridge's classes
// (docs/ARCHITECTURE.md, error classification).
func (p *pool) classifyInvoke(ctx context.Context, err error) *Error {
	msg := status.Convert(err).Message()
	if ctx.Err() != nil {
		return interrupted(ctx, err, "invocation cancelled: worker stopped")
	}
	switch functionruntime.Classify(err) {
	case functionruntime.ClassHandlerTerminal:
		return &Error{Class: ClassTerminal, Message: functionruntime.TerminalMessage(err), Cause: err, Code: restate.Code(functionruntime.TerminalCode(err))}
	case functionruntime.ClassHandlerRetryable:
		return &Error{Class: ClassHandler, Message: msg, Cause: err}
	case functionruntime.ClassTimeout:
		return &Error{Class: ClassTimeout, Message: fmt.Sprintf("timed out after %s: %s", p.h.Timeout.Std(), msg), Cause: err}
	case functionruntime.ClassBusy:
		// This bridge leased the registration: whoever keeps it busy is
		// another client of the runtime, most likely a replica that
		// registers the same run UIDs, which only its identity tells.
		return &Error{Class: ClassBusy, Message: msg + "; this bridge holds that registration's lease, so another client of the runtime invokes it: " +
			"is another bridge replica running with the same instance identity (the run UID's first part)? Give each replica its own --instance", Cause: err}
	case functionruntime.ClassUnimplemented:
		p.reportUnimplemented.Do(func() {
			p.log.Error().Err(err).Msgf("the %s runtime server does not implement executor.v1.FunctionRuntime: this is a configuration error, invocations pause until it is fixed", p.h.Runtime)
		})
		return &Error{Class: ClassPermanent, Message: "runtime server does not implement executor.v1.FunctionRuntime", Cause: err}
	case functionruntime.ClassInvalid:
		// The request itself is out of bounds (input too large): the same
		// input can never succeed, so retrying would only loop.
		return &Error{Class: ClassInvalidInput, Message: "invalid invocation: " + msg, Cause: err}
	case functionruntime.ClassAborted, functionruntime.ClassUnavailable:
		return &Error{Class: ClassUnavailable, Message: msg, Cause: err}
	}
	return &Error{Class: ClassCrashed, Message: msg, Cause: err}
}

// toRestate turns a classified failure into what the Restate endpoint
// journals or reports.
func toRestate(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return &restate.RetryableError{Code: restate.CodeInternal, Message: err.Error()}
	}
	switch e.Class {
	case ClassTerminal, ClassInvalidInput:
		code := e.Class.Code()
		if e.Code != 0 {
			code = e.Code
		}
		return &restate.TerminalError{Code: code, Message: e.Message}
	case ClassCancelled:
		return restate.ErrCancelled
	case ClassPermanent:
		return &restate.RetryableError{Code: restate.CodeInternal, Message: e.Message, Pause: true, RetryAfter: PermanentRetryDelay}
	}
	return &restate.RetryableError{Code: e.Class.Code(), Message: e.Message}
}

// KeyNotAllowedError is why InvokeKeyed refused a key: the handler is a
// plain service's, which has none.
type KeyNotAllowedError struct {
	Name string // Service/handler
}

func (e *KeyNotAllowedError) Error() string {
	return fmt.Sprintf("%s is a handler of a plain service, which has no key: leave the key out", e.Name)
}

// UnknownHandlerError is why Invoke found no handler to run: the
// configuration has none of that name.
type UnknownHandlerError struct {
	Name string // Service/handler as asked
	// Suggestion is the configured name closest to Name, if one is near
	// enough to be a likely typo; Known lists the configured names.
	Suggestion string
	Known      []string
}

func (e *UnknownHandlerError) Error() string {
	msg := fmt.Sprintf("no handler %s in the configuration", e.Name)
	if e.Suggestion != "" {
		msg += fmt.Sprintf(", did you mean %s?", e.Suggestion)
	}
	const shown = 20
	if len(e.Known) > shown {
		return msg + " (configured: " + strings.Join(e.Known[:shown], ", ") + fmt.Sprintf(" and %d more)", len(e.Known)-shown)
	}
	return msg + " (configured: " + strings.Join(e.Known, ", ") + ")"
}

func (b *Bridge) unknownHandler(service, handler string) error {
	return b.cfg.UnknownHandler(service, handler)
}

// UnknownHandler is the error naming service/handler as absent from c,
// with the configured names (for a caller that checks before starting a
// bridge, as `bridge invoke` does).
func (c *Config) UnknownHandler(service, handler string) *UnknownHandlerError {
	e := &UnknownHandlerError{Name: service + "/" + handler}
	for _, s := range c.Services {
		for _, h := range s.Handlers {
			e.Known = append(e.Known, s.Name+"/"+h.Name)
		}
	}
	e.Suggestion = closest(e.Name, e.Known)
	return e
}
