package bridge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/bridge/telemetry"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// A handler fixed on disk while its registration is in backoff registers
// at the next lease, not after the backoff: the backoff is for a source
// that still fails the same way. While the files are unchanged, a lease
// within the backoff still fails fast, without registering.
func TestPoolRegistersAtOnceWhenTheSourceChangedDuringBackoff(t *testing.T) {
	rt := &failingRuntime{failures: 1000}
	p := failingPool(t, rt)
	now := time.Unix(1_000_000, 0)
	p.now = func() time.Time { return now }

	if _, err := p.lease(context.Background()); err == nil {
		t.Fatal("lease of a handler whose initialization fails succeeded")
	}
	failed := len(rt.attempts)
	// Unchanged files: fail fast, with the reason, and no registration.
	_, err := p.lease(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Class != ClassUnavailable || len(rt.attempts) != failed {
		t.Fatalf("lease within the backoff, files unchanged: %v after %d registrations, want a fast 503 and still %d", err, len(rt.attempts), failed)
	}

	// The handler is fixed: the same clock, within the backoff.
	if err := os.WriteFile(filepath.Join(p.h.Dir, "m.py"), []byte("def f(x):\n    return {'fixed': x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.failures = len(rt.attempts)
	rt.mu.Unlock()
	s, err := p.lease(context.Background())
	if err != nil {
		t.Fatalf("lease after the source was fixed, within the old backoff: %v", err)
	}
	p.release(s)
	if len(rt.attempts) != failed+1 {
		t.Fatalf("registrations %v, want one more after the fix", rt.attempts)
	}
	if s.fatal != "" || s.backoff != 0 {
		t.Fatalf("backoff %v, fatal %q kept after a successful registration", s.backoff, s.fatal)
	}
}

// The min_warm poll does not wait out the backoff either once the source
// changed (the repro: no traffic for a while, the backoff doubled by the
// poll's own retries, then the file fixed): the next poll warms it.
func TestPoolJanitorWarmsAFixedHandlerAtOnce(t *testing.T) {
	rt := &failingRuntime{failures: 1000}
	p := failingPool(t, rt)
	p.h.MinWarm = 1
	now := time.Unix(1_000_000, 0)
	p.now = func() time.Time { return now }
	s := p.slots[0]
	// Rounds of failure driven by the poll alone, no traffic.
	for range 5 {
		p.check(s)
		now = now.Add(maxRegisterBackoff)
	}
	if s.fatal == "" {
		t.Fatal("the failing min_warm registration is not marked failed")
	}
	now = s.retryAt.Add(-time.Second) // within the (long) backoff
	failed := len(rt.attempts)
	p.check(s)
	if len(rt.attempts) != failed {
		t.Fatalf("the poll registered within the backoff with the files unchanged")
	}

	if err := os.WriteFile(filepath.Join(p.h.Dir, "m.py"), []byte("def f(x):\n    return {'fixed': x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.failures = len(rt.attempts)
	rt.mu.Unlock()
	p.check(s)
	if s.regID == "" {
		t.Fatalf("the poll did not warm the fixed handler within the old backoff (registrations %v, fatal %q)", rt.attempts, s.fatal)
	}
}

// coldRuntime is a runtime whose registrations take until gate is closed
// to initialize, as an import that sleeps does. With polled, RegisterFunction
// answers REGISTERING at once and FunctionStatus says REGISTERING until
// then; without, RegisterFunction itself waits (the embedded runtime) and,
// when its caller gives up first, answers Canceled while the registration
// it admitted initializes on. Either way the one registration exists in
// the runtime until UnregisterFunction.
type coldRuntime struct {
	executorv1.FunctionRuntimeClient // nil: any other call panics

	polled     bool
	gate       chan struct{}
	registered chan struct{} // one value per RegisterFunction call, at its start
	unregs     chan string   // each UnregisterFunction's registration ID

	mu       sync.Mutex
	live     map[string]bool // registrations the runtime holds
	lastUsed time.Time
}

func newColdRuntime(polled bool) *coldRuntime {
	return &coldRuntime{polled: polled, gate: make(chan struct{}), registered: make(chan struct{}, 16),
		unregs: make(chan string, 16), live: map[string]bool{}}
}

func (r *coldRuntime) ready() bool {
	select {
	case <-r.gate:
		return true
	default:
		return false
	}
}

func (r *coldRuntime) RegisterFunction(ctx context.Context, in *executorv1.RegisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.RegisterFunctionResponse, error) {
	id := "reg_" + in.GetRunUid()
	r.mu.Lock()
	r.live[id] = true
	r.mu.Unlock()
	r.registered <- struct{}{}
	ref := &executorv1.FunctionRegistration{RunUid: in.GetRunUid(), RegistrationId: id}
	if r.polled && !r.ready() {
		return &executorv1.RegisterFunctionResponse{Registration: ref, State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_REGISTERING}, nil
	}
	select {
	case <-r.gate:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &executorv1.RegisterFunctionResponse{Registration: ref, State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY}, nil
}

func (r *coldRuntime) FunctionStatus(_ context.Context, in *executorv1.FunctionStatusRequest, _ ...grpc.CallOption) (*executorv1.FunctionStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.live[in.GetRegistration().GetRegistrationId()] {
		return nil, status.Error(codes.NotFound, "no such registration")
	}
	st := executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_REGISTERING
	if r.ready() {
		st = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY
	}
	return &executorv1.FunctionStatusResponse{Registration: in.GetRegistration(), State: st, LastActivityUnixNano: r.lastUsed.UnixNano()}, nil
}

func (r *coldRuntime) UnregisterFunction(_ context.Context, in *executorv1.UnregisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.UnregisterFunctionResponse, error) {
	id := in.GetRegistration().GetRegistrationId()
	r.mu.Lock()
	delete(r.live, id)
	r.mu.Unlock()
	r.unregs <- id
	return &executorv1.UnregisterFunctionResponse{Registration: in.GetRegistration()}, nil
}

func (r *coldRuntime) holds() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

func coldPool(t *testing.T, rt *coldRuntime) *pool {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x): return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &HandlerConfig{Name: "f", Runtime: "python", Dir: dir, Handler: "m.f", Concurrency: 1,
		IdleTimeout: Duration(5 * time.Second), Timeout: Duration(time.Second), LeaseTimeout: Duration(5 * time.Second)}
	return newPool("test", "Svc", h, rt, zerolog.Nop(), &sync.Once{})
}

// abandonColdStart leases from p and gives up (its invocation cancelled)
// while the registration is still initializing.
func abandonColdStart(t *testing.T, p *pool, rt *coldRuntime) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		s, err := p.lease(ctx)
		if err == nil {
			p.release(s)
		}
		errc <- err
	}()
	<-rt.registered
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a lease cancelled during the cold start succeeded")
	}
}

// waitUnregistered waits for the runtime to be asked to unregister id; a
// bound only for a failing test, which would otherwise hang.
func waitUnregistered(t *testing.T, rt *coldRuntime, id string) {
	t.Helper()
	select {
	case got := <-rt.unregs:
		if got != id {
			t.Fatalf("unregistered %q, want %q", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("registration %s, abandoned during its cold start, never unregistered (the runtime holds %d)", id, rt.holds())
	}
}

func forEachColdRuntime(t *testing.T, fn func(t *testing.T, rt *coldRuntime)) {
	for _, polled := range []bool{false, true} {
		name := "register-waits"
		if polled {
			name = "register-polled"
		}
		t.Run(name, func(t *testing.T) { fn(t, newColdRuntime(polled)) })
	}
}

// A registration whose lease was given up while it initialized is
// recorded once it is READY, and unregistered when the pool has closed:
// close does not wait for it (a stuck import would hold a shutdown for
// its whole deadline), waitAdopted does.
func TestPoolCloseUnregistersARegistrationAbandonedDuringItsColdStart(t *testing.T) {
	forEachColdRuntime(t, func(t *testing.T, rt *coldRuntime) {
		p := coldPool(t, rt)
		abandonColdStart(t, p, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.close(ctx); err != nil {
			t.Fatalf("close with a registration still starting: %v", err)
		}
		close(rt.gate)
		if err := p.waitAdopted(ctx); err != nil {
			t.Fatal(err)
		}
		if rt.holds() != 0 {
			t.Fatalf("closed pool left %d registrations in the runtime", rt.holds())
		}
	})
}

// ... and the idle poll unregisters it after idle_timeout, with no other
// lease coming to adopt it.
func TestPoolIdlesOutARegistrationAbandonedDuringItsColdStart(t *testing.T) {
	forEachColdRuntime(t, func(t *testing.T, rt *coldRuntime) {
		p := coldPool(t, rt)
		now := time.Unix(1_000_000, 0)
		p.now = func() time.Time { return now } // never written again
		rt.lastUsed = now.Add(-time.Minute)     // idle past idle_timeout once READY
		p.pollEvery = time.Millisecond
		if err := p.start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.close(context.Background()) })
		abandonColdStart(t, p, rt)
		close(rt.gate)
		waitUnregistered(t, rt, "reg_"+p.slots[0].runUID)
	})
}

// ... and a shutdown whose deadline passed while it initialized still
// has it unregistered once its RegisterFunction returns.
func TestPoolUnregistersAColdStartStillRunningWhenCloseGaveUp(t *testing.T) {
	forEachColdRuntime(t, func(t *testing.T, rt *coldRuntime) {
		p := coldPool(t, rt)
		abandonColdStart(t, p, rt)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the shutdown deadline has passed
		_ = p.close(ctx)
		close(rt.gate)
		waitUnregistered(t, rt, "reg_"+p.slots[0].runUID)
	})
}

// Sequential traffic reuses the most recently used registration: one
// cold start, not one per slot, so the other slots stay unregistered
// (idle_timeout can reclaim what a burst warmed).
func TestPoolSequentialTrafficReusesOneRegistration(t *testing.T) {
	p, rt, _ := testPoolOf(t, 3, 0)
	first := leaseAndRelease(t, p)
	for range 5 {
		if s := leaseAndRelease(t, p); s != first {
			t.Fatalf("sequential lease got slot %d after slot %d", s.index, first.index)
		}
	}
	if len(rt.registered) != 1 {
		t.Fatalf("%d registrations for sequential traffic, want 1", len(rt.registered))
	}
}

// After a burst, the registration released last is leased first.
func TestPoolLeasesTheMostRecentlyReleasedFirst(t *testing.T) {
	p, _, _ := testPoolOf(t, 3, 0)
	var held []*slot
	for range 3 {
		s, err := p.lease(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	for _, i := range []int{0, 2, 1} {
		p.release(held[i])
	}
	if s := leaseAndRelease(t, p); s != held[1] {
		t.Fatalf("leased slot %d, want slot %d, released last", s.index, held[1].index)
	}
}

// reloadedPool serves Svc/f (concurrency 3) from a Live, edits its
// source and reloads: the pool of the new version, and the runtime.
func reloadedPool(t *testing.T) (*pool, *poolRuntime) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x): return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgText := []byte(`
services:
  - name: Svc
    handlers:
      - {name: f, runtime: python, dir: ., handler: m.f, concurrency: 3}
`)
	cfg, err := ParseConfig(cfgText, dir)
	if err != nil {
		t.Fatal(err)
	}
	rt := &poolRuntime{status: &executorv1.FunctionStatusResponse{State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
		LastActivityUnixNano: time.Now().Add(time.Hour).UnixNano()}}
	live, err := NewLive(cfg, Options{Logger: zerolog.Nop(), Clients: map[string]executorv1.FunctionRuntimeClient{"python": rt}})
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Close(context.Background()) })

	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x): return {'v': 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg, err = ParseConfig(cfgText, dir); err != nil {
		t.Fatal(err)
	}
	rep, err := live.Reload(context.Background(), cfg)
	if err != nil || len(rep.Reloaded) != 1 {
		t.Fatalf("reload: %+v, %v", rep, err)
	}
	return live.cur.Load().pools["Svc/f"], rt
}

// warmedSlot is the one registration of p.
func warmedSlot(t *testing.T, p *pool) *slot {
	t.Helper()
	var warmed *slot
	for _, s := range p.slots {
		if s.regID != "" {
			if warmed != nil {
				t.Fatalf("the reload warmed slots %d and %d, want one", warmed.index, s.index)
			}
			warmed = s
		}
	}
	if warmed == nil {
		t.Fatal("the reload warmed no registration")
	}
	return warmed
}

// After a dev reload, the metrics count the registration the reload
// warmed from the start, not from the first status poll.
func TestReloadReportsTheRegistrationItWarmedAtOnce(t *testing.T) {
	p, _ := reloadedPool(t)
	if st := telemetry.RegistrationState(warmedSlot(t, p).state.Load()); st != telemetry.RegistrationIdle {
		t.Fatalf("the registration the reload warmed is reported %v, want %v", st, telemetry.RegistrationIdle)
	}
}

// After a dev reload, the new version's first lease uses the registration
// the reload warmed: no second cold start.
func TestReloadLeasesTheRegistrationItWarmedFirst(t *testing.T) {
	p, rt := reloadedPool(t)
	warmed := warmedSlot(t, p)
	rt.mu.Lock()
	before := len(rt.registered)
	rt.mu.Unlock()
	s, err := p.lease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.release(s)
	rt.mu.Lock()
	after := len(rt.registered)
	rt.mu.Unlock()
	if s != warmed || after != before {
		t.Fatalf("the first lease after the reload got slot %d (the reload warmed %d) and registered %d more", s.index, warmed.index, after-before)
	}
}

// Within the backoff a lease fails fast without starting a process: only
// the handler's files are compared, not the interpreter, whose probe is
// a process when its answer is not cached (a failed probe never is). A
// probe on every lease of a failing handler made registrations under load
// fail for longer still (a chaos run: probes through a pyenv shim, killed
// with the workers, on every lease of 32).
func TestPoolFailFastStartsNoProcess(t *testing.T) {
	rt := &failingRuntime{failures: 1000}
	p := failingPool(t, rt)
	count := filepath.Join(t.TempDir(), "probes")
	py := filepath.Join(t.TempDir(), "py")
	if err := os.WriteFile(py, []byte("#!/bin/sh\necho >> \""+count+"\"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.h.Python = &PythonConfig{Interpreter: py}
	now := time.Unix(1_000_000, 0)
	p.now = func() time.Time { return now }
	if _, err := p.lease(context.Background()); err == nil {
		t.Fatal("lease of a handler whose initialization fails succeeded")
	}
	probes := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "\n")
	}
	before := probes()
	for range 5 {
		if _, err := p.lease(context.Background()); err == nil {
			t.Fatal("lease within the backoff succeeded")
		}
	}
	if n := probes() - before; n != 0 {
		t.Fatalf("%d interpreter probes during 5 leases within the backoff, want none", n)
	}
}
