package telemetry

import (
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fnbridge/fnbridge/restate"
)

// Outcome is how one invocation attempt ended: the outcome label of
// fnbridge_invocations_total. The README defines each.
type Outcome uint8

// The outcomes, in the order they are exposed.
const (
	// OutcomeOK: the function ran in this attempt and the invocation
	// completed with its output.
	OutcomeOK Outcome = iota
	// OutcomeReplayed: the journal already held the function's result, so
	// the attempt answered with it without running the function.
	OutcomeReplayed
	// OutcomeTerminalFailure: the attempt ended the invocation with a
	// terminal failure produced in this attempt.
	OutcomeTerminalFailure
	// OutcomeRetryableFailure: the attempt failed and Restate retries it.
	OutcomeRetryableFailure
	// OutcomeCancelled: Restate cancelled the invocation (409).
	OutcomeCancelled
	// OutcomeSuspended: the attempt suspended; Restate resumes the
	// invocation in a later attempt.
	OutcomeSuspended
	// OutcomePaused: the attempt failed in a way only an operator can fix
	// and asked Restate to pause the invocation (v7) or retry it slowly.
	OutcomePaused
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "replayed", "terminal_failure", "retryable_failure", "cancelled", "suspended", "paused"}

// String is the label value.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes lists every outcome, for tests and documentation.
func Outcomes() []Outcome {
	out := make([]Outcome, numOutcomes)
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}

// RegistrationState is what one registration slot of a handler is doing:
// the state label of fnbridge_registrations.
type RegistrationState uint8

// The registration states. The zero value is RegistrationUnregistered, the
// state of a slot that never registered.
const (
	// RegistrationUnregistered: no registration (never used, unregistered
	// when idle, or lost by the runtime); the next lease registers one.
	RegistrationUnregistered RegistrationState = iota
	// RegistrationIdle: registered and READY with a warm worker, free.
	RegistrationIdle
	// RegistrationBusy: leased by an invocation.
	RegistrationBusy
	// RegistrationFailed: the last registration failed (initialization
	// error); it is retried after a backoff.
	RegistrationFailed
	// NumRegistrationStates is the number of states, the length of
	// RegistrationCount.Slots.
	NumRegistrationStates
)

var stateNames = [NumRegistrationStates]string{"unregistered", "idle", "busy", "failed"}

// String is the label value.
func (s RegistrationState) String() string {
	if s < NumRegistrationStates {
		return stateNames[s]
	}
	return "unknown"
}

// RegistrationCount is how many registration slots of one handler are in
// each state.
type RegistrationCount struct {
	Service, Handler string
	Slots            [NumRegistrationStates]int
}

// Source is what the bridge reports at scrape time: its gauges. A
// restarted or reloaded bridge adds a new Source and removes the old one;
// while both are attached their values are added up.
type Source interface {
	// Registrations reports every configured handler's slots by state.
	Registrations() []RegistrationCount
	// InflightStreams is the number of invocation streams being served.
	InflightStreams() int
}

// durationBuckets fit everything fnbridge times, from a lease answered at
// once or a warm Python call (a tenth of a millisecond and up) to a
// function at the 15 minute timeout.
var durationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900}

// Metrics is the bridge's Prometheus registry and its collectors. Create
// it once per process (NewMetrics) and serve HTTPHandler.
type Metrics struct {
	reg *prometheus.Registry

	invocations         *prometheus.CounterVec
	functionDuration    *prometheus.HistogramVec
	attemptDuration     *prometheus.HistogramVec
	leaseWait           *prometheus.HistogramVec
	leaseTimeouts       *prometheus.CounterVec
	resourceExhausted   *prometheus.CounterVec
	workerStarts        *prometheus.CounterVec
	workerStartFailures *prometheus.CounterVec
	workerStartDuration *prometheus.HistogramVec
	workerCrashes       *prometheus.CounterVec
	journalReplays      *prometheus.CounterVec
	refused             *prometheus.CounterVec

	mu      sync.Mutex
	sources map[*sourceEntry]struct{}

	// bindMu serializes binding and deleting a handler's series, so a
	// deletion never leaves a new binding's handles outside the registry.
	bindMu sync.Mutex
	bound  map[handlerKey]int // bindings not released, by handler
}

