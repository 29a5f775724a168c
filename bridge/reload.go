package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate/discovery"
)

// Live is a bridge that can be reloaded while it serves (`bridge dev`).
//
// Each reload builds a successor Bridge from the new configuration and
// swaps it in for new requests. Requests already in flight finish on the
// bridge that accepted them: a handler whose code or settings changed gets
// a new pool, with run UIDs of its own, so its new registrations never
// supersede the old ones, and the old pool is closed once its leased
// registrations come back. Handlers that did not change keep their pool,
// registrations and warm workers. The runtimes and the context endpoint
// are shared by every generation and closed with the Live.
type Live struct {
	opts Options

	cur     atomic.Pointer[Bridge]
	handler http.Handler

	// genMu guards curGen's swap and replaced, so InFlight and Drain see
	// each generation once. curGen is cur's generation, which the handler
	// serves with; replaced are those a reload replaced that still serve
	// requests or have pools to close (retire).
	genMu    sync.Mutex
	curGen   atomic.Pointer[generation]
	replaced map[*generation]struct{}

	mu      sync.Mutex // one Reload or Close at a time; guards what follows
	desired *Config    // the configuration last applied (the file as read)
	// versions is what each serving pool runs; a pool is kept while the
	// configuration and sources still read the same.
	versions map[*pool]handlerVersion
	// runtimes are every runtime connection any generation used, by kind.
	runtimes      map[string]*runtimeConn
	unimplemented map[string]*sync.Once
	gen           int
	closed        bool

	// retiring counts the replaced generations still winding down
	// (retire); drainCtx ends their wait when the Live closes.
	retiring    sync.WaitGroup
	drainCtx    context.Context
	cancelDrain context.CancelFunc
}

// generation is one bridge a Live has served with, and the HTTP requests
// it serves, so that a replaced one is known to serve no more.
type generation struct {
	b        *Bridge
	requests atomic.Int64
	stopped  atomic.Bool
	idleOnce sync.Once
	idle     chan struct{} // closed once stopped and serving no request
}

func newGeneration(b *Bridge) *generation { return &generation{b: b, idle: make(chan struct{})} }

// enter counts a request in on the current generation. One that finds the
// generation replaced after counting itself in moves to the next, so a
// request stays only on a generation it counted itself in on before the
// swap, and the replaced generation's idle waits for it.
func (l *Live) enter() *generation {
	for {
		g := l.curGen.Load()
		g.requests.Add(1)
		if l.curGen.Load() == g {
			return g
		}
		g.leave()
	}
}

// leave counts a request out.
func (g *generation) leave() {
	if g.requests.Add(-1) == 0 && g.stopped.Load() {
		g.idleOnce.Do(func() { close(g.idle) })
	}
}

// stop marks g replaced (it gets no new request): idle closes once it
// serves none.
func (g *generation) stop() {
	g.stopped.Store(true)
	if g.requests.Load() == 0 {
		g.idleOnce.Do(func() { close(g.idle) })
	}
}

// handlerVersion is what a handler's registrations run: its settings and
// the digest of its sources ("" when they could not be read).
type handlerVersion struct {
	h      HandlerConfig
	digest string
}

func versionOf(h *HandlerConfig) handlerVersion {
	d, _ := registrationDigest(h) // unreadable sources: registering says why
	return handlerVersion{h: *h, digest: d}
}

func (v handlerVersion) same(o handlerVersion) bool {
	return v.digest == o.digest && reflect.DeepEqual(v.h, o.h)
}

// carryOver is what a successor bridge takes over from the bridge it
// replaces (Options.carry).
type carryOver struct {
	pools  map[string]*pool // by "Service/handler"
	ctxEnd *contextEndpoint
}

func (c *carryOver) pool(service, handler string) *pool {
	if c == nil {
		return nil
	}
	return c.pools[service+"/"+handler]
}

func (c *carryOver) contextEndpoint() *contextEndpoint {
	if c == nil {
		return nil
	}
	return c.ctxEnd
}

