package bridge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// poolRuntime answers FunctionStatus with a scripted state and records
// what the pool asked, so the runtimed duties (poll, idle unregister,
// FAILED re-register) can be checked call by call without timers.
type poolRuntime struct {
	executorv1.FunctionRuntimeClient // nil: unexpected calls panic

	mu           sync.Mutex
	status       *executorv1.FunctionStatusResponse
	statusErr    error
	registered   []int32 // attempts
	digests      []string
	unregistered []string
	nextReg      int
	// hang makes UnregisterFunction wait for its context's end: a
	// runtime that does not answer.
	hang bool
}

func (r *poolRuntime) RegisterFunction(_ context.Context, in *executorv1.RegisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.RegisterFunctionResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.registered = append(r.registered, in.RegistrationAttempt)
	r.digests = append(r.digests, in.RegistrationDigest)
	r.nextReg++
	return &executorv1.RegisterFunctionResponse{
		Registration: &executorv1.FunctionRegistration{RunUid: in.RunUid, RegistrationId: "reg_" + string(rune('a'+r.nextReg))},
		State:        executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
	}, nil
}

func (r *poolRuntime) FunctionStatus(context.Context, *executorv1.FunctionStatusRequest, ...grpc.CallOption) (*executorv1.FunctionStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status, r.statusErr
}

func (r *poolRuntime) UnregisterFunction(ctx context.Context, in *executorv1.UnregisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.UnregisterFunctionResponse, error) {
	r.mu.Lock()
	r.unregistered = append(r.unregistered, in.Registration.RegistrationId)
	hang := r.hang
	r.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &executorv1.UnregisterFunctionResponse{}, nil
}

func testPool(t *testing.T, minWarm int) (*pool, *poolRuntime, *time.Time) {
	t.Helper()
	return testPoolOf(t, 1, minWarm)
}

func testPoolOf(t *testing.T, concurrency, minWarm int) (*pool, *poolRuntime, *time.Time) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x): return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &HandlerConfig{Name: "f", Runtime: "python", Dir: dir, Handler: "m.f", Concurrency: concurrency, MinWarm: minWarm,
		IdleTimeout: Duration(time.Minute), Timeout: Duration(time.Second), LeaseTimeout: Duration(time.Second)}
	rt := &poolRuntime{}
	p := newPool("test", "Svc", h, rt, zerolog.Nop(), &sync.Once{})
	now := time.Unix(1_000_000, 0)
	p.now = func() time.Time { return now }
	return p, rt, &now
}

func leaseAndRelease(t *testing.T, p *pool) *slot {
	t.Helper()
	s, err := p.lease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.release(s)
	return s
}

// "it polls FunctionStatus at a bounded cadence, unregisters registrations
// idle past idle_timeout".
func TestPoolUnregistersIdleRegistration(t *testing.T) {
	p, rt, now := testPool(t, 0)
	s := leaseAndRelease(t, p)
	rt.status = &executorv1.FunctionStatusResponse{State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
		LastActivityUnixNano: now.UnixNano()}

	*now = now.Add(30 * time.Second)
	p.check(s)
	if s.regID == "" || len(rt.unregistered) != 0 {
		t.Fatalf("unregistered before idle_timeout passed")
	}
	*now = now.Add(31 * time.Second)
	p.check(s)
	if s.regID != "" || len(rt.unregistered) != 1 {
		t.Fatalf("registration idle past idle_timeout was not unregistered (regID %q, unregistered %v)", s.regID, rt.unregistered)
	}
	// The next lease registers again, lazily, with the same attempt: nothing failed.
	leaseAndRelease(t, p)
	if len(rt.registered) != 2 || rt.registered[1] != 1 {
		t.Fatalf("re-registration attempts %v, want [1 1]", rt.registered)
	}
}

// "optionally a minimum kept warm": min_warm registrations are never
// unregistered for idleness.
func TestPoolKeepsMinWarm(t *testing.T) {
	p, rt, now := testPool(t, 1)
	if err := p.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.close(context.Background()) })
	if len(rt.registered) != 1 {
		t.Fatalf("min_warm 1: %d registrations at start", len(rt.registered))
	}
	var warm *slot
	for _, s := range p.slots {
		if s.index == 0 {
			warm = s
		}
	}
	rt.mu.Lock()
	rt.status = &executorv1.FunctionStatusResponse{State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY, LastActivityUnixNano: now.UnixNano()}
	rt.mu.Unlock()
	*now = now.Add(time.Hour)
	p.check(warm)
	if warm.regID == "" {
		t.Fatal("the min_warm registration was unregistered for idleness")
	}
}

