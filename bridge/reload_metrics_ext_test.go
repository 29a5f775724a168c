package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/bridge/telemetry/telemetrytest"
	"github.com/fnbridge/fnbridge/internal/testtool"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// The metrics of a Live across reloads, on the fake runtime: every
// handler is mod.fn in one directory, so only a configuration change
// reloads one.

// liveFake is a Live serving configurations on the fake runtime.
type liveFake struct {
	t    *testing.T
	dir  string
	live *bridge.Live
	fake *fakeRuntime
	m    *telemetry.Metrics
	url  string
}

func newLiveFake(t *testing.T, config string) *liveFake {
	t.Helper()
	lf := &liveFake{t: t, dir: t.TempDir(), fake: newFakeRuntime(), m: telemetry.NewMetrics("test")}
	if err := os.WriteFile(filepath.Join(lf.dir, "mod.py"), []byte("def fn(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lf.live, lf.url = serveLive(t, lf.config(config), bridge.Options{Logger: zerolog.Nop(), Metrics: lf.m,
		Clients: map[string]executorv1.FunctionRuntimeClient{"python": lf.fake}}, func(error) {})
	return lf
}

// config parses a configuration whose handlers are written
// "{name: NAME, runtime: python, dir: DIR, handler: mod.fn ...}" with DIR
// standing for the handler directory.
func (lf *liveFake) config(text string) *bridge.Config {
	lf.t.Helper()
	cfg, err := bridge.ParseConfig([]byte(strings.ReplaceAll(text, "DIR", lf.dir)), lf.dir)
	if err != nil {
		lf.t.Fatal(err)
	}
	return cfg
}

func (lf *liveFake) reload(text string) *bridge.ReloadReport {
	lf.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := lf.live.Reload(ctx, lf.config(text))
	if err != nil {
		lf.t.Fatalf("reload: %v", err)
	}
	return rep
}

// on is a harness playing invocations of target ("Service/handler").
func (lf *liveFake) on(target string) *harness {
	return &harness{t: lf.t, fake: lf.fake, url: lf.url, client: restatetest.NewH2CClient(), target: target}
}

func (lf *liveFake) gather() telemetrytest.Families {
	return telemetrytest.Gather(lf.t, lf.m.Registry())
}

// gauge reads a series that must exist.
func (lf *liveFake) gauge(f telemetrytest.Families, name string, labels ...string) float64 {
	lf.t.Helper()
	v, ok := f.Value(name, labels...)
	if !ok {
		lf.t.Fatalf("no single series %s%v: %v", name, labels, f.Labels(name))
	}
	return v
}

// slots sums a handler's fnbridge_registrations over the states.
func slots(f telemetrytest.Families, service, handler string) float64 {
	var n float64
	for _, st := range []string{"unregistered", "idle", "busy", "failed"} {
		v, _ := f.Value("fnbridge_registrations", "service", service, "handler", handler, "state", st)
		n += v
	}
	return n
}

// seriesOf lists every fnbridge_ series labelled service.
func seriesOf(f telemetrytest.Families, service string) []string {
	var out []string
	for name := range f {
		if !strings.HasPrefix(name, "fnbridge_") {
			continue
		}
		for _, l := range f.Labels(name) {
			if slices.Contains(strings.Split(l, ","), "service="+service) {
				out = append(out, name+"{"+l+"}")
			}
		}
	}
	slices.Sort(out)
	return out
}

// hold makes every InvokeFunction wait until the returned release is
// called, announcing each on started.
func (lf *liveFake) hold() (started <-chan struct{}, release func()) {
	ch, gate := make(chan struct{}, 4), make(chan struct{})
	lf.fake.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		ch <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return &executorv1.InvokeFunctionResponse{Output: r.Input, ContentType: "application/json"}, nil
	})
	return ch, func() { close(gate) }
}

func waitStarted(t *testing.T, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the held invocation did not reach the runtime")
	}
}

func waitFrames(t *testing.T, done <-chan []restatetest.Frame) []restatetest.Frame {
	t.Helper()
	select {
	case frames := <-done:
		return frames
	case <-time.After(10 * time.Second):
		t.Fatal("the held invocation did not end after its release")
		return nil
	}
}

var (
	// keepAndFn serves Svc/fn and Keep/g (min_warm 1: warm from the start).
	keepAndFn = keepAndFnTimeout("5s")
	// keepAndFnChanged is keepAndFn with Svc/fn's timeout changed: Svc/fn
	// reloads, Keep/g is carried over.
	keepAndFnChanged = keepAndFnTimeout("6s")
)