type sourceEntry struct{ Source }

type handlerKey struct{ service, handler string }

var handlerLabels = []string{"service", "handler"}

// NewMetrics makes the registry with every fnbridge metric, the Go runtime
// and process collectors, and fnbridge_build_info for version.
func NewMetrics(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), sources: map[*sourceEntry]struct{}{}, bound: map[handlerKey]int{}}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(v)
		return v
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: durationBuckets}, handlerLabels)
		m.reg.MustRegister(v)
		return v
	}
	m.invocations = counter("fnbridge_invocations_total",
		"Invocation attempts served, by how they ended (outcome: ok, replayed, terminal_failure, retryable_failure, cancelled, suspended, paused).",
		"service", "handler", "outcome")
	m.functionDuration = histogram("fnbridge_function_duration_seconds",
		"Time the function ran: one InvokeFunction call that reached the worker.")
	m.attemptDuration = histogram("fnbridge_attempt_duration_seconds",
		"Time one invocation attempt took in the bridge, from the handler's start to its answer (lease, registration, function and journaling).")
	m.leaseWait = histogram("fnbridge_lease_wait_seconds",
		"Time an invocation waited for a free registration of its handler (0 when one was free; lease_timeout when none came).")
	m.leaseTimeouts = counter("fnbridge_lease_timeouts_total",
		"Invocations that found no free registration within lease_timeout and failed with 429.", handlerLabels...)
	m.resourceExhausted = counter("fnbridge_runtime_resource_exhausted_total",
		"InvokeFunction calls the runtime refused with RESOURCE_EXHAUSTED (registration busy), failed with 429.", handlerLabels...)
	m.workerStarts = counter("fnbridge_worker_starts_total",
		"Registrations that became READY, each with a freshly started warm worker (the runtime's restarts of a READY registration's worker, after a timeout or crash, are not counted).", handlerLabels...)
	m.workerStartFailures = counter("fnbridge_worker_start_failures_total",
		"Registrations that became FAILED: the worker did not start or its handler did not initialize.", handlerLabels...)
	m.workerStartDuration = histogram("fnbridge_worker_start_duration_seconds",
		"Time from RegisterFunction to a READY registration (worker started, handler loaded).")
	m.workerCrashes = counter("fnbridge_worker_crashes_total",
		"Invocations whose worker died under them (the runtime reported a crash); the next invocation gets a fresh worker.", handlerLabels...)
	m.journalReplays = counter("fnbridge_journal_replays_total",
		"Invocation attempts that started by replaying journal entries beyond the input: a resumption, an attempt after a restart, or a retry of an attempt that journaled anything (under durability: function, every retry of a failed function).", handlerLabels...)
	m.refused = counter("fnbridge_refused_requests_total",
		"Requests answered before any handler ran, by reason: unauthenticated (401: not signed by restate-server), draining (503 during shutdown), concurrency_limit (503: over max_concurrent_invocations), failed_before_start (a stream that could not start: protocol version, start timeout, journal bound, malformed frames), unknown_handler (404: an invocation of a handler this deployment does not serve).",
		"reason")
	for _, r := range restate.RefusalReasons {
		m.refused.WithLabelValues(r)
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fnbridge_build_info",
		Help: "Always 1; the labels say which fnbridge build runs."}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	m.reg.MustRegister(buildInfo, sourceCollector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Refused records a request the endpoint answered before any handler ran
// (restate.Config.OnRefused); reason is one of restate.RefusalReasons. A
// nil Metrics records nothing.
func (m *Metrics) Refused(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

// Registry is the underlying registry, for tests that gather directly.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// HTTPHandler serves the registry in the Prometheus exposition formats.
func (m *Metrics) HTTPHandler() http.Handler {
	return promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
}

// AddSource attaches a Source read at every scrape; remove detaches it.
// On a nil Metrics it does nothing.
func (m *Metrics) AddSource(s Source) (remove func()) {
	if m == nil {
		return func() {}
	}
	e := &sourceEntry{s}
	m.mu.Lock()
	m.sources[e] = struct{}{}
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.sources, e)
		m.mu.Unlock()
	}
}

