package bridge_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// hungInvoke plays a runtime that never answers (a stopped process, a
// partitioned network): the call ends only when its context does, as a
// gRPC client's call does at its deadline. A call without a deadline
// would wait for ever, so it fails at once instead.
func hungInvoke(deadlines chan<- time.Duration) func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
	return func(ctx context.Context, _ *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return nil, status.Error(codes.Internal, "InvokeFunction was called without a deadline: a hung runtime would hold it for ever")
		}
		if deadlines != nil {
			deadlines <- time.Until(dl)
		}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// The handler's timeout holds even when the runtime does not answer: the
// call has its own deadline, the timeout plus InvokeDeadlineMargin, and
// ends as a timeout the runtime answered would (504, retried).
func TestUnansweredInvocationTimesOutWith504(t *testing.T) {
	t.Parallel() // waits out the margin
	const timeout = 100 * time.Millisecond
	h := newHarnessConfig(t, func(dir string) string { return svcFnConfig(dir, "        timeout: 100ms\n") })
	deadlines := make(chan time.Duration, 1)
	h.fake.setInvoke(hungInvoke(deadlines))
	frames := h.play(6, fresh(`{}`), nil)
	wantTypes(t, frames, wire.RunCommandType, wire.ErrorMessageType)
	e := errorOf(t, frames)
	if e.GetCode() != 504 || !strings.Contains(e.GetMessage(), "did not answer") {
		t.Fatalf("ErrorMessage %v, want 504 saying the runtime did not answer", e)
	}
	left := <-deadlines
	if left <= timeout || left > timeout+bridge.InvokeDeadlineMargin {
		t.Fatalf("InvokeFunction deadline %s away, want more than the timeout %s and at most %s after it", left, timeout, bridge.InvokeDeadlineMargin)
	}
	h.fake.mu.Lock()
	got := h.fake.lastReq.GetTimeoutMillis()
	h.fake.mu.Unlock()
	if got != timeout.Milliseconds() {
		t.Fatalf("timeout_millis %d, want %d: the runtime enforces the timeout first", got, timeout.Milliseconds())
	}
}

// stoppingRuntime is a fake runtime whose registration stays busy after
// its caller gave up, until the test frees it, as a real runtime stopping
// the worker is (or one that was hung and comes back).
type stoppingRuntime struct {
	*fakeRuntime
	busy   atomic.Bool
	polled chan struct{}
}

func (r *stoppingRuntime) FunctionStatus(_ context.Context, in *executorv1.FunctionStatusRequest, _ ...grpc.CallOption) (*executorv1.FunctionStatusResponse, error) {
	var inFlight int32
	if r.busy.Load() {
		inFlight = 1
		select {
		case r.polled <- struct{}{}:
		default:
		}
	}
	return &executorv1.FunctionStatusResponse{Registration: in.Registration, InFlight: inFlight,
		State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY}, nil
}

// A registration whose InvokeFunction got no answer is not leased again
// while the runtime still reports the invocation in flight: the next
// attempt waits for it rather than being refused as busy (429) by the
// attempt before it.
func TestUnansweredInvocationSettlesBeforeTheNextLease(t *testing.T) {
	t.Parallel() // waits out the margin
	rt := &stoppingRuntime{fakeRuntime: newFakeRuntime(), polled: make(chan struct{}, 1)}
	hung := hungInvoke(nil)
	rt.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		if !rt.busy.CompareAndSwap(false, true) {
			return nil, runtimeError(codes.ResourceExhausted, functionruntime.ReasonRegistrationBusy, "registration is busy with the earlier attempt")
		}
		if string(r.Input) == `"hang"` {
			return hung(ctx, r) // busy stays set: the runtime is still stopping it
		}
		defer rt.busy.Store(false)
		return &executorv1.InvokeFunctionResponse{Output: r.Input, ContentType: "application/json"}, nil
	})
	b := startBridge(t, func(dir string) string {
		return svcFnConfig(dir, "        timeout: 100ms\n        concurrency: 1\n")
	}, bridge.Options{Logger: zerolog.Nop()}, rt)

	_, err := b.Invoke(context.Background(), "Svc", "fn", []byte(`"hang"`))
	var be *bridge.Error
	if !errors.As(err, &be) || be.Class != bridge.ClassTimeout {
		t.Fatalf("unanswered invocation: %v, want a timeout", err)
	}
	type result struct {
		res *bridge.Result
		err error
	}
	next := make(chan result, 1)
	go func() {
		res, err := b.Invoke(context.Background(), "Svc", "fn", []byte(`"next"`))
		next <- result{res, err}
	}()
	select {
	case <-rt.polled:
		rt.busy.Store(false) // the runtime has stopped the earlier invocation
	case r := <-next:
		t.Fatalf("the next invocation ran before the runtime reported the earlier one over: %v, %v", r.res, r.err)
	}
	if r := <-next; r.err != nil || string(r.res.Output) != `"next"` {
		t.Fatalf("next invocation: %v, %v; want it to run once the registration is idle", r.res, r.err)
	}
}
