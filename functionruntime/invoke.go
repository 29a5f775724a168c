package functionruntime

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// InvokeFunction runs one bounded invocation on a READY registration. There
// is at most one in-flight invocation per registration and no queue: a
// second concurrent call gets ResourceExhausted. The invocation ends at the
// first of: the handler returning, its timeout (DeadlineExceeded, the
// registration stays READY), the caller's context ending (Canceled), or
// the registration being torn down (Aborted). In the last three cases the
// adapter kills the worker and the next invocation gets a fresh one; when
// that restart fails, the registration becomes FAILED as soon as it has
// (FunctionStatus shows it), not at the next invocation.
func (s *Server) InvokeFunction(ctx context.Context, req *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextStatus(err)
	}
	ref := req.GetRegistration()
	if err := checkRegistrationRef(ref); err != nil {
		return nil, err
	}
	invID := req.GetInvocationId()
	if err := checkInvocationID(invID); err != nil {
		return nil, err
	}
	if invID == "" {
		invID = newInvocationID()
	}
	if n := len(req.GetInput()); n > s.limits.MaxInputBytes {
		return nil, statusError(codes.InvalidArgument, ReasonInputTooLarge,
			map[string]string{"field": "input", "invocation_id": invID},
			"input: is %d bytes, at most %d allowed", n, s.limits.MaxInputBytes)
	}
	ct := req.GetContentType()
	if err := checkContentType(ct); err != nil {
		return nil, invalidArgument("content_type", "%v", err)
	}
	if ct == "" {
		ct = DefaultContentType
	}
	if req.GetTimeoutMillis() < 0 {
		return nil, invalidArgument("timeout_millis", "must not be negative, got %d (0 means the default of %s)", req.GetTimeoutMillis(), s.limits.DefaultTimeout)
	}
	timeout := s.limits.invokeTimeout(req.GetTimeoutMillis())
	stepCtx, err := stepContextOf(ctx)
	if err != nil {
		return nil, invalidArgument("metadata", "%v", err)
	}
	env, err := invocationEnvOf(ctx)
	if err != nil {
		return nil, invalidArgument("metadata", "%v", err)
	}

	reg, act, invCtx, release, err := s.acquire(ctx, ref, invID, timeout)
	if err != nil {
		return nil, err
	}
	log := reg.log.With().Str("invocation_id", invID).Logger()
	log.Debug().Int("input_bytes", len(req.GetInput())).Dur("timeout_ms", timeout).Msg("invocation started")
	started := time.Now()
	res, werr := act.worker.Invoke(invCtx, Invocation{
		ID:          invID,
		Input:       req.GetInput(),
		ContentType: ct,
		Logger:      log,
		Context:     stepCtx,
		Env:         env,
	})
	elapsed := time.Since(started)
	// Read why the context ended before release cancels it.
	ctxCause := context.Cause(invCtx)
	if invCtx.Err() == nil {
		ctxCause = nil
	}
	release(werr)

	if werr != nil {
		err := s.invokeError(reg, invID, timeout, werr, ctxCause)
		// The status's code and message, not its Error(): "rpc error:
		// code = ... desc = ..." says the same twice over.
		st := status.Convert(err)
		var he *HandlerError
		if ctx.Err() != nil {
			// The caller stopped it (a suspended or cancelled attempt, a
			// closed stream): routine for durable steps, not a failure.
			log.Info().Str("code", st.Code().String()).Str("error", st.Message()).Dur("elapsed_ms", elapsed).Msg("invocation cancelled by the caller")
		} else if errors.As(werr, &he) && he.Type == AttemptEndedType {
			// The function stopped itself because its step context ended
			// the attempt (a Python function unwound its suspension):
			// routine too.
			log.Info().Str("code", st.Code().String()).Str("error", st.Message()).Dur("elapsed_ms", elapsed).Msg("invocation ended with its attempt")
		} else {
			log.Warn().Str("code", st.Code().String()).Str("error", st.Message()).Dur("elapsed_ms", elapsed).Msg("invocation failed")
		}
		return nil, err
	}
	if err := s.checkResult(res); err != nil {
		log.Warn().Err(err).Dur("elapsed_ms", elapsed).Msg("invocation returned invalid output")
		return nil, invalidResultStatus(reg.runUID, invID, err.Error())
	}
	outCT := res.ContentType
	if outCT == "" {
		outCT = ct
	}
	log.Debug().Int("output_bytes", len(res.Output)).Dur("elapsed_ms", elapsed).Msg("invocation succeeded")
	return &executorv1.InvokeFunctionResponse{
		Registration: reg.ref(),
		InvocationId: invID,
		Output:       res.Output,
		ContentType:  outCT,
		Outputs:      res.Outputs,
	}, nil
}

