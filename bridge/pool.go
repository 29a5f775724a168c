package bridge

import (
	"context"
	"fmt"
	"slices"
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

	slots []*slot
	// adopting counts the slots whose registration its caller gave up on
	// while it was under way, and adopts their adopt goroutines: close
	// does not wait for them (waitAdopted does).
	adopting atomic.Int32
	adopts   sync.WaitGroup
	// freeMu guards free, the registrations no one holds, and each slot's
	// lastUsed. avail holds one token per slot in free: a lease waits for
	// one in a select, then takes the best slot (take). A holder of a token
	// is owed a slot, so one is only taken by name (takeSlot) with a token.
	freeMu sync.Mutex
	free   []*slot
	avail  chan struct{}
	// newest is the digest of the latest registration made (guarded by
	// freeMu): a registration of another digest is of an earlier version
	// of the handler (code, interpreter), replaced when next leased.
	newest string
	useSeq uint64

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

// slot is one registration position. Only the holder of the slot (a lease,
// the janitor, or a registration its lease abandoned, having taken it from
// free) touches its fields; the free list reads regID, and owns lastUsed,
// under freeMu.
type slot struct {
	index   int
	runUID  string
	attempt int32
	regID   string // "" while not registered
	// digest is the registration's registration_digest.
	digest string
	// source is the sum of the handler's files (sourceSum) when the slot
	// last registered or tried to; "" when they could not be read.
	source string
	// fatal is the last permanent initialization failure; while set and
	// retryAt is in the future, leases fail fast instead of re-registering,
	// unless the handler's files changed since (they were edited).
	fatal   string
	retryAt time.Time
	backoff time.Duration
	// invalid marks a registration the runtime rejected as malformed
	// (InvalidArgument): no number of retries can fix it, so it is
	// permanent at once.
	invalid bool
	// state is the slot's telemetry.RegistrationState (slot.publish).
	state atomic.Uint32
	// lastUsed orders the free slots, most recently released by a lease
	// first (guarded by pool.freeMu).
	lastUsed uint64
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
		avail:               make(chan struct{}, h.Concurrency),
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
		p.put(s, false)
	}
	return p
}

// put returns s to the free slots; used says a lease released it, which
// makes it the first one leased next (take).
func (p *pool) put(s *slot, used bool) {
	s.publish(false)
	p.freeMu.Lock()
	if used {
		p.useSeq++
		s.lastUsed = p.useSeq
	}
	p.free = append(p.free, s)
	p.freeMu.Unlock()
	p.avail <- struct{}{} // never blocks: at most len(slots) tokens
}

// take removes the best free slot; the caller has taken a token from
// avail. The best is a registered one (a warm worker) before one to
// register, that before one whose registration failed and waits out its
// backoff (which would fail the lease at once), and among those the most
// recently used: sequential traffic keeps using one warm registration,
// and the others go idle and are unregistered after idle_timeout (first
// in, first out would cycle through, and cold-start, every slot). Ties go
// to the lowest index, the min_warm slots.
func (p *pool) take() *slot {
	p.freeMu.Lock()
	defer p.freeMu.Unlock()
	now := p.now()
	rank := func(s *slot) int {
		switch {
		case s.regID != "":
			return 2
		case s.fatal != "" && now.Before(s.retryAt):
			return 0
		}
		return 1
	}
	best := 0
	for i, s := range p.free {
		if b := p.free[best]; rank(s) != rank(b) {
			if rank(s) > rank(b) {
				best = i
			}
		} else if s.lastUsed != b.lastUsed {
			if s.lastUsed > b.lastUsed {
				best = i
			}
		} else if s.index < b.index {
			best = i
		}
	}
	s := p.free[best]
	p.free = append(p.free[:best], p.free[best+1:]...)
	return s
}

// tryTake takes the best free slot, nil when none is free.
func (p *pool) tryTake() *slot {
	select {
	case <-p.avail:
		return p.take()
	default:
		return nil
	}
}

// takeSlot takes s itself when it is free and no lease waiting for a slot
// is owed it.
func (p *pool) takeSlot(s *slot) bool {
	p.freeMu.Lock()
	defer p.freeMu.Unlock()
	i := slices.Index(p.free, s)
	if i < 0 {
		return false
	}
	select {
	case <-p.avail:
	default:
		return false
	}
	p.free = append(p.free[:i], p.free[i+1:]...)
	return true
}

// warmSlots bounds how many min_warm registrations of the process are
// being made at once (each starts a worker that imports or sources its
// handler): side by side, so a start waits for the slowest import rather
// than the sum of them, as a reload does (reloadParallelism).
var warmSlots = make(chan struct{}, reloadParallelism)

