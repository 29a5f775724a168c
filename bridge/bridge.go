package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/discovery"
)

// Options are the bridge's process-level settings that are not part of the
// configuration file.
type Options struct {
	// Logger receives the bridge's logs; one line per invocation.
	Logger zerolog.Logger
	// AfterRunJournaled is the endpoint's test hook (restate.Config); the
	// crash test blocks here to kill the process between a journaled run
	// and the invocation's output.
	AfterRunJournaled func(invocationID, runName string)
	// Clients, when set for a runtime kind, is used instead of the embedded
	// or remote runtime the configuration names: tests and benchmarks plug
	// in-process fakes or instrumented clients here.
	Clients map[string]executorv1.FunctionRuntimeClient
	// Metrics, when set, records the bridge's metrics (bridge/telemetry);
	// Tracer, when set, makes a span per attempt and function execution.
	Metrics *telemetry.Metrics
	Tracer  trace.Tracer

	// carry is set by Live when it builds the bridge that replaces the one
	// serving: the pools and context endpoint it takes over instead of
	// creating them (reload.go).
	carry *carryOver
}

// Bridge is one configured fnbridge: a Restate endpoint whose handlers run
// through FunctionRuntime registration pools.
type Bridge struct {
	cfg      *Config
	log      zerolog.Logger
	endpoint *restate.Endpoint
	runtimes map[string]*runtimeConn
	pools    map[string]*pool // by "Service/handler"
	keyed    map[*pool]keyedHandler
	ctxEnd   *contextEndpoint // nil unless a handler is in steps mode
	// unobserve detaches the bridge from Options.Metrics.
	unobserve func()

	// instance is the identity in every run UID (instance.go).
	instance string
	// started and ready are the readiness state (health.go).
	started atomic.Bool
	ready   readiness

	closeOnce sync.Once
	closeErr  error
}

