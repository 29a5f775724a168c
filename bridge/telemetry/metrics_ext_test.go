package telemetry_test

import (
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/bridge/telemetry/telemetrytest"
)

// value reads one series or fails the test naming what is there instead.
func value(t *testing.T, f telemetrytest.Families, name string, labels ...string) float64 {
	t.Helper()
	v, ok := f.Value(name, labels...)
	if !ok {
		t.Fatalf("no single series %s%v; series: %v", name, labels, f.Labels(name))
	}
	return v
}

// A handler's series exist at zero as soon as it is bound, for every
// outcome, so a dashboard shows the handler (and rate() works) before the
// first invocation.
func TestBoundHandlerSeriesStartAtZero(t *testing.T) {
	m := telemetry.NewMetrics("1.2.3")
	m.For("Greeter", "greet")
	f := telemetrytest.Gather(t, m.Registry())
	if got := f.Labels("fnbridge_invocations_total"); len(got) != len(telemetry.Outcomes()) {
		t.Fatalf("invocation series %v, want one per outcome (%d)", got, len(telemetry.Outcomes()))
	}
	for _, o := range telemetry.Outcomes() {
		if v := value(t, f, "fnbridge_invocations_total", "service", "Greeter", "handler", "greet", "outcome", o.String()); v != 0 {
			t.Errorf("outcome %s starts at %v", o, v)
		}
	}
	for _, name := range []string{"fnbridge_function_duration_seconds", "fnbridge_attempt_duration_seconds", "fnbridge_lease_wait_seconds",
		"fnbridge_worker_start_duration_seconds", "fnbridge_lease_timeouts_total", "fnbridge_runtime_resource_exhausted_total",
		"fnbridge_worker_starts_total", "fnbridge_worker_start_failures_total", "fnbridge_worker_crashes_total", "fnbridge_journal_replays_total"} {
		if v := value(t, f, name, "service", "Greeter", "handler", "greet"); v != 0 {
			t.Errorf("%s starts at %v", name, v)
		}
	}
	if v := value(t, f, "fnbridge_build_info", "version", "1.2.3", "goversion", runtime.Version()); v != 1 {
		t.Errorf("fnbridge_build_info = %v, want 1", v)
	}
}

// Each recording lands on its own handler's series and nowhere else.
func TestRecordingsCountPerHandler(t *testing.T) {
	m := telemetry.NewMetrics("dev")
	a, b := m.For("Svc", "a"), m.For("Svc", "b")
	a.Attempt(telemetry.OutcomeOK, 20*time.Millisecond)
	a.Attempt(telemetry.OutcomeOK, 30*time.Millisecond)
	a.Attempt(telemetry.OutcomeReplayed, time.Millisecond)
	b.Attempt(telemetry.OutcomePaused, time.Second)
	a.FunctionRan(10 * time.Millisecond)
	a.LeaseWaited(0, false)
	a.LeaseWaited(200*time.Millisecond, true)
	a.ResourceExhausted()
	a.WorkerStarted(50 * time.Millisecond)
	a.WorkerStartFailed()
	a.WorkerCrashed()
	a.JournalReplay()
	f := telemetrytest.Gather(t, m.Registry())
	want := []struct {
		name    string
		labels  []string
		want    float64
		because string
	}{
		{"fnbridge_invocations_total", []string{"handler", "a", "outcome", "ok"}, 2, "two ok attempts"},
		{"fnbridge_invocations_total", []string{"handler", "a", "outcome", "replayed"}, 1, "one replay"},
		{"fnbridge_invocations_total", []string{"handler", "a", "outcome", "paused"}, 0, "b's pause is b's"},
		{"fnbridge_invocations_total", []string{"handler", "b", "outcome", "paused"}, 1, "b paused once"},
		{"fnbridge_attempt_duration_seconds", []string{"handler", "a"}, 3, "every attempt is timed"},
		{"fnbridge_function_duration_seconds", []string{"handler", "a"}, 1, "one execution"},
		{"fnbridge_lease_wait_seconds", []string{"handler", "a"}, 2, "both waits, the timed-out one too"},
		{"fnbridge_lease_timeouts_total", []string{"handler", "a"}, 1, "one wait timed out"},
		{"fnbridge_runtime_resource_exhausted_total", []string{"handler", "a"}, 1, ""},
		{"fnbridge_worker_starts_total", []string{"handler", "a"}, 1, ""},
		{"fnbridge_worker_start_duration_seconds", []string{"handler", "a"}, 1, ""},
		{"fnbridge_worker_start_failures_total", []string{"handler", "a"}, 1, ""},
		{"fnbridge_worker_crashes_total", []string{"handler", "a"}, 1, ""},
		{"fnbridge_journal_replays_total", []string{"handler", "a"}, 1, ""},
		{"fnbridge_journal_replays_total", []string{"handler", "b"}, 0, ""},
	}
	for _, w := range want {
		if got := value(t, f, w.name, w.labels...); got != w.want {
			t.Errorf("%s%v = %v, want %v (%s)", w.name, w.labels, got, w.want, w.because)
		}
	}
	// The 200ms wait falls in the 0.25 bucket, not below.
	h := f["fnbridge_lease_wait_seconds"].GetMetric()[0].GetHistogram()
	for _, bk := range h.GetBucket() {
		if bk.GetUpperBound() == 0.1 && bk.GetCumulativeCount() != 1 || bk.GetUpperBound() == 0.25 && bk.GetCumulativeCount() != 2 {
			t.Errorf("lease wait bucket le=%v holds %d", bk.GetUpperBound(), bk.GetCumulativeCount())
		}
	}
}

