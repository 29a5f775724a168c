package bridge

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// failingRuntime answers RegisterFunction with FAILED for the first
// `failures` registrations and READY afterwards.
type failingRuntime struct {
	executorv1.FunctionRuntimeClient // nil: any other call panics
	mu                               sync.Mutex
	failures                         int
	attempts                         []int32
}

func (f *failingRuntime) RegisterFunction(_ context.Context, in *executorv1.RegisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.RegisterFunctionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, in.GetRegistrationAttempt())
	st := executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY
	if len(f.attempts) <= f.failures {
		st = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED
	}
	return &executorv1.RegisterFunctionResponse{
		Registration: &executorv1.FunctionRegistration{RunUid: in.GetRunUid(), RegistrationId: "reg_" + string(rune('a'+len(f.attempts)))},
		State:        st,
	}, nil
}

func (f *failingRuntime) FunctionStatus(context.Context, *executorv1.FunctionStatusRequest, ...grpc.CallOption) (*executorv1.FunctionStatusResponse, error) {
	return &executorv1.FunctionStatusResponse{State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED,
		FatalError: "python interpreter python3 does not run: signal: killed"}, nil
}

func (f *failingRuntime) UnregisterFunction(context.Context, *executorv1.UnregisterFunctionRequest, ...grpc.CallOption) (*executorv1.UnregisterFunctionResponse, error) {
	return &executorv1.UnregisterFunctionResponse{}, nil
}

func failingPool(t *testing.T, rt executorv1.FunctionRuntimeClient) *pool {
	return failingPoolOf(t, rt, 1)
}

// failingPoolOf is failingPool with concurrency slots.
func failingPoolOf(t *testing.T, rt executorv1.FunctionRuntimeClient, concurrency int) *pool {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &HandlerConfig{Name: "h", Runtime: "python", Dir: dir, Handler: "m.f", Concurrency: concurrency,
		Timeout: Duration(DefaultTimeout), IdleTimeout: Duration(DefaultIdleTimeout), LeaseTimeout: Duration(DefaultLeaseTimeout)}
	return newPool("test", "S", h, rt, zerolog.Nop(), &sync.Once{})
}

// A registration whose initialization failed once (the worker was killed
// while starting) is retried at the next attempt before it counts as
// permanent, so one crash does not pause invocations until an operator
// acts.
func TestRegistrationFailedOnceIsRetried(t *testing.T) {
	rt := &failingRuntime{failures: 1}
	p := failingPool(t, rt)
	s, err := p.lease(context.Background())
	if err != nil {
		t.Fatalf("lease after one failed initialization: %v", err)
	}
	p.release(s)
	if len(rt.attempts) != 2 || rt.attempts[1] != rt.attempts[0]+1 {
		t.Fatalf("registration attempts %v, want a retry at the next attempt", rt.attempts)
	}
}

// A slot whose registration failed (its worker killed while starting)
// waits out its backoff while a free slot that has not failed registers
// for the next lease: one unlucky start does not fail every invocation
// until the backoff ends, nor become permanent on that slot alone.
func TestPoolLeasesAnotherSlotWhileOneBacksOff(t *testing.T) {
	rt := &failingRuntime{failures: 2} // both attempts of the first lease
	p := failingPoolOf(t, rt, 3)
	if _, err := p.lease(context.Background()); err == nil {
		t.Fatal("the first lease registered, want its two attempts failed")
	}
	for i := range 2 {
		s, err := p.lease(context.Background())
		if err != nil {
			t.Fatalf("lease %d after one slot's failure: %v (registrations %v)", i, err, rt.attempts)
		}
		if s.index == 0 {
			t.Fatalf("lease %d got slot 0, which is backing off", i)
		}
		p.release(s)
	}
}

// unregisterRecorder is failingRuntime that records whether each
// UnregisterFunction came with a context already ended (which the
// in-process client refuses before the runtime sees it).
type unregisterRecorder struct {
	failingRuntime
	ended []bool
}

func (u *unregisterRecorder) UnregisterFunction(ctx context.Context, in *executorv1.UnregisterFunctionRequest, o ...grpc.CallOption) (*executorv1.UnregisterFunctionResponse, error) {
	u.mu.Lock()
	u.ended = append(u.ended, ctx.Err() != nil)
	u.mu.Unlock()
	return u.failingRuntime.UnregisterFunction(ctx, in, o...)
}