// New connects the runtimes the configuration uses and binds every handler
// on a Restate endpoint. Nothing is registered yet: Start does that for
// min_warm registrations, the rest happens lazily on first use.
func New(cfg *Config, opts Options) (*Bridge, error) {
	b := &Bridge{cfg: cfg, log: opts.Logger, runtimes: map[string]*runtimeConn{}, pools: map[string]*pool{}, keyed: map[*pool]keyedHandler{}}
	mode := restate.BidiStream
	if cfg.ProtocolMode == ModeRequestResponse {
		mode = restate.RequestResponse
	}
	b.endpoint = restate.NewEndpoint(restate.Config{
		ProtocolMode:             mode,
		StartTimeout:             cfg.StartTimeout.Std(),
		MaxConcurrentInvocations: cfg.MaxConcurrentInvocations,
		MaxJournalBytes:          int(cfg.MaxJournalBytes),
		IdentityKeys:             cfg.IdentityKeys,
		Logger:                   opts.Logger,
		AfterRunJournaled:        opts.AfterRunJournaled,
		OnRefused:                opts.Metrics.Refused,
	})
	if err := b.endpoint.Err(); err != nil {
		return nil, err
	}
	b.endpoint.SetReadiness(b.Ready)
	// A Config built in code, not loaded, may leave the identity out.
	instance := cfg.Instance
	if instance == "" {
		instance = DefaultInstance()
	}
	b.instance = instance
	unimplemented := map[string]*sync.Once{}
	services, handlers := serviceTypes(cfg), serviceHandlers(cfg)
	for si := range cfg.Services {
		svc := &cfg.Services[si]
		rs := restate.Service{Name: svc.Name, Type: svc.restateType(), Documentation: svc.Documentation, Metadata: svc.Metadata,
			LazyState: svc.LazyState}
		for hi := range svc.Handlers {
			h := &svc.Handlers[hi]
			rc, ok := b.runtimes[h.Runtime]
			if !ok {
				var err error
				if c, ok := opts.Clients[h.Runtime]; ok {
					rc = &runtimeConn{kind: h.Runtime, client: c}
				} else if cfg.manifestOnly {
					// Nothing is invoked: no runtime to start or dial.
					rc = &runtimeConn{kind: h.Runtime}
				} else if rc, err = dialRuntime(h.Runtime, cfg.Runtimes[h.Runtime], opts.Logger); err != nil {
					b.closeRuntimes(context.Background())
					return nil, err
				}
				b.runtimes[h.Runtime] = rc
				unimplemented[h.Runtime] = &sync.Once{}
			}
			p := opts.carry.pool(svc.Name, h.Name)
			if p == nil {
				p = newPool(instance, svc.Name, h, rc.client, opts.Logger, unimplemented[h.Runtime])
				p.tel = newPoolTelemetry(opts, svc.Name, h)
				files, err := h.SourceFiles()
				if err == nil && len(files) > 0 {
					_, err = os.Stat(files[0]) // the file the worker loads
				}
				switch run := cfg.oneOffRun; {
				case errors.Is(err, functionruntime.ErrTooManySources):
					opts.Logger.Warn().Str("service", svc.Name).Str("handler", h.Name).Msg(err.Error())
				case err != nil && (run == "" || run == svc.Name+"/"+h.Name):
					// A typo in the handler, or code not deployed: said now,
					// not at the first invocation. Not fatal: the other
					// handlers serve, and the code may yet appear (bridge
					// dev). A one-off run speaks of the handler it runs only.
					opts.Logger.Warn().Str("service", svc.Name).Str("handler", h.Name).Err(err).
						Msg("the handler's code cannot be read: its invocations fail until it can")
				}
				if run := cfg.oneOffRun; rc.isEmbedded() && (run == "" || run == svc.Name+"/"+h.Name) {
					// The same for the interpreter an embedded runtime
					// starts (a remote one's host is not this one).
					if err := interpreterProblem(h); err != nil {
						opts.Logger.Warn().Str("service", svc.Name).Str("handler", h.Name).Err(err).
							Msg("the handler's interpreter cannot be started: its invocations fail until it can")
					}
				}
			}
			b.pools[svc.Name+"/"+h.Name] = p
			b.keyed[p] = keyedHandlerOf(svc, h, services, handlers)
			rh := restateHandler(b, p)
			rh.Type = svc.HandlerType(h)
			rs.Handlers = append(rs.Handlers, rh)
		}
		if err := b.endpoint.Bind(rs); err != nil {
			b.closeRuntimes(context.Background())
			return nil, fmt.Errorf("services[%d]: %w", si, err)
		}
	}
	if b.ctxEnd = opts.carry.contextEndpoint(); b.ctxEnd == nil {
		if err := b.startContext(); err != nil {
			b.closeRuntimes(context.Background())
			return nil, err
		}
	}
	b.unobserve = opts.Metrics.AddSource(bridgeSource{b})
	return b, nil
}

// restateHandler describes one configured handler to the endpoint; its
// timeouts, retry policy and documentation flow into the manifest.
func restateHandler(b *Bridge, p *pool) restate.Handler {
	h := p.h
	rh := restate.Handler{
		Name:              h.Name,
		Fn:                b.handlerFunc(p),
		Documentation:     h.Documentation,
		Metadata:          h.Metadata,
		InputContentType:  h.InputContentType,
		OutputContentType: h.OutputContentType,
		InactivityTimeout: h.InactivityTimeout.Std(),
		AbortTimeout:      h.AbortTimeout.Std(),

		JournalRetention:            h.JournalRetention.Std(),
		IdempotencyRetention:        h.IdempotencyRetention.Std(),
		WorkflowCompletionRetention: h.WorkflowCompletionRetention.Std(),
		IngressPrivate:              h.IngressPrivate,
	}
	if h.inactivityDerived && b.cfg.ProtocolMode == ModeRequestResponse {
		// Restate applies no inactivity timeout to a request/response
		// deployment and warns (RT0021) about one it is given; one the
		// file wrote is still sent, as written.
		rh.InactivityTimeout = 0
	}
	if h.StepsMode() {
		rh.Fn = b.stepsHandlerFunc(p)
		// A cancelled invocation's waits fail with 409 in the function,
		// which may compensate; the function's end is the output.
		rh.DeliverCancel = true
	}
	if rp := h.RetryPolicy; rp != nil {
		rh.RetryPolicy = &discovery.RetryPolicy{}
		if rp.InitialInterval > 0 {
			v := rp.InitialInterval.Std()
			rh.RetryPolicy.InitialInterval = &v
		}
		if rp.MaxInterval > 0 {
			v := rp.MaxInterval.Std()
			rh.RetryPolicy.MaxInterval = &v
		}
		if rp.ExponentiationFactor != nil {
			v := *rp.ExponentiationFactor
			rh.RetryPolicy.ExponentiationFactor = &v
		}
		if rp.MaxAttempts != nil {
			v := *rp.MaxAttempts
			rh.RetryPolicy.MaxAttempts = &v
		}
		switch rp.OnMaxAttempts {
		case "pause":
			rh.RetryPolicy.OnMaxAttempts = "PAUSE"
		case "kill":
			rh.RetryPolicy.OnMaxAttempts = "KILL"
		}
	}
	return rh
}