// NewLive builds the first bridge of cfg (New) as a Live.
func NewLive(cfg *Config, opts Options) (*Live, error) {
	b, err := New(cfg, opts)
	if err != nil {
		return nil, err
	}
	l := &Live{
		opts:          opts,
		desired:       cfg,
		versions:      map[*pool]handlerVersion{},
		runtimes:      maps.Clone(b.runtimes), // b reads its own set (readiness) while a reload adds kinds here
		unimplemented: map[string]*sync.Once{},
		replaced:      map[*generation]struct{}{},
	}
	for _, p := range b.pools {
		l.versions[p] = versionOf(p.h)
	}
	l.drainCtx, l.cancelDrain = context.WithCancel(context.Background())
	l.cur.Store(b)
	l.curGen.Store(newGeneration(b))
	l.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := l.enter()
		defer g.leave()
		g.b.Handler().ServeHTTP(w, r)
	})
	return l, nil
}

// Start starts the first bridge (Bridge.Start).
func (l *Live) Start(ctx context.Context) error { return l.cur.Load().Start(ctx) }

// Handler serves every request with the bridge current when it arrives.
func (l *Live) Handler() http.Handler { return l.handler }

// Manifest is the discovery manifest the current bridge serves.
func (l *Live) Manifest() discovery.Manifest { return l.cur.Load().Manifest() }

// Config is the configuration last applied: what Reload compares a newly
// read one with.
func (l *Live) Config() *Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.desired
}

// ReloadReport says what one Reload changed. Handlers are named
// "Service/handler", sorted.
type ReloadReport struct {
	// Reloaded handlers now run a new version (sources or settings
	// changed) on new registrations.
	Reloaded []string
	// Added handlers are new in the configuration and now served.
	Added []string
	// Removed handlers are no longer in the configuration nor served.
	Removed []string
	// Failed maps each handler whose new version did not register to the
	// error; its previous version, if any, keeps serving. Such a version
	// is tried again by every reload until it registers.
	Failed map[string]string
	// ManifestChanged says the manifest served now differs from the one
	// served before.
	ManifestChanged bool
	// Endpoint names the endpoint settings changed (identity_keys,
	// allow_unauthenticated, protocol_mode, the bounds), which apply to
	// new requests.
	Endpoint []string
}

// Changed reports whether the reload changed what is served.
func (r *ReloadReport) Changed() bool {
	return len(r.Reloaded)+len(r.Added)+len(r.Removed)+len(r.Endpoint) > 0 || r.ManifestChanged
}

// Err joins the failures of the handlers whose new version did not
// register, nil when there are none.
func (r *ReloadReport) Err() error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(r.Failed)) {
		errs = append(errs, fmt.Errorf("%s: %s", k, r.Failed[k]))
	}
	return errors.Join(errs...)
}

// RestartRequiredError refuses a configuration that changes settings a
// running bridge cannot change.
type RestartRequiredError struct {
	// Fields are the changed top-level fields, as the file spells them.
	Fields []string
}

func (e *RestartRequiredError) Error() string {
	return strings.Join(e.Fields, ", ") + " changed, which takes a restart to apply"
}

// fieldCheck names a top-level setting, as the file spells it, and says
// whether two configurations differ in it.
type fieldCheck struct {
	name    string
	differs func(a, b *Config) bool
}

// changedFields lists, in the order of checks, the names of the settings
// in which old and cfg differ.
func changedFields(checks []fieldCheck, old, cfg *Config) []string {
	var fields []string
	for _, c := range checks {
		if c.differs(old, cfg) {
			fields = append(fields, c.name)
		}
	}
	return fields
}

// restartOnlyChecks are the settings of the process rather than of its
// handlers: the listener, the runtime connections, the context endpoint,
// the shutdown deadline, the instance identity (every run UID) and the
// telemetry (the metrics listener, the span exporter) are set up once, at
// start.
var restartOnlyChecks = []fieldCheck{
	{"listen", func(a, b *Config) bool { return a.Listen != b.Listen }},
	{"runtimes", func(a, b *Config) bool { return !maps.Equal(a.Runtimes, b.Runtimes) }},
	{"shared_runtimes", func(a, b *Config) bool { return !slices.Equal(a.SharedRuntimes, b.SharedRuntimes) }},
	{"context_listen", func(a, b *Config) bool { return a.ContextListen != b.ContextListen }},
	{"shutdown_timeout", func(a, b *Config) bool { return a.ShutdownTimeout != b.ShutdownTimeout }},
	{"instance", func(a, b *Config) bool { return a.Instance != b.Instance }},
	{"metrics_listen", func(a, b *Config) bool { return a.MetricsListen != b.MetricsListen }},
	{"tracing", func(a, b *Config) bool {
		o, n := a.Tracing, b.Tracing
		return o.OTLPEndpoint != n.OTLPEndpoint || o.ServiceName != n.ServiceName || !maps.Equal(o.Headers, n.Headers)
	}},
}

