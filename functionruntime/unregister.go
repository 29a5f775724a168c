package functionruntime

import (
	"context"
	"time"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// UnregisterFunction "first moves the registration to DRAINING, rejecting
// new invokes". With cancel_in_flight=false it waits at most
// drain_timeout_millis (0 means Limits.DefaultDrainTimeout; larger values
// are capped at Limits.MaxDrainTimeout) for the active invocation and then
// cancels it; with cancel_in_flight=true it cancels at once. It then closes
// the worker and removes the registration. If the caller's context ends
// during the drain, the in-flight invocation is cancelled and the teardown
// still completes.
//
// An absent registration succeeds; a stale registration ID returns
// FailedPrecondition and leaves the current registration alone. An
// Unregister of a registration already draining (unregistered, superseded
// or shut down) waits for that teardown, and shortens its drain first when
// it asks for less waiting: cancel_in_flight=true cancels the in-flight
// invocation at once, a drain timeout ending sooner than the drain under
// way becomes its deadline.
func (s *Server) UnregisterFunction(ctx context.Context, req *executorv1.UnregisterFunctionRequest) (*executorv1.UnregisterFunctionResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextStatus(err)
	}
	ref := req.GetRegistration()
	if err := checkRegistrationRef(ref); err != nil {
		return nil, err
	}
	if req.GetDrainTimeoutMillis() < 0 {
		return nil, invalidArgument("drain_timeout_millis", "must not be negative, got %d (0 means the default of %s)", req.GetDrainTimeoutMillis(), s.limits.DefaultDrainTimeout)
	}
	drain := s.limits.drainTimeout(req.GetDrainTimeoutMillis())
	why := "drain timeout of " + drain.String()
	if req.GetCancelInFlight() {
		drain, why = 0, "cancel_in_flight"
	}

	s.mu.Lock()
	if _, ok := s.regs[ref.GetRunUid()]; !ok {
		s.mu.Unlock()
		s.log.Debug().Str("run_uid", ref.GetRunUid()).Msg("unregister of an absent registration: nothing to do")
		return &executorv1.UnregisterFunctionResponse{Registration: ref}, nil
	}
	reg, err := s.lookupLocked(ref)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	owns := reg.beginTeardownLocked(time.Now().Add(drain), "unregistered with "+why)
	s.mu.Unlock()

	if owns {
		reg.log.Info().Bool("cancel_in_flight", req.GetCancelInFlight()).Dur("drain_timeout_ms", drain).Msg("unregistering")
		// A Close failure is logged; the registration is gone either way.
		_ = s.teardown(reg, goneCause("unregistered"), ctx)
	} else {
		reg.log.Info().Bool("cancel_in_flight", req.GetCancelInFlight()).Dur("drain_timeout_ms", drain).Msg("unregistering a registration already draining; its drain ends no later than this request's")
		select {
		case <-reg.removed:
		case <-ctx.Done():
			return nil, contextStatus(ctx.Err())
		}
	}
	return &executorv1.UnregisterFunctionResponse{Registration: reg.ref()}, nil
}
