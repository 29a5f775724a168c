package functionruntime

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// Short names for the registration states.
const (
	stateRegistering = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_REGISTERING
	stateReady       = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY
	stateDraining    = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_DRAINING
	stateFailed      = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED
)

// registration is one local registration generation of a Run UID.
//
// Lifecycle: REGISTERING (Adapter.Start running) → READY or FAILED; a READY
// registration becomes FAILED when its worker cannot be restarted. Any state
// moves to DRAINING when the registration is unregistered, superseded by a
// higher attempt or shut down; the goroutine that made that move owns the
// teardown, and closes removed when the worker is closed and the table no
// longer holds the registration.
type registration struct {
	// Immutable after creation.
	id          string
	runUID      string
	attempt     int32
	digest      string
	spec        WorkerSpec
	idleTimeout time.Duration
	log         zerolog.Logger

	// lifeCtx is handed to Adapter.Start and lives until teardown, because
	// an adapter may tie its worker process to the context it was started
	// with. cancelLife ends it, with a cause.
	lifeCtx    context.Context
	cancelLife context.CancelCauseFunc

	initDone chan struct{} // closed once Start has returned and state is set
	removed  chan struct{} // closed once teardown finished

	// Guarded by Server.mu.
	state        executorv1.FunctionRegistrationState
	fatalError   string
	worker       Worker
	lastActivity time.Time
	active       *activeInvocation
	tearingDown  bool
}

// activeInvocation is the one in-flight invocation of a registration.
type activeInvocation struct {
	id     string
	worker Worker // the worker the invocation was admitted with
	cancel context.CancelCauseFunc
	done   chan struct{} // closed after the invocation released the registration
}

// ref is the registration reference returned to callers.
func (r *registration) ref() *executorv1.FunctionRegistration {
	return &executorv1.FunctionRegistration{RunUid: r.runUID, RegistrationId: r.id}
}

// lookupLocked finds the registration a reference names. Unknown Run UID is
// NotFound; a different ID is stale: "a stale ID must never change, invoke,
// or remove a newer registration".
func (s *Server) lookupLocked(ref *executorv1.FunctionRegistration) (*registration, error) {
	reg, ok := s.regs[ref.GetRunUid()]
	if !ok {
		return nil, statusError(codes.NotFound, ReasonRegistrationNotFound,
			map[string]string{"run_uid": ref.GetRunUid()},
			"no registration for run_uid %s on this Runtime Server; register it first", ref.GetRunUid())
	}
	if reg.id != ref.GetRegistrationId() {
		return nil, statusError(codes.FailedPrecondition, ReasonRegistrationStale,
			map[string]string{"run_uid": reg.runUID, "registration_id": ref.GetRegistrationId()},
			"registration %s of run_uid %s is stale: the current registration is attempt %d; re-register or use the current registration ID",
			truncateUTF8(ref.GetRegistrationId(), 64), reg.runUID, reg.attempt)
	}
	return reg, nil
}

// notUsableLocked is the FailedPrecondition for a registration that is not
// READY, naming its state.
func (r *registration) notUsableLocked() error {
	md := map[string]string{"run_uid": r.runUID, "registration_id": r.id, "state": r.state.String()}
	switch r.state {
	case stateRegistering:
		return statusError(codes.FailedPrecondition, ReasonRegistrationNotReady, md,
			"registration %s of run_uid %s is still initializing", r.id, r.runUID)
	case stateDraining:
		return statusError(codes.FailedPrecondition, ReasonRegistrationDraining, md,
			"registration %s of run_uid %s is draining and accepts no new invocations", r.id, r.runUID)
	case stateFailed:
		md["fatal_error"] = r.fatalError
		return statusError(codes.FailedPrecondition, ReasonRegistrationFailed, md,
			"registration %s of run_uid %s failed: %s", r.id, r.runUID, r.fatalError)
	default:
		return statusError(codes.FailedPrecondition, ReasonRegistrationNotReady, md,
			"registration %s of run_uid %s is %s", r.id, r.runUID, r.state)
	}
}

// beginTeardownLocked moves the registration to DRAINING and reports
// whether the caller now owns its teardown (false: someone else already
// does; wait on removed).
func (r *registration) beginTeardownLocked() bool {
	if r.tearingDown {
		return false
	}
	r.tearingDown = true
	r.state = stateDraining
	return true
}

// teardown drains and removes a registration whose teardown the caller owns.
// drain < 0 waits for the in-flight invocation until ctx ends; drain == 0
// cancels it at once; drain > 0 waits at most that long (or until ctx ends).
// Then it waits for initialization to stop, closes the worker and removes
// the registration from the table if it is still there. It returns the
// worker's Close error, already logged.
func (s *Server) teardown(reg *registration, cause error, drain time.Duration, ctx context.Context) error {
	s.mu.Lock()
	act := reg.active
	s.mu.Unlock()

	select {
	case <-reg.initDone:
	default:
		// Still initializing: nothing to drain, stop Start now.
		reg.cancelLife(cause)
	}

	if act != nil {
		if drain != 0 {
			var timeout <-chan time.Time
			if drain > 0 {
				t := time.NewTimer(drain)
				defer t.Stop()
				timeout = t.C
			}
			select {
			case <-act.done:
			case <-timeout:
				reg.log.Warn().Str("invocation_id", act.id).Dur("drain_timeout_ms", drain).Msg("drain timeout reached; cancelling the in-flight invocation")
			case <-ctx.Done():
				reg.log.Warn().Str("invocation_id", act.id).Msg("drain interrupted; cancelling the in-flight invocation")
			}
		}
		act.cancel(cause)
		<-act.done
	}
	<-reg.initDone

	s.mu.Lock()
	w := reg.worker
	reg.worker = nil
	s.mu.Unlock()
	var closeErr error
	if w != nil {
		closeErr = closeWorker(reg, w)
	}
	reg.cancelLife(cause)

	s.mu.Lock()
	if s.regs[reg.runUID] == reg {
		delete(s.regs, reg.runUID)
	}
	close(reg.removed)
	s.mu.Unlock()
	reg.log.Info().Str("reason", context.Cause(reg.lifeCtx).Error()).Msg("registration removed")
	return closeErr
}