// Disabled metrics cost nothing and never panic: a nil *Metrics binds nil
// handles, and every recording on them is a no-op.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *telemetry.Metrics
	h := m.For("Svc", "fn")
	if h != nil {
		t.Fatalf("nil Metrics bound %v", h)
	}
	h.Attempt(telemetry.OutcomeOK, time.Second)
	h.FunctionRan(time.Second)
	h.LeaseWaited(time.Second, true)
	h.ResourceExhausted()
	h.WorkerStarted(time.Second)
	h.WorkerStartFailed()
	h.WorkerCrashed()
	h.JournalReplay()
	m.AddSource(fixedSource{})()
}

type fixedSource struct {
	regs     []telemetry.RegistrationCount
	inflight int
}

func (s fixedSource) Registrations() []telemetry.RegistrationCount { return s.regs }
func (s fixedSource) InflightStreams() int                         { return s.inflight }

// The gauges come from the attached sources at scrape time; two attached
// at once (a reload overlapping the old bridge) add up instead of
// colliding, and a removed one stops counting.
func TestSourcesAreReadAtScrapeAndAddUp(t *testing.T) {
	m := telemetry.NewMetrics("dev")
	var slots [telemetry.NumRegistrationStates]int
	slots[telemetry.RegistrationIdle], slots[telemetry.RegistrationBusy], slots[telemetry.RegistrationUnregistered] = 2, 1, 1
	oldRemove := m.AddSource(fixedSource{regs: []telemetry.RegistrationCount{{Service: "Svc", Handler: "fn", Slots: slots}}, inflight: 3})
	m.AddSource(fixedSource{regs: []telemetry.RegistrationCount{{Service: "Svc", Handler: "fn", Slots: slots}}, inflight: 1})
	f := telemetrytest.Gather(t, m.Registry())
	if v := value(t, f, "fnbridge_inflight_streams"); v != 4 {
		t.Errorf("fnbridge_inflight_streams = %v, want 3+1", v)
	}
	if v := value(t, f, "fnbridge_registrations", "handler", "fn", "state", "idle"); v != 4 {
		t.Errorf("idle registrations = %v, want 2+2", v)
	}
	if v := value(t, f, "fnbridge_registrations", "handler", "fn", "state", "failed"); v != 0 {
		t.Errorf("failed registrations = %v, want 0 (every state is exposed)", v)
	}
	if v := value(t, f, "fnbridge_warm_workers", "handler", "fn"); v != 6 {
		t.Errorf("warm workers = %v, want idle+busy of both (6)", v)
	}
	oldRemove()
	f = telemetrytest.Gather(t, m.Registry())
	if v := value(t, f, "fnbridge_inflight_streams"); v != 1 {
		t.Errorf("after removing a source fnbridge_inflight_streams = %v, want 1", v)
	}
	if v := value(t, f, "fnbridge_warm_workers", "handler", "fn"); v != 3 {
		t.Errorf("after removing a source warm workers = %v, want 3", v)
	}
}

