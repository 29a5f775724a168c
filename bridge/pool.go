package bridge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// pool keeps up to Concurrency registrations of one handler, each leased
// by one invocation at a time. It plays runtimed of
// docs/spec/function-runtime-server-contract.md: it chooses run_uid and
// registration_attempt, resolves run_uid to the current registration_id
// itself, polls FunctionStatus, unregisters idle registrations and
// re-registers failed ones with backoff.
type pool struct {
	service string
	h       *HandlerConfig
	client  executorv1.FunctionRuntimeClient
	log     zerolog.Logger
	now     func() time.Time

	free  chan *slot
	slots []*slot

	pollEvery time.Duration
	stop      chan struct{}
	// stopCtx ends with stop: the janitor's calls to the runtime end with it.
	stopCtx    context.Context
	stopCancel context.CancelFunc
	done       chan struct{}
	closeOnce  sync.Once
	started    bool

	// reportUnimplemented makes a runtime without FunctionRuntime a single
	// clear log line rather than one per invocation.
	reportUnimplemented *sync.Once
	tel                 *poolTelemetry // metrics and spans (telemetry.go)
}

// slot is one registration position. Only the holder of the slot (a lease
// or the janitor, having taken it from free) touches its fields.
type slot struct {
	index   int
	runUID  string
	attempt int32
	regID   string // "" while not registered
	// fatal is the last permanent initialization failure; while set and
	// retryAt is in the future, leases fail fast instead of re-registering.
	fatal   string
	retryAt time.Time
	backoff time.Duration
	// invalid marks a registration the runtime rejected as malformed
	// (InvalidArgument): no number of retries can fix it, so it is
	// permanent at once.
	invalid bool
	// state is the slot's telemetry.RegistrationState (slot.publish).
	state atomic.Uint32
}

// permanentAfter is how many failed initializations in a row (each already
// retried once at once) make a registration failure permanent. Fewer may
// be a worker killed while it started (OOM, an operator, a crash): then
// invocations are retried normally (503) instead of paused until an
// operator acts (v7) or retried only after 5 minutes (v5/v6); a broken
// handler reaches the bound within seconds of backoff.
const permanentAfter = 3

// failedClass classifies the slot's last initialization failure.
func (s *slot) failedClass() Class {
	if s.invalid || s.backoff >= minRegisterBackoff<<(permanentAfter-1) {
		return ClassPermanent
	}
	return ClassUnavailable
}

const (
	minRegisterBackoff = time.Second
	maxRegisterBackoff = 5 * time.Minute
	registerTimeout    = 60 * time.Second
	unregisterDrain    = 2 * time.Second
)

func newPool(instance, service string, h *HandlerConfig, client executorv1.FunctionRuntimeClient, log zerolog.Logger, unimpl *sync.Once) *pool {
	stopCtx, stopCancel := context.WithCancel(context.Background())
	p := &pool{
		service:             service,
		h:                   h,
		client:              client,
		log:                 log.With().Str("service", service).Str("handler", h.Name).Logger(),
		now:                 time.Now,
		free:                make(chan *slot, h.Concurrency),
		pollEvery:           min(max(h.IdleTimeout.Std()/4, time.Second), 30*time.Second),
		stop:                make(chan struct{}),
		stopCtx:             stopCtx,
		stopCancel:          stopCancel,
		done:                make(chan struct{}),
		reportUnimplemented: unimpl,
	}
	for i := range h.Concurrency {
		s := &slot{index: i, runUID: runUID(instance, service, h.Name, i), attempt: 1}
		p.slots = append(p.slots, s)
		p.free <- s
	}
	return p
}

// start registers the min_warm registrations and starts the janitor. A
// registration that fails ends the warming with its error, but the pool
// is started all the same: it registers on demand, and the janitor keeps
// trying to warm it.
func (p *pool) start(ctx context.Context) error {
	var err error
	for i := 0; i < p.h.MinWarm && err == nil; i++ {
		s := <-p.free
		if err = p.ensureRegistered(ctx, s); err != nil {
			err = fmt.Errorf("%s/%s: warming registration %d: %w", p.service, p.h.Name, i, err)
		}
		p.release(s)
	}
	p.started = true
	go p.janitor()
	return err
}