// endpointChecks are the endpoint settings: they apply to new requests,
// and a reload that changes only them still changed what is served
// (request identity above all).
var endpointChecks = []fieldCheck{
	{"identity_keys", func(a, b *Config) bool { return !slices.Equal(a.IdentityKeys, b.IdentityKeys) }},
	{"allow_unauthenticated", func(a, b *Config) bool { return a.AllowUnauthenticated != b.AllowUnauthenticated }},
	{"protocol_mode", func(a, b *Config) bool { return a.ProtocolMode != b.ProtocolMode }},
	{"start_timeout", func(a, b *Config) bool { return a.StartTimeout != b.StartTimeout }},
	{"max_concurrent_invocations", func(a, b *Config) bool { return a.MaxConcurrentInvocations != b.MaxConcurrentInvocations }},
	{"max_journal_bytes", func(a, b *Config) bool { return a.MaxJournalBytes != b.MaxJournalBytes }},
}

// restartOnly lists the process settings (restartOnlyChecks) cfg changes.
func restartOnly(old, cfg *Config) []string { return changedFields(restartOnlyChecks, old, cfg) }

// endpointChanges lists the endpoint settings (endpointChecks) cfg changes.
func endpointChanges(old, cfg *Config) []string { return changedFields(endpointChecks, old, cfg) }

// Reload applies cfg (already loaded and checked, as for serve): each
// handler whose settings or source files changed is registered anew (all
// of them side by side) and, once every such handler has a READY
// registration of its new version or has failed, served by it; handlers
// new in cfg are added and those gone from it removed. A handler whose new
// version fails to register (a syntax error, a missing module) keeps its
// previous version, which is reported in ReloadReport.Failed. Endpoint
// settings (identity_keys, protocol_mode, bounds) take effect for new
// requests. A change of a process setting is refused as a whole
// (*RestartRequiredError).
func (l *Live) Reload(ctx context.Context, cfg *Config) (*ReloadReport, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("bridge: reload after close")
	}
	if fields := restartOnly(l.desired, cfg); len(fields) > 0 {
		return nil, &RestartRequiredError{Fields: fields}
	}
	old := l.cur.Load()
	rep := &ReloadReport{Failed: map[string]string{}, Endpoint: endpointChanges(l.desired, cfg)}
	carry := &carryOver{pools: map[string]*pool{}, ctxEnd: old.ctxEnd}
	var fresh []*pool
	// served is cfg as it will be served: a handler whose new version
	// failed keeps the settings of its previous version, or is left out.
	served := *cfg
	served.Services = nil
	l.gen++
	versions := l.newVersions(ctx, cfg, old)
	for si := range cfg.Services {
		svc := &cfg.Services[si]
		ss := *svc
		ss.Handlers = nil
		for hi := range svc.Handlers {
			h := &svc.Handlers[hi]
			key := svc.Name + "/" + h.Name
			cur := old.pools[key]
			keep := func() {
				if cur != nil {
					carry.pools[key] = cur
					ss.Handlers = append(ss.Handlers, *cur.h)
				}
			}
			nv, changed := versions[key]
			if !changed {
				keep()
				continue
			}
			p, err, want := nv.p, nv.err, nv.version
			if err != nil {
				rep.Failed[key] = err.Error()
				keep()
				continue
			}
			fresh = append(fresh, p)
			l.versions[p] = want
			carry.pools[key] = p
			ss.Handlers = append(ss.Handlers, *p.h)
			if cur != nil {
				rep.Reloaded = append(rep.Reloaded, key)
			} else {
				rep.Added = append(rep.Added, key)
			}
		}
		if len(ss.Handlers) > 0 {
			served.Services = append(served.Services, ss)
		}
	}
	discard := func() {
		for _, p := range fresh {
			delete(l.versions, p)
			discardPool(p)
		}
	}
	if ctx.Err() != nil {
		discard()
		return nil, ctx.Err()
	}
	clients := map[string]executorv1.FunctionRuntimeClient{}
	for kind, rc := range l.runtimes {
		clients[kind] = rc.client
	}
	nb, err := New(&served, Options{Logger: l.opts.Logger, AfterRunJournaled: l.opts.AfterRunJournaled, Clients: clients,
		Metrics: l.opts.Metrics, Tracer: l.opts.Tracer, carry: carry})
	if err != nil {
		discard()
		return nil, fmt.Errorf("reload: %w", err)
	}
	// New wrapped the shared connections as injected clients; the Live's
	// own set, which Close shuts down, stays the one that owns them.
	// A copy: the serving generation reads its set (readiness probes)
	// while a later reload adds a kind to the Live's.
	nb.runtimes = maps.Clone(l.runtimes)
	nb.started.Store(true) // its pools are carried over or started candidates
	rep.ManifestChanged = !sameManifest(old.Manifest(), nb.Manifest())
	l.genMu.Lock()
	l.cur.Store(nb)
	prev := l.curGen.Swap(newGeneration(nb))
	l.replaced[prev] = struct{}{}
	l.genMu.Unlock()
	l.desired = cfg
	var gone []*pool
	for key, p := range old.pools {
		if carry.pools[key] == p {
			continue
		}
		if !cfg.hasHandler(key) {
			rep.Removed = append(rep.Removed, key)
		}
		delete(l.versions, p)
		gone = append(gone, p)
	}
	l.retire(prev, gone)
	for _, s := range [][]string{rep.Reloaded, rep.Added, rep.Removed} {
		sort.Strings(s)
	}
	return rep, nil
}