// start registers the min_warm registrations, side by side (warmSlots),
// and starts the janitor. A registration that fails is reported (the
// first failure, once the others are done), but the pool is started all
// the same: it registers on demand, and the janitor keeps trying to warm
// it.
func (p *pool) start(ctx context.Context) error {
	var (
		mu  sync.Mutex
		err error
		wg  sync.WaitGroup
	)
	for _, s := range p.slots[:min(p.h.MinWarm, len(p.slots))] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			warmSlots <- struct{}{}
			defer func() { <-warmSlots }()
			mu.Lock()
			failed := err != nil
			mu.Unlock()
			// One failure is the handler's (a syntax error fails them all
			// alike): the rest are left to the janitor's backoff.
			if failed || !p.takeSlot(s) {
				return // or leased meanwhile: its lease registers it
			}
			detached, rerr := p.ensureRegistered(ctx, s)
			if rerr != nil {
				mu.Lock()
				if err == nil {
					err = fmt.Errorf("%s/%s: warming registration %d: %w", p.service, p.h.Name, s.index, rerr)
				}
				mu.Unlock()
			}
			if !detached {
				p.put(s, false)
			}
		}()
	}
	wg.Wait()
	p.started = true
	go p.janitor()
	return err
}

// lease takes a free registration, waiting at most LeaseTimeout (or
// until the pool closes), and makes sure it is registered and READY.
func (p *pool) lease(ctx context.Context) (*slot, error) {
	var s *slot
	waited := time.Now()
	if s = p.tryTake(); s == nil {
		t := time.NewTimer(p.h.LeaseTimeout.Std())
		defer t.Stop()
		select {
		case <-p.avail:
			s = p.take()
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
	// Busy from here: registering it for this invocation (a cold start,
	// a changed handler) is when invocations queue, and a saturation
	// alert must see it.
	s.publish(true)
	if s.regID != "" && s.digest != p.newestDigest() {
		// A later registration found the handler changed on disk (a
		// deploy, a .venv made): this worker runs the earlier version.
		// Without this, traffic that keeps it warm would keep both
		// versions serving side by side for good.
		p.log.Info().Str("run_uid", s.runUID).Msg("the handler changed since this registration (source or interpreter): registering the current version")
		// Not cut short by this invocation's end: the slot forgets the
		// ID, and a registration never unregistered would keep its worker
		// running unseen.
		p.unregister(context.WithoutCancel(ctx), s.runUID, s.regID, false)
		s.regID = ""
		s.attempt++
	}
	if detached, err := p.ensureRegistered(ctx, s); err != nil {
		if !detached {
			p.release(s)
		}
		return nil, err
	}
	return s, nil
}

// newestDigest is the digest of the latest registration made.
func (p *pool) newestDigest() string {
	p.freeMu.Lock()
	defer p.freeMu.Unlock()
	return p.newest
}

// reRegister registers s afresh, a registration the caller holds whose
// registration ID it cleared, as lease does for a slot it takes; on
// failure s is no longer the caller's (released, or left to a
// registration that outlives ctx), else it stays leased.
func (p *pool) reRegister(ctx context.Context, s *slot) error {
	detached, err := p.ensureRegistered(ctx, s)
	if err != nil && !detached {
		p.release(s)
	}
	return err
}

// release returns a leased registration to the pool, to be leased first.
func (p *pool) release(s *slot) { p.put(s, true) }

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
//
// The registration does not end with ctx: a worker whose initialization
// is under way when its caller gives up (an invocation cancelled, its
// stream closed, a shutdown) becomes READY in the runtime all the same,
// and a registration the pool does not record is one that neither
// idle_timeout nor close ever unregisters. So when ctx ends first,
// ensureRegistered returns at once with detached set, and the slot belongs
// to the registration until it ends (adopt): the caller must neither
// touch nor release s.
func (p *pool) ensureRegistered(ctx context.Context, s *slot) (detached bool, err error) {
	if s.regID != "" {
		return false, nil
	}
	if s.fatal != "" && p.now().Before(s.retryAt) {
		// Only the handler's files are compared here, not the whole
		// digest: that resolves the interpreter, a probe process when
		// its answer is not cached (a failed probe never is), and a fail
		// fast that starts a process on every lease made registrations
		// under load fail for longer still.
		if src, err := sourceSum(p.h); err != nil || src == s.source {
			return false, &Error{Class: s.failedClass(), Message: fmt.Sprintf("registration %s failed: %s (next retry in %s)", s.runUID, s.fatal, s.retryAt.Sub(p.now()).Round(time.Second))}
		}
		// The handler's files changed since its registration failed: the
		// backoff was for the code that failed, and a fix on disk is
		// registered now, not minutes later (markFailed has already moved
		// to a new attempt).
		p.log.Info().Str("run_uid", s.runUID).Msg("handler source changed since its registration failed; registering again at once")
		s.fatal, s.backoff, s.retryAt, s.invalid = "", 0, time.Time{}, false
	}
	s.source, _ = sourceSum(p.h)
	digest, derr := registrationDigest(p.h)
	if derr != nil {
		// The handler's source is missing or unreadable: an initialization
		// failure like an import error (a deploy may still be copying the
		// file), so the same rounds of backoff pass before it is permanent.
		p.tel.workerStartFailed()
		p.markFailed(s, derr.Error())
		return false, &Error{Class: s.failedClass(), Message: fmt.Sprintf("registration %s failed: %s", s.runUID, derr)}
	}
	if ctx.Err() != nil {
		return false, &Error{Class: ClassUnavailable, Message: "registration interrupted", Cause: ctx.Err()}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), registerTimeout)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- p.register(rctx, s, digest)
	}()
	select {
	case err := <-done:
		return false, err
	case <-ctx.Done():
		p.adopting.Add(1)
		p.adopts.Add(1)
		go func() {
			defer p.adopts.Done()
			p.adopt(s, done)
		}()
		return true, &Error{Class: ClassUnavailable, Message: "registration interrupted", Cause: ctx.Err()}
	}
}

