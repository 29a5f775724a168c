package functionruntime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/status"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// RegistrationIDPrefix starts every registration ID this server issues. The
// rest of the ID is a ULID; callers must treat the whole ID as opaque.
const RegistrationIDPrefix = "reg_"

// Options configures a Server.
type Options struct {
	// Adapter runs the workers. Required: one server serves one runtime
	// kind, because RegisterFunctionRequest names no runtime.
	Adapter Adapter
	// Logger receives the server's structured logs. Every line about a
	// registration carries run_uid, and lines about one invocation carry
	// invocation_id. The server adds no runtime field: a caller running
	// several servers adds its own. The zero value discards logs.
	Logger zerolog.Logger
	// Limits bounds requests and results; zero fields take their defaults.
	Limits Limits
	// Now is the clock for last_activity_unix_nano and for the orphan
	// timeout; nil means time.Now.
	Now func() time.Time
	// OrphanGrace, when positive, has the server unregister a
	// registration whose caller is gone: nothing in flight, and no
	// activity (last_activity_unix_nano) nor FunctionStatus call naming
	// it for its idle_timeout_seconds plus OrphanGrace (see ReapOrphans).
	// Zero, right for a server whose caller lives in the same process,
	// never does; Shutdown stops the sweeps.
	OrphanGrace time.Duration
}

// Server implements executorv1.FunctionRuntimeServer for one Adapter. It
// owns the registration table: one current registration per Run UID, with
// its state, worker, in-flight invocation and activity time.
type Server struct {
	executorv1.UnimplementedFunctionRuntimeServer

	adapter Adapter
	log     zerolog.Logger
	limits  Limits
	now     func() time.Time

	mu      sync.Mutex
	regs    map[string]*registration // by Run UID; guarded by mu
	closing bool                     // Shutdown started; guarded by mu

	orphans orphanReaper
}

var _ executorv1.FunctionRuntimeServer = (*Server)(nil)

// NewServer returns a Server with no registrations. It panics when
// opts.Adapter is nil, a programming error no request could recover from.
func NewServer(opts Options) *Server {
	if opts.Adapter == nil {
		panic("functionruntime: Options.Adapter is required")
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &Server{
		adapter: opts.Adapter,
		log:     opts.Logger,
		limits:  opts.Limits.withDefaults(),
		now:     now,
		regs:    make(map[string]*registration),
	}
	s.startOrphanReaper(opts.OrphanGrace)
	return s
}

// Kind is the runtime kind of the server's adapter.
func (s *Server) Kind() string { return s.adapter.Kind() }

// Limits returns the effective limits, defaults filled in.
func (s *Server) Limits() Limits { return s.limits }

// FunctionStatus reads local state only. READY and FAILED registrations are
// answered with their state (FAILED with its fatal_error); NotFound means no
// registration has the Run UID; FailedPrecondition means the ID is stale,
// or the registration is draining or not yet ready.
func (s *Server) FunctionStatus(ctx context.Context, req *executorv1.FunctionStatusRequest) (*executorv1.FunctionStatusResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextStatus(err)
	}
	ref := req.GetRegistration()
	if err := checkRegistrationRef(ref); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	reg, err := s.lookupLocked(ref)
	if err != nil {
		return nil, err
	}
	s.contactLocked(reg)
	switch reg.state {
	case executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
		executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED:
	default:
		return nil, reg.notUsableLocked()
	}
	resp := &executorv1.FunctionStatusResponse{
		Registration: reg.ref(),
		State:        reg.state,
		FatalError:   reg.fatalError,
	}
	if reg.active != nil {
		resp.InFlight = 1
	}
	if !reg.lastActivity.IsZero() {
		resp.LastActivityUnixNano = reg.lastActivity.UnixNano()
	}
	return resp, nil
}

// Shutdown stops the server: new registrations are refused with
// Unavailable, every registration drains (in-flight invocations may finish
// until ctx ends, then they are cancelled, also those of registrations an
// Unregister was already draining with a longer timeout), every worker is
// closed and all state is removed. It returns when every worker is closed;
// that wait is bounded by ctx plus the adapters' kill grace. The error
// joins the workers' Close errors; it is nil when every worker closed
// cleanly.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	var all, owned, others []*registration
	for _, reg := range s.regs {
		all = append(all, reg)
		if reg.beginTeardownLocked(time.Time{}, "") {
			owned = append(owned, reg)
		} else {
			others = append(others, reg)
		}
	}
	s.mu.Unlock()
	// When ctx ends every drain is cut short, those an Unregister (or a
	// superseding registration) began before the shutdown too.
	stopCut := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		now := time.Now()
		for _, reg := range all {
			reg.limitDrainLocked(now, "server shutting down")
		}
	})
	defer stopCut()

	var wg sync.WaitGroup
	errs := make([]error, len(owned))
	for i, reg := range owned {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.teardown(reg, goneCause("server shutting down"), ctx)
		}()
	}
	wg.Wait()
	for _, reg := range others {
		<-reg.removed
	}
	s.stopOrphanReaper()
	s.log.Info().Int("registrations", len(owned)+len(others)).Msg("function runtime server shut down")
	return errors.Join(errs...)
}

// newRegistrationID returns an opaque, unique, server-generated ID.
func newRegistrationID() string { return RegistrationIDPrefix + ulid.Make().String() }

// newInvocationID returns the ID used when the caller supplies none.
func newInvocationID() string { return ulid.Make().String() }

// contextStatus maps a context error to the gRPC status a network client
// would see.
func contextStatus(err error) error {
	return status.FromContextError(err).Err()
}