// HandlerMetrics are one handler's metric handles, resolved once so that
// recording takes no label lookup (Metrics.For). A nil *HandlerMetrics records nothing.
type HandlerMetrics struct {
	m        *Metrics
	key      handlerKey
	released atomic.Bool

	outcomes            [numOutcomes]prometheus.Counter
	functionDuration    prometheus.Observer
	attemptDuration     prometheus.Observer
	leaseWait           prometheus.Observer
	leaseTimeouts       prometheus.Counter
	resourceExhausted   prometheus.Counter
	workerStarts        prometheus.Counter
	workerStartFailures prometheus.Counter
	workerStartDuration prometheus.Observer
	workerCrashes       prometheus.Counter
	journalReplays      prometheus.Counter
}

// For binds the handles of a configured handler. Every series is
// created now, at zero, so a scrape shows each handler and outcome before
// anything happened (and rates never start from a missing series). Each
// binding holds the handler's series until it is released
// (HandlerMetrics.Release). A nil Metrics gives a nil *HandlerMetrics.
func (m *Metrics) For(service, handler string) *HandlerMetrics {
	if m == nil {
		return nil
	}
	m.bindMu.Lock()
	defer m.bindMu.Unlock()
	k := handlerKey{service, handler}
	m.bound[k]++
	h := &HandlerMetrics{
		m:                   m,
		key:                 k,
		functionDuration:    m.functionDuration.WithLabelValues(service, handler),
		attemptDuration:     m.attemptDuration.WithLabelValues(service, handler),
		leaseWait:           m.leaseWait.WithLabelValues(service, handler),
		leaseTimeouts:       m.leaseTimeouts.WithLabelValues(service, handler),
		resourceExhausted:   m.resourceExhausted.WithLabelValues(service, handler),
		workerStarts:        m.workerStarts.WithLabelValues(service, handler),
		workerStartFailures: m.workerStartFailures.WithLabelValues(service, handler),
		workerStartDuration: m.workerStartDuration.WithLabelValues(service, handler),
		workerCrashes:       m.workerCrashes.WithLabelValues(service, handler),
		journalReplays:      m.journalReplays.WithLabelValues(service, handler),
	}
	for o := range numOutcomes {
		h.outcomes[o] = m.invocations.WithLabelValues(service, handler, o.String())
	}
	return h
}

// Release ends h's binding. When no other binding of its handler is left,
// the handler's series are deleted: a handler a reload removed, or whose
// addition failed, leaves /metrics, while one still served (by a newer
// binding) keeps its counts. Recordings on h after the deletion are not
// exposed; binding the handler again starts its series at zero. A second
// Release, or one on a nil h, does nothing.
func (h *HandlerMetrics) Release() {
	if h == nil || !h.released.CompareAndSwap(false, true) {
		return
	}
	m := h.m
	m.bindMu.Lock()
	defer m.bindMu.Unlock()
	if m.bound[h.key]--; m.bound[h.key] > 0 {
		return
	}
	delete(m.bound, h.key)
	match := prometheus.Labels{"service": h.key.service, "handler": h.key.handler}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.invocations, m.functionDuration, m.attemptDuration, m.leaseWait, m.leaseTimeouts, m.resourceExhausted,
		m.workerStarts, m.workerStartFailures, m.workerStartDuration, m.workerCrashes, m.journalReplays,
	} {
		v.DeletePartialMatch(match)
	}
}