// adopt ends, for a caller that gave up on it, the registration of s that
// done reports: whatever it became (READY, FAILED) is recorded in s, and
// s returned to the pool, where idle_timeout and close unregister it as
// any other. When the pool is closing by then, it is unregistered at once:
// close may have stopped waiting for it.
func (p *pool) adopt(s *slot, done <-chan error) {
	<-done
	p.adopting.Add(-1)
	p.put(s, false)
	select {
	case <-p.stop:
	default:
		return // close, when it comes, finds s free
	}
	if !p.takeSlot(s) {
		return // close (or a lease, returning it to close) has it
	}
	if s.regID != "" {
		p.unregister(context.Background(), s.runUID, s.regID, true)
		s.regID = ""
	}
	p.put(s, false)
}

// register registers s with digest, within ctx, and waits for it to be
// READY or FAILED.
func (p *pool) register(ctx context.Context, s *slot, digest string) error {
	// A digest or attempt conflict with what the runtime holds (an edited
	// source, a registration left by an earlier bridge process) is resolved
	// by moving to a newer attempt; bounded so a misbehaving server cannot
	// spin us.
	retriedFailed := false
	registering := time.Now()
	for tries := 0; ; tries++ {
		// The limits, a python interpreter and bash's choice of subshell
		// travel as metadata: the contract's request has no field for
		// them. So is the kind, which a server of another kind refuses.
		mdCtx := metadata.AppendToOutgoingContext(ctx, functionruntime.WorkerLimitsMetadata, p.h.Limits.Worker().Encode(),
			functionruntime.KindMetadata, p.h.Runtime)
		if interp := p.h.PythonInterpreter(); interp != "" {
			mdCtx = metadata.AppendToOutgoingContext(mdCtx, functionruntime.InterpreterMetadata, interp)
		}
		if p.h.BashInline() {
			mdCtx = metadata.AppendToOutgoingContext(mdCtx, functionruntime.SubshellMetadata, "false")
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
			s.digest = digest
			p.freeMu.Lock()
			p.newest = digest
			p.freeMu.Unlock()
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
		p.tel.workerStartFailed()
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

// waitAdopted waits, within ctx, until every registration its caller
// gave up on has ended and, when it became READY, been unregistered.
func (p *pool) waitAdopted(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		p.adopts.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s/%s: a registration still starting when closing ended", p.service, p.h.Name)
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
		// Each free slot in turn, taken by name and put back unused, so
		// the poll leaves the most recently used first (take).
		for _, s := range p.slots {
			if !p.takeSlot(s) {
				continue // leased, or owed to a waiting lease
			}
			if !p.check(s) {
				p.put(s, false)
			}
		}
	}
}

// check polls the status of s, which the caller holds, and does what it
// calls for. detached says a min_warm registration ended with the pool's
// close while under way and now holds s (ensureRegistered).
func (p *pool) check(s *slot) (detached bool) {
	if s.regID == "" {
		if s.index < p.h.MinWarm {
			// Within the backoff this fails fast, without registering,
			// unless the handler's files changed since it failed.
			rctx, rcancel := context.WithTimeout(p.stopCtx, 10*time.Second)
			defer rcancel()
			detached, _ = p.ensureRegistered(rctx, s)
		}
		return detached
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
	return false
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
		s := p.tryTake() // a free slot first: ctx may have ended already
		if s == nil {
			if back >= len(p.slots)-int(p.adopting.Load()) {
				// The rest are registrations still starting that their
				// callers gave up on (a stop during a stuck warm-up): they
				// serve no invocation, so close does not wait for them
				// (it used to, for all of the shutdown deadline); adopt
				// unregisters each once it ends, and waitAdopted waits.
				return nil
			}
			select {
			case <-p.avail:
				s = p.take()
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