// /metrics answers the Prometheus text format that a scraper parses, with
// the Go runtime and process metrics beside fnbridge's.
func TestHTTPHandlerServesTextExposition(t *testing.T) {
	m := telemetry.NewMetrics("dev")
	m.For("Svc", "fn").Attempt(telemetry.OutcomeTerminalFailure, time.Millisecond)
	srv := httptest.NewServer(m.HTTPHandler())
	defer srv.Close()
	f, err := telemetrytest.Scrape(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if v := value(t, f, "fnbridge_invocations_total", "outcome", "terminal_failure"); v != 1 {
		t.Errorf("scraped terminal_failure = %v, want 1", v)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "fnbridge_build_info"} {
		if f[name] == nil {
			t.Errorf("scrape lacks %s", name)
		}
	}
	for name := range f {
		if strings.HasPrefix(name, "fnbridge_") && f[name].GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
	}
}

// handlerSeries lists every fnbridge_ series of handler Svc/name.
func handlerSeries(f telemetrytest.Families, name string) []string {
	var out []string
	for family := range f {
		if !strings.HasPrefix(family, "fnbridge_") {
			continue
		}
		for _, l := range f.Labels(family) {
			if strings.Contains(l, "handler="+name+",") && strings.Contains(l, "service=Svc") {
				out = append(out, family+"{"+l+"}")
			}
		}
	}
	return out
}

// A handler's series go with its last binding (a reload removed the
// handler, or its addition failed), not before: another binding of the
// same handler (a reloaded version beside the one it replaces) keeps them
// and their counts. Bound again, they start at zero; a second Release of
// a binding changes nothing.
func TestReleasedHandlerSeriesGoWithTheLastBinding(t *testing.T) {
	m := telemetry.NewMetrics("dev")
	old, b := m.For("Svc", "a"), m.For("Svc", "b")
	old.Attempt(telemetry.OutcomeOK, time.Millisecond)
	cur := m.For("Svc", "a")
	old.Release()
	cur.Attempt(telemetry.OutcomeOK, time.Millisecond)
	f := telemetrytest.Gather(t, m.Registry())
	if v := value(t, f, "fnbridge_invocations_total", "handler", "a", "outcome", "ok"); v != 2 {
		t.Fatalf("ok = %v after the old binding's release, want 2: the current one keeps the counts", v)
	}
	cur.Release()
	f = telemetrytest.Gather(t, m.Registry())
	if s := handlerSeries(f, "a"); len(s) != 0 {
		t.Fatalf("%d series of the released Svc/a stay: %v", len(s), s)
	}
	if got := len(handlerSeries(f, "b")); got != 17 {
		t.Fatalf("Svc/b has %d series, want all 17 still", got)
	}
	again := m.For("Svc", "a")
	old.Release()
	cur.Release()
	f = telemetrytest.Gather(t, m.Registry())
	if v := value(t, f, "fnbridge_invocations_total", "handler", "a", "outcome", "ok"); v != 0 {
		t.Fatalf("ok = %v for Svc/a bound again, want 0", v)
	}
	again.Release()
	b.Release()
	// The bridge-wide series stay: they belong to no handler.
	for name, mf := range telemetrytest.Gather(t, m.Registry()) {
		if n := len(mf.GetMetric()); strings.HasPrefix(name, "fnbridge_") && n > 0 && name != "fnbridge_build_info" && name != "fnbridge_inflight_streams" && name != "fnbridge_refused_requests_total" {
			t.Errorf("%d series of %s left after every binding's release", n, name)
		}
	}
	var none *telemetry.HandlerMetrics
	none.Release()
}