// "re-registers FAILED ones with backoff" and "registration_attempt ...
// advances only when a registration failed and is retried".
func TestPoolReRegistersFailedWithBackoffAndNewAttempt(t *testing.T) {
	p, rt, now := testPool(t, 0)
	s := leaseAndRelease(t, p)
	oldID := s.regID
	rt.status = &executorv1.FunctionStatusResponse{State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED, FatalError: "worker restart failed"}
	p.check(s)
	if s.regID != "" || len(rt.unregistered) != 1 || rt.unregistered[0] != oldID {
		t.Fatalf("FAILED registration not unregistered (unregistered %v)", rt.unregistered)
	}
	if s.attempt != 2 {
		t.Fatalf("attempt %d after failure, want 2", s.attempt)
	}
	// Within the backoff a lease fails fast, retryably: one failure does
	// not prove the fault permanent (see TestRegistrationFailingThreeRoundsIsPermanent).
	_, err := p.lease(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Class != ClassUnavailable {
		t.Fatalf("lease during backoff: %v, want a retryable (503) error", err)
	}
	if len(rt.registered) != 1 {
		t.Fatalf("registered during backoff")
	}
	*now = now.Add(2 * minRegisterBackoff)
	leaseAndRelease(t, p)
	if got := rt.registered; len(got) != 2 || got[1] != 2 {
		t.Fatalf("attempts %v, want [1 2]", got)
	}
	if s.regID == oldID {
		t.Fatal("a superseded registration ID was used again")
	}
}

// A registration the runtime no longer knows (restarted runtime) is
// forgotten and registered afresh on next use; a stale ID is never reused.
func TestPoolForgetsVanishedRegistration(t *testing.T) {
	for _, code := range []codes.Code{codes.NotFound, codes.FailedPrecondition} {
		p, rt, _ := testPool(t, 0)
		s := leaseAndRelease(t, p)
		rt.statusErr = status.Error(code, "gone")
		p.check(s)
		if s.regID != "" {
			t.Fatalf("%v: registration ID kept after the runtime lost it", code)
		}
	}
}

// "SIGTERM drains, then stops, within shutdown_timeout": a runtime that
// does not answer UnregisterFunction holds close to the caller's deadline,
// not 7 s per registration one after another.
func TestPoolCloseKeepsTheShutdownDeadline(t *testing.T) {
	p, rt, _ := testPoolOf(t, 4, 4)
	if err := p.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.hang = true
	rt.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_ = p.close(ctx)
	if took := time.Since(begin); took > 3*time.Second {
		t.Fatalf("close took %v with a 300ms deadline", took)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.unregistered) != 4 {
		t.Fatalf("unregistered %v, want all 4 registrations asked for", rt.unregistered)
	}
}

// A registration made after the handler changed on disk (a .venv created
// under a serving bridge, a deploy copying new files) makes the earlier
// ones stale: each is replaced when next leased, so the handler does not
// serve two versions (one perhaps missing its packages) for as long as
// traffic keeps the earlier workers warm.
func TestPoolReplacesRegistrationsOfAnEarlierVersion(t *testing.T) {
	p, rt, _ := testPoolOf(t, 2, 0)
	ctx := context.Background()
	a := leaseAndRelease(t, p)
	oldReg := a.regID
	if err := os.WriteFile(filepath.Join(p.h.Dir, "m.py"), []byte("def f(x): return [x]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// a, warm and leased first, still runs the first version; b, leased
	// while a is busy, registers the new one.
	first, err := p.lease(ctx)
	if err != nil || first != a {
		t.Fatalf("lease: %v, %v; want the warm registration", first, err)
	}
	b, err := p.lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.release(first)
	p.release(b)
	if b.digest == a.digest {
		t.Fatalf("b registered the digest of before the edit")
	}
	// Both leased again: a is replaced by a registration of the new version.
	x, err := p.lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	y, err := p.lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x.digest != b.digest || y.digest != b.digest {
		t.Fatalf("leased digests %.12s and %.12s, want both the new version's %.12s", x.digest, y.digest, b.digest)
	}
	if len(rt.unregistered) != 1 || rt.unregistered[0] != oldReg {
		t.Fatalf("unregistered %v, want the earlier version's %s", rt.unregistered, oldReg)
	}
	if len(rt.digests) != 3 || rt.digests[0] == rt.digests[1] || rt.digests[1] != rt.digests[2] {
		t.Fatalf("registered digests %v, want the first version's then the new one's twice", rt.digests)
	}
}