// A registration of an earlier version of the handler that a lease finds
// (another slot registered the changed source) is unregistered even when
// that lease's invocation has ended meanwhile: the slot forgets its ID,
// so an unregister never sent would leave the worker running unseen.
func TestPoolUnregistersAnOutdatedRegistrationForAnEndedLease(t *testing.T) {
	rt := &unregisterRecorder{}
	p := failingPoolOf(t, rt, 2)
	a, err := p.lease(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.h.Dir, "m.py"), []byte("def f(x):\n    return [x]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := p.lease(context.Background()) // registers the new source
	if err != nil {
		t.Fatal(err)
	}
	p.release(b)
	p.release(a) // the most recently used: leased next
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.lease(ctx); err == nil {
		t.Fatal("a lease with an ended context succeeded")
	}
	if !slices.Equal(rt.ended, []bool{false}) {
		t.Fatalf("unregister calls (context ended?) %v, want one, sent with a live context", rt.ended)
	}
}

// A registration whose initialization keeps failing (a broken handler:
// syntax error, missing module) becomes permanent after permanentAfter
// rounds of backoff, and the error says why; before that, invocations are
// retried normally (503), because a worker killed while starting is not a
// permanent fault.
func TestRegistrationFailingThreeRoundsIsPermanent(t *testing.T) {
	rt := &failingRuntime{failures: 1000}
	p := failingPool(t, rt)
	classes := classesByRound(t, p, "does not run: signal: killed")
	want := []Class{ClassUnavailable, ClassUnavailable, ClassPermanent}
	for i := range want {
		if classes[i] != want[i] {
			t.Fatalf("classes by round %v, want %v", classes, want)
		}
	}
	if len(rt.attempts) != 2*permanentAfter {
		t.Fatalf("registration attempts %v, want two per round", rt.attempts)
	}
}

// classesByRound leases from p once per round of backoff (its clock moved
// past each retry), permanentAfter rounds, and returns each failure's
// class; every failure must say want.
func classesByRound(t *testing.T, p *pool, want string) []Class {
	t.Helper()
	now := time.Unix(1_000_000, 0)
	p.now = func() time.Time { return now }
	var classes []Class
	for round := 0; round < permanentAfter; round++ {
		_, err := p.lease(context.Background())
		e, ok := err.(*Error)
		if !ok || !strings.Contains(e.Message, want) {
			t.Fatalf("round %d: lease error %v, want one saying %q", round, err, want)
		}
		classes = append(classes, e.Class)
		now = now.Add(maxRegisterBackoff)
	}
	return classes
}

// A caller of a remote runtime that registered the pool's run UID first,
// with the pool's (public) digest but its own handler, gets no invocation
// of the pool's: the runtime answers the pool's attempt with AlreadyExists
// (or FailedPrecondition below it), and the pool steps to the next
// attempt, which supersedes the squatter and runs the configured handler.
func TestPoolStepsPastAForeignRegistrationOfItsRunUID(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{"m.sh": "f() { echo '\"own\"'; }\n", "evil.sh": "run() { echo '\"evil\"'; }\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k, _ := kinds.Lookup("bash")
	srv := functionruntime.NewServer(functionruntime.Options{Adapter: k.New(), Logger: zerolog.Nop()})
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	client := functionruntime.NewLocalClient(srv)
	h := &HandlerConfig{Name: "h", Runtime: "bash", Dir: dir, Handler: "m.f", Concurrency: 1,
		Timeout: Duration(DefaultTimeout), IdleTimeout: Duration(DefaultIdleTimeout), LeaseTimeout: Duration(DefaultLeaseTimeout)}
	p := newPool("test", "S", h, client, zerolog.Nop(), &sync.Once{})
	digest, err := registrationDigest(h)
	if err != nil {
		t.Fatal(err)
	}
	uid := p.slots[0].runUID
	for attempt := int32(1); attempt <= 3; attempt++ {
		resp, err := client.RegisterFunction(context.Background(), &executorv1.RegisterFunctionRequest{
			RunUid: uid, RegistrationAttempt: attempt, WorkingDir: dir, Handler: "evil.run",
			IdleTimeoutSeconds: int64(DefaultIdleTimeout.Seconds()), RegistrationDigest: digest,
		})
		if err != nil || resp.GetState() != executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY {
			t.Fatalf("foreign registration at attempt %d: %v, %v", attempt, resp.GetState(), err)
		}
	}
	s, err := p.lease(context.Background())
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	defer p.release(s)
	if s.attempt != 4 {
		t.Errorf("pool registered at attempt %d, want 4 (the first past the foreign ones)", s.attempt)
	}
	out, err := client.InvokeFunction(context.Background(), &executorv1.InvokeFunctionRequest{
		Registration: &executorv1.FunctionRegistration{RunUid: s.runUID, RegistrationId: s.regID},
		Input:        []byte("{}"), ContentType: "application/json",
	})
	if err != nil || strings.TrimSpace(string(out.GetOutput())) != `"own"` {
		t.Fatalf("the pool's registration ran %q, %v; want the configured handler's \"own\"", out.GetOutput(), err)
	}
}

// Rule (README, error classes): a handler whose initialization fails,
// its file missing included, is retried with backoff for two rounds
// (503) before it is permanent; and once the file is there, the next
// round registers it. A Python module and a Bash file alike.
func TestMissingHandlerSourceGoesThroughTheRounds(t *testing.T) {
	for _, tc := range []struct{ runtime, handler, file, src string }{
		{"python", "m.f", "m.py", "def f(x):\n    return x\n"},
		{"bash", "m.f", "m.sh", "f() { echo \"$1\"; }\n"},
	} {
		t.Run(tc.runtime, func(t *testing.T) {
			dir := t.TempDir()
			k, _ := kinds.Lookup(tc.runtime)
			srv := functionruntime.NewServer(functionruntime.Options{Adapter: k.New(), Logger: zerolog.Nop()})
			t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
			h := &HandlerConfig{Name: "h", Runtime: tc.runtime, Dir: dir, Handler: tc.handler, Concurrency: 1,
				Timeout: Duration(DefaultTimeout), IdleTimeout: Duration(DefaultIdleTimeout), LeaseTimeout: Duration(DefaultLeaseTimeout)}
			p := newPool("test", "S", h, functionruntime.NewLocalClient(srv), zerolog.Nop(), &sync.Once{})
			t.Cleanup(func() { _ = p.close(context.Background()) })
			classes := classesByRound(t, p, tc.file)
			if want := []Class{ClassUnavailable, ClassUnavailable, ClassPermanent}; !slices.Equal(classes, want) {
				t.Fatalf("classes by round %v, want %v", classes, want)
			}
			if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := p.lease(context.Background())
			if err != nil {
				t.Fatalf("lease once %s exists: %v", tc.file, err)
			}
			p.release(s)
		})
	}
}