// Attempt records one attempt's outcome and duration.
func (h *HandlerMetrics) Attempt(o Outcome, d time.Duration) {
	if h == nil || o >= numOutcomes {
		return
	}
	h.outcomes[o].Inc()
	h.attemptDuration.Observe(d.Seconds())
}

// JournalReplay records an attempt that started with replayed entries.
func (h *HandlerMetrics) JournalReplay() {
	if h != nil {
		h.journalReplays.Inc()
	}
}

// FunctionRan records how long one function execution took.
func (h *HandlerMetrics) FunctionRan(d time.Duration) {
	if h != nil {
		h.functionDuration.Observe(d.Seconds())
	}
}

// LeaseWaited records a wait for a free registration; timedOut when none
// came within lease_timeout.
func (h *HandlerMetrics) LeaseWaited(d time.Duration, timedOut bool) {
	if h == nil {
		return
	}
	h.leaseWait.Observe(d.Seconds())
	if timedOut {
		h.leaseTimeouts.Inc()
	}
}

// ResourceExhausted records a RESOURCE_EXHAUSTED answer of the runtime.
func (h *HandlerMetrics) ResourceExhausted() {
	if h != nil {
		h.resourceExhausted.Inc()
	}
}

// WorkerStarted records a registration that became READY after d.
func (h *HandlerMetrics) WorkerStarted(d time.Duration) {
	if h != nil {
		h.workerStarts.Inc()
		h.workerStartDuration.Observe(d.Seconds())
	}
}

// WorkerStartFailed records a registration that became FAILED.
func (h *HandlerMetrics) WorkerStartFailed() {
	if h != nil {
		h.workerStartFailures.Inc()
	}
}

// WorkerCrashed records an invocation whose worker died under it.
func (h *HandlerMetrics) WorkerCrashed() {
	if h != nil {
		h.workerCrashes.Inc()
	}
}

// sourceCollector exposes the gauges the attached Sources report.
type sourceCollector struct{ m *Metrics }

var (
	registrationsDesc = prometheus.NewDesc("fnbridge_registrations",
		"Registration slots of each handler by state (unregistered, idle, busy, failed); they add up to the handler's concurrency.",
		[]string{"service", "handler", "state"}, nil)
	warmWorkersDesc = prometheus.NewDesc("fnbridge_warm_workers",
		"Warm workers: registrations that are READY (idle or busy), each with its own worker process (which the runtime starts again at the next invocation after a timeout or crash killed it).",
		handlerLabels, nil)
	inflightDesc = prometheus.NewDesc("fnbridge_inflight_streams",
		"Invocation streams from Restate being served now.", nil, nil)
)

func (c sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- registrationsDesc
	ch <- warmWorkersDesc
	ch <- inflightDesc
}

func (c sourceCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	sources := make([]Source, 0, len(c.m.sources))
	for e := range c.m.sources {
		sources = append(sources, e.Source)
	}
	c.m.mu.Unlock()
	type key struct{ service, handler string }
	counts := map[key]*[NumRegistrationStates]int{}
	var order []key
	inflight := 0
	for _, s := range sources {
		inflight += s.InflightStreams()
		for _, rc := range s.Registrations() {
			k := key{rc.Service, rc.Handler}
			sum, ok := counts[k]
			if !ok {
				sum = &[NumRegistrationStates]int{}
				counts[k] = sum
				order = append(order, k)
			}
			for i, n := range rc.Slots {
				sum[i] += n
			}
		}
	}
	for _, k := range order {
		sum := counts[k]
		for st := range NumRegistrationStates {
			ch <- prometheus.MustNewConstMetric(registrationsDesc, prometheus.GaugeValue, float64(sum[st]), k.service, k.handler, st.String())
		}
		ch <- prometheus.MustNewConstMetric(warmWorkersDesc, prometheus.GaugeValue, float64(sum[RegistrationIdle]+sum[RegistrationBusy]), k.service, k.handler)
	}
	ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(inflight))
}