// newVersion is the candidate pool of one changed handler, or why it
// could not be built.
type newVersion struct {
	version handlerVersion // what p runs, read before it registered
	p       *pool
	err     error
}

// reloadParallelism bounds how many new versions register at once: each
// starts a worker that imports or sources its handler.
const reloadParallelism = 8

// newVersions registers the new version of every handler of cfg whose
// settings or sources differ from what old serves, side by side (up to
// reloadParallelism at once): a reload
// goes live as a whole (handlers edited together switch together), so it
// waits for the slowest registration, not for the sum of them. The map is
// keyed "Service/handler"; an unchanged handler has no entry.
func (l *Live) newVersions(ctx context.Context, cfg *Config, old *Bridge) map[string]*newVersion {
	out := map[string]*newVersion{}
	type job struct {
		v       *newVersion
		service string
		h       *HandlerConfig
		rc      *runtimeConn
	}
	var jobs []job
	for si := range cfg.Services {
		svc := &cfg.Services[si]
		for hi := range svc.Handlers {
			h := &svc.Handlers[hi]
			key := svc.Name + "/" + h.Name
			want := versionOf(h)
			if cur := old.pools[key]; cur != nil && l.versions[cur].same(want) {
				continue
			}
			v := &newVersion{version: want}
			out[key] = v
			// Connected before any registration starts: runtime fills the
			// Live's maps, which the registrations only read.
			var rc *runtimeConn
			if rc, v.err = l.runtime(h.Runtime); v.err == nil {
				jobs = append(jobs, job{v, svc.Name, h, rc})
			}
		}
	}
	sem := make(chan struct{}, reloadParallelism)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			j.v.p, j.v.err = l.candidate(ctx, j.service, j.h, j.rc)
		}()
	}
	wg.Wait()
	return out
}

// hasHandler reports whether c configures handler key ("Service/handler").
func (c *Config) hasHandler(key string) bool {
	for _, svc := range c.Services {
		for _, h := range svc.Handlers {
			if svc.Name+"/"+h.Name == key {
				return true
			}
		}
	}
	return false
}

// candidate builds and starts the pool of a new version of a handler, on
// its runtime's connection rc, once one of its registrations is READY. Its run UIDs carry the generation,
// so registering it never supersedes (and so never stops) a registration
// of the version still serving.
func (l *Live) candidate(ctx context.Context, service string, h *HandlerConfig, rc *runtimeConn) (*pool, error) {
	hc := *h
	p := newPool(l.cur.Load().instance, service, &hc, rc.client, l.opts.Logger, l.unimplemented[h.Runtime])
	p.tel = newPoolTelemetry(l.opts, service, &hc)
	for _, s := range p.slots {
		// Fitted again: a run UID already at the bound would pass it.
		s.runUID = fitDigest(fmt.Sprintf("%s-r%d", s.runUID, l.gen), functionruntime.MaxRunUIDBytes, 16)
	}
	// The pool's own lines about a failed first registration would
	// describe a pool that is discarded; the reload reports it instead.
	log := p.log
	p.log = zerolog.Nop()
	// The slot it warms is the first the new version leases (take), and
	// release reports it warm at once, not from the first status poll.
	var fatal string
	<-p.avail
	s := p.take()
	detached, err := p.ensureRegistered(ctx, s)
	if !detached { // else the registration holds s, and may log: the pool is discarded
		fatal = s.fatal
		p.release(s)
		p.log = log
	}
	if err == nil {
		err = p.start(ctx)
	}
	if err != nil {
		discardPool(p)
		// Say what is wrong with the version (the runtime's fatal error,
		// a missing module), not which attempt of which slot failed.
		var e *Error
		switch {
		case fatal != "":
			err = errors.New(fatal)
		case errors.As(err, &e) && e.Cause == nil:
			err = errors.New(e.Message)
		}
		return nil, err
	}
	return p, nil
}