// Start registers the min_warm registrations and starts each pool's
// status poll. A handler whose registrations fail is logged and served
// all the same (its invocations fail with the reason); only ctx ending
// stops Start with an error, after which the caller closes.
//
// The handlers warm side by side (at most reloadParallelism registrations
// at once in the process): the listener opens after the slowest import,
// not after the sum of them.
func (b *Bridge) Start(ctx context.Context) error {
	for _, err := range b.eachPool(func(p *pool) error { return p.start(ctx) }) {
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return err
		}
		// One handler that cannot register (a missing file, a syntax
		// error, its runtime not up yet) stops none of the others: its
		// invocations fail with the reason, and it is warmed again.
		b.log.Error().Err(err).Msg("a handler's min_warm registrations failed: its invocations fail until it is fixed; the other handlers serve")
	}
	b.started.Store(true)
	return nil
}

// eachPool runs fn on every pool at once and returns their errors.
func (b *Bridge) eachPool(fn func(*pool) error) []error {
	keys := b.poolKeys()
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(b.pools[key])
		}()
	}
	wg.Wait()
	return errs
}

// Handler is the Restate endpoint's HTTP handler.
func (b *Bridge) Handler() http.Handler { return b.endpoint }

// Manifest is the discovery manifest the endpoint serves.
func (b *Bridge) Manifest() discovery.Manifest { return b.endpoint.Manifest() }

func (b *Bridge) poolKeys() []string {
	keys := make([]string, 0, len(b.pools))
	for k := range b.pools {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Close unregisters every registration (waiting for leased ones until ctx
// ends) and stops the runtimes. Only the first call does the work; later
// calls return its result at once (the pools are drained by then, so a
// second pass would only wait for ctx to end).
func (b *Bridge) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.unobserve()
		// All pools at once: each unregisters within what is left of ctx,
		// so one runtime that does not answer cannot use it all up before
		// the next pool starts.
		keys := b.poolKeys()
		errs := b.eachPool(func(p *pool) error { return p.close(ctx) })
		errs = append(errs, b.closeContext(ctx))
		// Registrations still starting that their callers gave up on: a
		// remote runtime keeps one unless it is unregistered once it ends,
		// so wait for those (within ctx); an embedded runtime's shutdown
		// ends its own at once, so wait after it.
		for _, key := range keys {
			if p := b.pools[key]; !b.runtimes[p.h.Runtime].isEmbedded() {
				errs = append(errs, p.waitAdopted(ctx))
			}
		}
		errs = append(errs, b.closeRuntimes(ctx))
		for _, key := range keys {
			errs = append(errs, b.pools[key].waitAdopted(ctx))
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

func (b *Bridge) closeRuntimes(ctx context.Context) error {
	var errs []error
	for _, rc := range b.runtimes {
		errs = append(errs, rc.close(ctx))
	}
	return errors.Join(errs...)
}