// lease takes a free registration, waiting at most LeaseTimeout (or
// until the pool closes), and makes sure it is registered and READY.
func (p *pool) lease(ctx context.Context) (*slot, error) {
	var s *slot
	waited := time.Now()
	select {
	case s = <-p.free:
	default:
		t := time.NewTimer(p.h.LeaseTimeout.Std())
		defer t.Stop()
		select {
		case s = <-p.free:
		case <-t.C:
			p.tel.leaseWaited(waited, true)
			return nil, &Error{Class: ClassBusy, Message: fmt.Sprintf("all %d registrations of %s/%s are busy (waited %s)", p.h.Concurrency, p.service, p.h.Name, p.h.LeaseTimeout.Std())}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.stop:
			// Closing (replaced by a reload, or shutting down): a slot
			// may free up only for close, so fail now, retryably.
			return nil, &Error{Class: ClassUnavailable, Message: fmt.Sprintf("the registrations of %s/%s are closing", p.service, p.h.Name)}
		}
	}
	p.tel.leaseWaited(waited, false)
	if err := p.ensureRegistered(ctx, s); err != nil {
		p.release(s)
		return nil, err
	}
	s.publish(true)
	return s, nil
}

func (p *pool) release(s *slot) { s.publish(false); p.free <- s }

// settleTimeout bounds how long a registration whose caller gave up is
// kept out of the pool: the runtime's kill grace (2s by default) and
// some margin.
const settleTimeout = 5 * time.Second

// settle returns s to the pool once the runtime no longer runs the
// invocation its caller cancelled. A cancelled call returns at once, as
// over a network, while the runtime is still stopping the worker (a
// steps-mode attempt that suspended, a CANCEL); leased in that window, the
// registration would refuse the next invocation as busy (429).
func (p *pool) settle(s *slot) {
	go func() {
		defer p.release(s)
		ref := &executorv1.FunctionRegistration{RunUid: s.runUID, RegistrationId: s.regID}
		deadline := time.Now().Add(settleTimeout)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := p.client.FunctionStatus(ctx, &executorv1.FunctionStatusRequest{Registration: ref})
			cancel()
			if err != nil || st.GetInFlight() == 0 {
				return
			}
			<-tick.C
		}
	}()
}

