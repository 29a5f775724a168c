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
// registration becomes FAILED as soon as a restart of its worker fails,
// also one that runs in the background after an invocation killed it. Any
// state moves to DRAINING when the registration is unregistered, superseded
// by a higher attempt or shut down; the goroutine that made that move owns
// the teardown, and closes removed when the worker is closed and the table
// no longer holds the registration. Each later request to tear it down may
// still shorten the drain (see beginTeardownLocked).
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
	// drainBy is when the in-flight invocation of a draining registration
	// is cancelled at the latest; zero: no deadline (the owner's context
	// alone ends the drain). Every request to tear the registration down
	// may move it earlier, never later; drainWhy says which one set it.
	// drainCut is closed (and forgotten) each time drainBy moves, waking
	// the drain under way so it heeds the new deadline.
	drainBy  time.Time
	drainWhy string
	drainCut chan struct{}
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

// beginTeardownLocked moves the registration to DRAINING, asks for its
// in-flight invocation to be cancelled by the time by at the latest (zero:
// no deadline of this caller's own; why says who asks) and reports whether
// the caller now owns the teardown (false: someone else already does; wait
// on removed). A caller that does not own the teardown still shortens the
// drain under way: cancel_in_flight, a shorter drain timeout, a superseding
// attempt or the end of a shutdown's drain take effect at once.
func (r *registration) beginTeardownLocked(by time.Time, why string) bool {
	r.limitDrainLocked(by, why)
	if r.tearingDown {
		return false
	}
	r.tearingDown = true
	r.state = stateDraining
	return true
}

// limitDrainLocked moves the drain deadline to by when that is earlier
// (a zero by changes nothing) and wakes the drain under way.
func (r *registration) limitDrainLocked(by time.Time, why string) {
	if by.IsZero() || (!r.drainBy.IsZero() && !by.Before(r.drainBy)) {
		return
	}
	r.drainBy, r.drainWhy = by, why
	if r.drainCut != nil {
		close(r.drainCut)
		r.drainCut = nil
	}
}

// drainLimitLocked returns the drain deadline, who set it, and a channel
// closed when it moves.
func (r *registration) drainLimitLocked() (by time.Time, why string, moved <-chan struct{}) {
	if r.drainCut == nil {
		r.drainCut = make(chan struct{})
	}
	return r.drainBy, r.drainWhy, r.drainCut
}

// teardown drains and removes a registration whose teardown the caller owns.
// It waits for the in-flight invocation until the drain deadline (see
// beginTeardownLocked; requests that arrive during the drain may move it
// earlier) or until ctx ends, then cancels it. Then it waits for
// initialization to stop, closes the worker and removes the registration
// from the table if it is still there. It returns the worker's Close
// error, already logged.
func (s *Server) teardown(reg *registration, cause error, ctx context.Context) error {
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
		s.drain(reg, act, ctx)
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

// drain waits until act finished, its registration's drain deadline
// passed or ctx ended, whichever is first; the deadline is read again
// whenever another request moves it.
func (s *Server) drain(reg *registration, act *activeInvocation, ctx context.Context) {
	for {
		s.mu.Lock()
		by, why, moved := reg.drainLimitLocked()
		s.mu.Unlock()
		var timeout <-chan time.Time
		stop := func() bool { return false }
		if !by.IsZero() {
			d := time.Until(by)
			if d <= 0 {
				select {
				case <-act.done:
				default:
					reg.log.Info().Str("invocation_id", act.id).Str("reason", why).Msg("cancelling the in-flight invocation")
				}
				return
			}
			t := time.NewTimer(d)
			timeout = t.C
			stop = t.Stop
		}
		select {
		case <-act.done:
			stop()
			return
		case <-timeout:
			reg.log.Warn().Str("invocation_id", act.id).Str("reason", why).Msg("drain timeout reached; cancelling the in-flight invocation")
			return
		case <-moved:
			// Shortened by a later request: wait again, for the new deadline.
			stop()
		case <-ctx.Done():
			stop()
			reg.log.Warn().Str("invocation_id", act.id).Msg("drain interrupted; cancelling the in-flight invocation")
			return
		}
	}
}