// acquire claims the registration's single invocation slot. It returns the
// invocation's context (caller context + timeout + teardown cancellation)
// and release, which frees the slot, records activity and, for a failed
// worker restart, moves the registration to FAILED.
func (s *Server) acquire(ctx context.Context, ref *executorv1.FunctionRegistration, invID string, timeout time.Duration) (
	*registration, *activeInvocation, context.Context, func(error), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg, err := s.lookupLocked(ref)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if reg.state != stateReady {
		return nil, nil, nil, nil, reg.notUsableLocked()
	}
	if reg.active != nil {
		return nil, nil, nil, nil, statusError(codes.ResourceExhausted, ReasonRegistrationBusy,
			map[string]string{"run_uid": reg.runUID, "registration_id": reg.id, "invocation_id": invID},
			"registration %s of run_uid %s is busy with invocation %s; one invocation runs at a time and requests are not queued",
			reg.id, reg.runUID, reg.active.id)
	}
	cancelCtx, cancel := context.WithCancelCause(ctx)
	invCtx, stopTimeout := context.WithTimeoutCause(cancelCtx, timeout, errInvocationTimeout)
	// A restart of the worker that fails after this invocation returned
	// (the worker restarts in the background once an invocation killed it)
	// makes the registration FAILED at once, for FunctionStatus to show,
	// rather than at the next invocation.
	invCtx = proc.WithRestartFailed(invCtx, func(werr error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reg.workerFailedLocked(werr, invID)
	})
	act := &activeInvocation{id: invID, cancel: cancel, done: make(chan struct{}), worker: reg.worker}
	reg.active = act
	reg.lastActivity = s.now()
	release := func(werr error) {
		stopTimeout()
		cancel(nil)
		s.mu.Lock()
		reg.active = nil
		reg.lastActivity = s.now()
		if errors.Is(werr, ErrWorkerFailed) {
			reg.workerFailedLocked(werr, invID)
		}
		s.mu.Unlock()
		close(act.done)
	}
	return reg, act, invCtx, release, nil
}

// workerFailedLocked moves a READY registration whose worker could not be
// restarted to FAILED, werr (bounded) its fatal_error; invID names the
// invocation that met the failure or, for a restart that failed in the
// background, the one after which it began. It does nothing to a
// registration in any other state: one already FAILED keeps its first
// fatal_error, a draining one is going away.
func (reg *registration) workerFailedLocked(werr error, invID string) {
	if reg.state != stateReady {
		return
	}
	reg.state = stateFailed
	reg.fatalError = fatalText(werr)
	reg.log.Error().Str("invocation_id", invID).Str("fatal_error", reg.fatalError).Msg("worker could not be restarted; registration failed")
}

// invokeError maps an adapter error to the gRPC status the caller sees.
// ctxCause is why the invocation's context ended, nil when it did not.
func (s *Server) invokeError(reg *registration, invID string, timeout time.Duration, werr, ctxCause error) error {
	md := map[string]string{"run_uid": reg.runUID, "invocation_id": invID}
	var he *HandlerError
	switch {
	case errors.As(werr, &he):
		return handlerStatus(he, reg.runUID, invID)
	case errors.Is(werr, ErrWorkerFailed):
		md["registration_id"] = reg.id
		md["fatal_error"] = fatalText(werr)
		return statusError(codes.FailedPrecondition, ReasonRegistrationFailed, md,
			"invocation %s: the worker could not be restarted, registration %s is now FAILED: %v", invID, reg.id, werr)
	case errors.Is(ctxCause, errInvocationTimeout) && errors.Is(werr, proc.ErrRestarting):
		md["timeout_millis"] = fmt.Sprint(timeout.Milliseconds())
		return statusError(codes.DeadlineExceeded, ReasonInvocationTimeout, md,
			"invocation %s reached its timeout of %s while the worker was still restarting (the handler did not run); the restart goes on and the registration stays READY", invID, timeout)
	case errors.Is(ctxCause, errInvocationTimeout):
		md["timeout_millis"] = fmt.Sprint(timeout.Milliseconds())
		var se *proc.StuckError
		if errors.As(werr, &se) {
			// What held the worker, rather than the function, is named:
			// an earlier invocation may be the cause.
			return statusError(codes.DeadlineExceeded, ReasonInvocationTimeout, md,
				"invocation %s exceeded its timeout of %s and was killed, its worker with it (%s); the registration stays READY", invID, timeout, se.Why)
		}
		return statusError(codes.DeadlineExceeded, ReasonInvocationTimeout, md,
			"invocation %s exceeded its timeout of %s and was killed; the registration stays READY", invID, timeout)
	case errors.Is(ctxCause, errRegistrationGone):
		return statusError(codes.Aborted, ReasonInvocationAborted, md,
			"invocation %s was cancelled: %v", invID, ctxCause)
	case ctxCause != nil:
		// The caller's own context: report it the way gRPC would.
		return contextStatus(ctxErrorOf(ctxCause))
	case errors.Is(werr, ErrWorkerCrashed):
		return statusError(codes.Internal, ReasonWorkerCrashed, md,
			"invocation %s: %v; the next invocation starts a fresh worker", invID, werr)
	default:
		return statusError(codes.Internal, ReasonAdapterError, md,
			"invocation %s: %s adapter failed: %v", invID, s.adapter.Kind(), werr)
	}
}

// ctxErrorOf reduces a context cause to context.Canceled or
// context.DeadlineExceeded.
func ctxErrorOf(cause error) error {
	if errors.Is(cause, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// checkContentType says which bound of a content type ct breaks, if any.
func checkContentType(ct string) error {
	if len(ct) > MaxContentTypeBytes {
		return fmt.Errorf("is %d bytes, at most %d allowed", len(ct), MaxContentTypeBytes)
	}
	if !utf8.ValidString(ct) {
		return errors.New("must be valid UTF-8")
	}
	return nil
}

// checkResult bounds a successful result: output size and outputs.
func (s *Server) checkResult(res Result) error {
	if len(res.Output) > s.limits.MaxOutputBytes {
		return fmt.Errorf("output is %d bytes, at most %d allowed", len(res.Output), s.limits.MaxOutputBytes)
	}
	if err := checkContentType(res.ContentType); err != nil {
		return fmt.Errorf("content type %v", err)
	}
	return checkOutputs(res.Outputs, s.limits.Outputs)
}