// ensureRegistered registers s when it has no current registration.
func (p *pool) ensureRegistered(ctx context.Context, s *slot) error {
	if s.regID != "" {
		return nil
	}
	if s.fatal != "" && p.now().Before(s.retryAt) {
		return &Error{Class: s.failedClass(), Message: fmt.Sprintf("registration %s failed: %s (next retry in %s)", s.runUID, s.fatal, s.retryAt.Sub(p.now()).Round(time.Second))}
	}
	digest, err := registrationDigest(p.h)
	if err != nil {
		// The handler's source is missing or unreadable: an initialization
		// failure like an import error (a deploy may still be copying the
		// file), so the same rounds of backoff pass before it is permanent.
		p.markFailed(s, err.Error())
		return &Error{Class: s.failedClass(), Message: fmt.Sprintf("registration %s failed: %s", s.runUID, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	// A digest or attempt conflict with what the runtime holds (an edited
	// source, a registration left by an earlier bridge process) is resolved
	// by moving to a newer attempt; bounded so a misbehaving server cannot
	// spin us.
	retriedFailed := false
	registering := time.Now()
	for tries := 0; ; tries++ {
		// The limits, and a python interpreter, travel as metadata: the
		// contract's request has no field for them.
		mdCtx := metadata.AppendToOutgoingContext(ctx, functionruntime.WorkerLimitsMetadata, p.h.Limits.Worker().Encode())
		if interp := p.h.PythonInterpreter(); interp != "" {
			mdCtx = metadata.AppendToOutgoingContext(mdCtx, functionruntime.InterpreterMetadata, interp)
		}
		resp, err := p.client.RegisterFunction(mdCtx, &executorv1.RegisterFunctionRequest{
			RunUid:              s.runUID,
			RegistrationAttempt: s.attempt,
			WorkingDir:          p.h.Dir,
			Handler:             p.h.Handler,
			Env:                 p.h.Env,
			IdleTimeoutSeconds:  int64(p.h.IdleTimeout.Std().Seconds()),
			RegistrationDigest:  digest,
		})
		if err != nil {
			code := status.Code(err)
			if (code == codes.AlreadyExists || code == codes.FailedPrecondition) && tries < 8 {
				s.attempt++
				continue
			}
			return p.registerError(s, err)
		}
		regID := resp.GetRegistration().GetRegistrationId()
		st := resp.GetState()
		for st == executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_REGISTERING {
			select {
			case <-ctx.Done():
				return &Error{Class: ClassUnavailable, Message: "registration did not become ready in time", Cause: ctx.Err()}
			case <-time.After(20 * time.Millisecond):
			}
			sr, err := p.client.FunctionStatus(ctx, &executorv1.FunctionStatusRequest{Registration: resp.GetRegistration()})
			if err != nil {
				return p.registerError(s, err)
			}
			st = sr.GetState()
		}
		switch st {
		case executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY:
			s.regID, s.fatal, s.backoff, s.invalid = regID, "", 0, false
			p.tel.workerStarted(registering)
			p.log.Debug().Str("run_uid", s.runUID).Int32("attempt", s.attempt).Msg("registration ready")
			return nil
		case executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED:
			p.tel.workerStartFailed()
			fatal := "initialization failed"
			if sr, err := p.client.FunctionStatus(ctx, &executorv1.FunctionStatusRequest{Registration: resp.GetRegistration()}); err == nil && sr.GetFatalError() != "" {
				fatal = sr.GetFatalError()
			}
			// Detached: the invocation that registered may have ended meanwhile.
			p.unregister(context.WithoutCancel(ctx), s.runUID, regID, true)
			// One failed initialization does not prove a permanent fault:
			// the worker (or the interpreter probe) may have been killed
			// while starting. Try once more at the next attempt before
			// declaring it permanent, which pauses invocations until an
			// operator acts; a real fault (syntax error, missing module)
			// fails the same way again.
			if !retriedFailed {
				retriedFailed = true
				s.regID = ""
				s.attempt++
				p.log.Warn().Str("run_uid", s.runUID).Str("fatal_error", fatal).Msg("registration failed; retrying once at the next attempt")
				continue
			}
			p.markFailed(s, fatal)
			return &Error{Class: s.failedClass(), Message: fmt.Sprintf("registration %s failed: %s", s.runUID, fatal)}
		default:
			return &Error{Class: ClassUnavailable, Message: fmt.Sprintf("registration %s is %s", s.runUID, st)}
		}
	}
}

// markFailed records a permanent failure: the next registration uses a new
// attempt, after an exponential backoff.
func (p *pool) markFailed(s *slot, fatal string) {
	s.regID = ""
	s.attempt++
	s.fatal = fatal
	if s.backoff == 0 {
		s.backoff = minRegisterBackoff
	} else {
		s.backoff = min(2*s.backoff, maxRegisterBackoff)
	}
	s.retryAt = p.now().Add(s.backoff)
	p.log.Error().Str("run_uid", s.runUID).Int32("next_attempt", s.attempt).Dur("retry_in_ms", s.backoff).Str("fatal_error", fatal).Msg("registration failed")
}

func (p *pool) registerError(s *slot, err error) error {
	code := status.Code(err)
	switch code {
	case codes.Unimplemented:
		p.reportUnimplemented.Do(func() {
			p.log.Error().Err(err).Msgf("the %s runtime server does not implement executor.v1.FunctionRuntime: this is a configuration error, invocations pause until it is fixed", p.h.Runtime)
		})
		return &Error{Class: ClassPermanent, Message: "runtime server does not implement executor.v1.FunctionRuntime", Cause: err}
	case codes.InvalidArgument:
		p.markFailed(s, status.Convert(err).Message())
		s.invalid = true
		return &Error{Class: ClassPermanent, Message: "invalid registration: " + status.Convert(err).Message(), Cause: err}
	case codes.Canceled, codes.DeadlineExceeded:
		return &Error{Class: ClassUnavailable, Message: "registration interrupted", Cause: err}
	}
	return &Error{Class: ClassUnavailable, Message: "registering " + s.runUID + ": " + status.Convert(err).Message(), Cause: err}
}

// unregister gives one registration back, within ctx's deadline and at
// most the runtime's drain plus 5 s: at shutdown the caller's deadline is
// what is left of shutdown_timeout.
func (p *pool) unregister(ctx context.Context, runUID, regID string, cancelInFlight bool) {
	ctx, cancel := context.WithTimeout(ctx, unregisterDrain+5*time.Second)
	defer cancel()
	_, err := p.client.UnregisterFunction(ctx, &executorv1.UnregisterFunctionRequest{
		Registration:       &executorv1.FunctionRegistration{RunUid: runUID, RegistrationId: regID},
		CancelInFlight:     cancelInFlight,
		DrainTimeoutMillis: unregisterDrain.Milliseconds(),
	})
	if err != nil && status.Code(err) != codes.FailedPrecondition {
		p.log.Warn().Err(err).Str("run_uid", runUID).Msg("unregister failed")
	}
}

// janitor is the bounded-cadence poll: idle registrations are unregistered,
// failed ones cleared for re-registration, vanished ones forgotten, and
// min_warm ones kept registered.
func (p *pool) janitor() {
	defer close(p.done)
	t := time.NewTicker(p.pollEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		for range len(p.slots) {
			var s *slot
			select {
			case s = <-p.free:
			default:
			}
			if s == nil {
				break
			}
			p.check(s)
			p.release(s)
		}
	}
}

func (p *pool) check(s *slot) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.regID == "" {
		if s.index < p.h.MinWarm && !p.now().Before(s.retryAt) {
			_ = p.ensureRegistered(ctx, s)
		}
		return
	}
	ref := &executorv1.FunctionRegistration{RunUid: s.runUID, RegistrationId: s.regID}
	// The poll alone ends with close too: one to a runtime that does not
	// answer must not hold its slot past the shutdown deadline. What
	// follows it (an unregister, a registration) runs to its end, so the
	// runtime and the slot agree on what is registered.
	pctx, pcancel := context.WithTimeout(p.stopCtx, 10*time.Second)
	st, err := p.client.FunctionStatus(pctx, &executorv1.FunctionStatusRequest{Registration: ref})
	pcancel()
	switch {
	case err != nil && p.stopCtx.Err() != nil:
		return // closing: close unregisters it
	case status.Code(err) == codes.NotFound:
		s.regID = "" // the runtime lost it (restart); register afresh on next use
	case status.Code(err) == codes.FailedPrecondition:
		s.regID = "" // superseded or draining: never use this ID again
	case err != nil:
		p.log.Warn().Err(err).Str("run_uid", s.runUID).Msg("status poll failed")
	case st.GetState() == executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED:
		p.unregister(ctx, s.runUID, s.regID, true)
		p.markFailed(s, st.GetFatalError())
	case s.index >= p.h.MinWarm && st.GetInFlight() == 0 &&
		p.now().Sub(time.Unix(0, st.GetLastActivityUnixNano())) >= p.h.IdleTimeout.Std():
		p.log.Debug().Str("run_uid", s.runUID).Msg("unregistering idle registration")
		p.unregister(ctx, s.runUID, s.regID, false)
		s.regID = ""
	}
}

// close stops the janitor, and unregisters every registration as it comes
// back (at once when free, else when its invocation ends), all in parallel
// and within ctx's deadline; one still leased when ctx ends is left.
func (p *pool) close(ctx context.Context) error {
	p.closeOnce.Do(func() { close(p.stop); p.stopCancel() })
	if p.started {
		select {
		case <-p.done:
		case <-ctx.Done():
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for back := range len(p.slots) {
		var s *slot
		select { // a free slot first: ctx may have ended already
		case s = <-p.free:
		default:
		}
		if s == nil {
			select {
			case s = <-p.free:
			case <-ctx.Done():
				return fmt.Errorf("%s/%s: %d of %d registrations still leased by invocations when closing ended",
					p.service, p.h.Name, len(p.slots)-back, len(p.slots))
			}
		}
		if s.regID != "" {
			wg.Add(1)
			go func(runUID, regID string) {
				defer wg.Done()
				p.unregister(ctx, runUID, regID, true)
			}(s.runUID, s.regID)
			s.regID = ""
		}
	}
	return nil
}