// keepAndFnTimeout is the configuration serving Svc/fn, with the timeout
// given, and Keep/g (min_warm 1).
func keepAndFnTimeout(timeout string) string {
	return `
services:
  - name: Svc
    handlers:
      - {name: fn, runtime: python, dir: DIR, handler: mod.fn, timeout: ` + timeout + `}
  - name: Keep
    handlers:
      - {name: g, runtime: python, dir: DIR, handler: mod.fn, min_warm: 1}
`
}

// holdAcrossReload starts an invocation of Svc/fn, holds it in the fake
// runtime, and reloads Svc/fn under it: the invocation goes on on the
// replaced generation's endpoint and pool.
func holdAcrossReload(t *testing.T) (lf *liveFake, release func(), done <-chan []restatetest.Frame) {
	t.Helper()
	lf = newLiveFake(t, keepAndFn)
	started, release := lf.hold()
	out := make(chan []restatetest.Frame, 1)
	go func() { out <- lf.on("Svc/fn").play(6, fresh(`1`), nil) }()
	waitStarted(t, started)
	f := lf.gather()
	if n := lf.gauge(f, "fnbridge_inflight_streams"); n != 1 {
		t.Fatalf("before the reload fnbridge_inflight_streams = %v, want 1", n)
	}
	if n := lf.gauge(f, "fnbridge_registrations", "service", "Svc", "state", "busy"); n != 1 {
		t.Fatalf("before the reload Svc/fn busy = %v, want 1", n)
	}
	if rep := lf.reload(keepAndFnChanged); !slices.Equal(rep.Reloaded, []string{"Svc/fn"}) || len(rep.Failed) != 0 {
		t.Fatalf("report %+v, want Svc/fn reloaded", rep)
	}
	return lf, release, out
}

// A stream in flight when its handler is reloaded is still served, by the
// replaced generation: it counts in fnbridge_inflight_streams and its
// leased registration as busy until it ends, and the handler carried over
// counts once. (The replaced generation was detached at the swap: in
// flight 0, busy 0, while the invocation ran on.)
func TestReloadCountsTheReplacedGenerationWhileItServes(t *testing.T) {
	lf, release, done := holdAcrossReload(t)
	f := lf.gather()
	if n := lf.gauge(f, "fnbridge_inflight_streams"); n != 1 {
		t.Errorf("after the reload fnbridge_inflight_streams = %v, want 1: the held invocation still runs", n)
	}
	if n := lf.live.InFlight(); n != 1 {
		t.Errorf("after the reload Live.InFlight() = %d, want 1", n)
	}
	if n := lf.gauge(f, "fnbridge_registrations", "service", "Svc", "state", "busy"); n != 1 {
		t.Errorf("after the reload Svc/fn busy = %v, want 1: the replaced version's registration is leased", n)
	}
	if n := lf.gauge(f, "fnbridge_registrations", "service", "Svc", "state", "idle"); n != 1 {
		t.Errorf("after the reload Svc/fn idle = %v, want 1: the new version's registration the reload warmed", n)
	}
	if n := lf.gauge(f, "fnbridge_warm_workers", "service", "Keep"); n != 1 {
		t.Errorf("Keep/g warm workers = %v, want 1: a handler carried over counts once", n)
	}
	if n := slots(f, "Keep", "g"); n != 1 {
		t.Errorf("Keep/g slots = %v, want its concurrency, 1", n)
	}

	release()
	wantTypes(t, waitFrames(t, done), wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	testtool.Eventually(t, 5*time.Second, "the replaced generation no longer counted", func() (bool, string) {
		f := lf.gather()
		inflight, _ := f.Value("fnbridge_inflight_streams")
		busy, _ := f.Value("fnbridge_registrations", "service", "Svc", "state", "busy")
		svc := slots(f, "Svc", "fn")
		n := lf.live.InFlight()
		return inflight == 0 && busy == 0 && svc == 1 && n == 0,
			fmt.Sprintf("in flight %v (Live.InFlight %d), Svc/fn busy %v, slots %v", inflight, n, busy, svc)
	})
	f = lf.gather()
	if n := lf.gauge(f, "fnbridge_invocations_total", "service", "Svc", "outcome", "ok"); n != 1 {
		t.Errorf("Svc/fn ok = %v, want 1: a reloaded handler keeps its counters", n)
	}
	if n := slots(f, "Keep", "g"); n != 1 {
		t.Errorf("Keep/g slots = %v, want 1", n)
	}
}

// A shutdown's drain waits for the streams a reload's predecessor still
// serves, not only the current generation's. (It returned at once: the
// current generation had none.)
func TestLiveDrainWaitsForTheReplacedGenerationsStreams(t *testing.T) {
	lf, release, done := holdAcrossReload(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := lf.live.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with a stream in flight on the replaced generation = %v, want the deadline's error", err)
	}
	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		drained <- lf.live.Drain(ctx)
	}()
	release()
	wantTypes(t, waitFrames(t, done), wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("Drain = %v once the stream ended, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Drain did not return once the stream ended")
	}
}