// discardPool closes a candidate pool nothing has leased, whatever became
// of the reload's context: its registrations must not outlive it, nor its
// series a handler that is not served.
func discardPool(p *pool) {
	ctx, cancel := context.WithTimeout(context.Background(), unregisterDrain+10*time.Second)
	defer cancel()
	_ = p.close(ctx)
	p.tel.release()
}

// runtime returns the connection of a runtime kind, connecting it the
// first time a generation needs it (as New does).
func (l *Live) runtime(kind string) (*runtimeConn, error) {
	if _, ok := l.unimplemented[kind]; !ok {
		l.unimplemented[kind] = &sync.Once{}
	}
	if rc, ok := l.runtimes[kind]; ok {
		return rc, nil
	}
	var rc *runtimeConn
	if c, ok := l.opts.Clients[kind]; ok {
		rc = &runtimeConn{kind: kind, client: c}
	} else {
		var err error
		if rc, err = dialRuntime(kind, l.desired.Runtimes[kind], l.opts.Logger); err != nil {
			return nil, err
		}
	}
	l.runtimes[kind] = rc
	return rc, nil
}

// retire winds down g, which a reload replaced. Its pools the successor
// did not take over close once the invocations leasing their
// registrations have finished; until each has, and while g still serves
// requests, the gauges count what g has left (replacedSource: its streams,
// those pools' registrations) but not the pools the successor counts. All
// is bounded by the Live's Close.
func (l *Live) retire(g *generation, pools []*pool) {
	src := &replacedSource{b: g.b, pools: slices.Clone(pools)}
	remove := l.opts.Metrics.AddSource(src)
	g.b.unobserve()
	g.stop()
	l.retiring.Add(1)
	go func() {
		defer l.retiring.Done()
		var wg sync.WaitGroup
		for _, p := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.close(l.drainCtx); err != nil {
					p.log.Warn().Err(err).Msg("replaced registrations not drained")
				}
				src.closed(p)
				p.tel.release() // a handler no pool serves leaves /metrics
			}()
		}
		wg.Wait()
		select {
		case <-g.idle:
		case <-l.drainCtx.Done():
		}
		remove()
		l.genMu.Lock()
		delete(l.replaced, g)
		l.genMu.Unlock()
	}()
}

// serving is the bridge of every generation that may have streams in
// flight: the current one first, then those replaced still winding down.
func (l *Live) serving() []*Bridge {
	l.genMu.Lock()
	defer l.genMu.Unlock()
	out := []*Bridge{l.curGen.Load().b}
	for g := range l.replaced {
		out = append(out, g.b)
	}
	return out
}

// sameManifest compares manifests as restate-server would read them.
func sameManifest(a, b discovery.Manifest) bool {
	ea, errA := discovery.Encode(a, discovery.MaxVersion)
	eb, errB := discovery.Encode(b, discovery.MaxVersion)
	return errA == nil && errB == nil && bytes.Equal(ea, eb)
}

// Close waits (until ctx ends) for replaced registrations to drain and
// replaced generations' requests to end, then closes the current bridge,
// which unregisters its registrations and stops the context endpoint and
// every runtime.
func (l *Live) Close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	drained := make(chan struct{})
	go func() { l.retiring.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-ctx.Done():
		l.cancelDrain()
		<-drained
	}
	l.cancelDrain()
	cur := l.cur.Load()
	err := cur.Close(ctx)
	// A kind that a reload connected but did not serve (it failed) is in
	// the Live's set only: closed here.
	for kind, rc := range l.runtimes {
		if cur.runtimes[kind] != rc {
			err = errors.Join(err, rc.close(ctx))
		}
	}
	return err
}