const (
	svcAndGone = `
services:
  - name: Svc
    handlers:
      - {name: fn, runtime: python, dir: DIR, handler: mod.fn}
  - name: Gone
    handlers:
      - {name: g, runtime: python, dir: DIR, handler: mod.fn}
`
	svcOnly = `
services:
  - name: Svc
    handlers:
      - {name: fn, runtime: python, dir: DIR, handler: mod.fn}
`
)

// A handler removed by a reload leaves /metrics once its last invocation
// has ended and its registrations are gone; the handler still served keeps
// its series and counts. (They stayed for ever: 105 lines of a removed
// handler.)
func TestReloadDeletesTheSeriesOfARemovedHandler(t *testing.T) {
	lf := newLiveFake(t, svcAndGone)
	wantTypes(t, lf.on("Svc/fn").play(6, fresh(`1`), nil), wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	started, release := lf.hold()
	done := make(chan []restatetest.Frame, 1)
	go func() { done <- lf.on("Gone/g").play(6, fresh(`1`), nil) }()
	waitStarted(t, started)

	if rep := lf.reload(svcOnly); !slices.Equal(rep.Removed, []string{"Gone/g"}) {
		t.Fatalf("report %+v, want Gone/g removed", rep)
	}
	// Its invocation runs on: the handler is still counted.
	if n, _ := lf.gather().Value("fnbridge_registrations", "service", "Gone", "state", "busy"); n != 1 {
		t.Errorf("the removed Gone/g busy = %v while its invocation runs, want 1", n)
	}
	release()
	waitFrames(t, done)
	testtool.Eventually(t, 5*time.Second, "no series of the removed Gone/g", func() (bool, string) {
		s := seriesOf(lf.gather(), "Gone")
		return len(s) == 0, fmt.Sprintf("%d series: %v", len(s), s)
	})
	f := lf.gather()
	if n := lf.gauge(f, "fnbridge_invocations_total", "service", "Svc", "outcome", "ok"); n != 1 {
		t.Errorf("Svc/fn ok = %v, want 1", n)
	}
	if n := slots(f, "Svc", "fn"); n != 1 {
		t.Errorf("Svc/fn slots = %v, want 1", n)
	}
}

// An added handler whose registration fails is not served: none of its
// series stay, and a reload that fails for a served handler keeps that
// handler's.
func TestReloadLeavesNoSeriesOfAHandlerWhoseAdditionFailed(t *testing.T) {
	lf := newLiveFake(t, svcOnly)
	wantTypes(t, lf.on("Svc/fn").play(6, fresh(`1`), nil), wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	lf.fake.setRegister(func(in *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		return &executorv1.RegisterFunctionResponse{Registration: &executorv1.FunctionRegistration{RunUid: in.RunUid, RegistrationId: "reg_fake"},
			State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED}, nil
	})
	rep := lf.reload(`
services:
  - name: Svc
    handlers:
      - {name: fn, runtime: python, dir: DIR, handler: mod.fn, timeout: 9s}
  - name: Bad
    handlers:
      - {name: h, runtime: python, dir: DIR, handler: mod.fn}
`)
	if len(rep.Failed) != 2 || len(rep.Added)+len(rep.Reloaded) != 0 {
		t.Fatalf("report %+v, want Bad/h and Svc/fn failed", rep)
	}
	f := lf.gather()
	if s := seriesOf(f, "Bad"); len(s) != 0 {
		t.Errorf("the handler whose addition failed left %d series: %v", len(s), s)
	}
	if n := lf.gauge(f, "fnbridge_invocations_total", "service", "Svc", "outcome", "ok"); n != 1 {
		t.Errorf("Svc/fn ok = %v, want 1: its old version still serves", n)
	}
}
