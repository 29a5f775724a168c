package bridge_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// restartingRuntime makes the fake runtime forget every registration when
// restart is called, as a remote runtime that restarted has: each
// registration ID names the runtime's generation, and one of an earlier
// generation gets the real server's NotFound.
func restartingRuntime(f *fakeRuntime) (restart func()) {
	var gen atomic.Int32
	f.setRegister(func(in *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		return &executorv1.RegisterFunctionResponse{
			Registration: &executorv1.FunctionRegistration{RunUid: in.RunUid, RegistrationId: fmt.Sprintf("reg_g%d_%s", gen.Load(), in.RunUid)},
			State:        executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
		}, nil
	})
	f.setInvoke(func(_ context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		if !strings.HasPrefix(r.Registration.RegistrationId, fmt.Sprintf("reg_g%d_", gen.Load())) {
			return nil, runtimeError(codes.NotFound, functionruntime.ReasonRegistrationNotFound,
				"no registration for run_uid "+r.Registration.RunUid+" on this Runtime Server; register it first")
		}
		return &executorv1.InvokeFunctionResponse{Output: r.Input, ContentType: "application/json"}, nil
	})
	return func() { gen.Add(1) }
}

// twoWarm is Svc/fn with two warm registrations.
func twoWarm(dir string) string {
	return svcFnConfig(dir, "        timeout: 2s\n        concurrency: 2\n        min_warm: 2\n")
}

// After the runtime restarted, every warm registration is gone: the
// first invocation re-registers the one it found gone and runs, rather
// than retrying on the next warm registration, just as gone, and failing
// with 503.
func TestRestartedRuntimeIsReRegisteredNotRetriedOnAnotherStaleRegistration(t *testing.T) {
	fake := newFakeRuntime()
	restart := restartingRuntime(fake)
	h := newHarnessFake(t, twoWarm, bridge.Options{}, fake)
	warmed := h.fake.registers.Load()
	if warmed != 2 {
		t.Fatalf("min_warm 2 registered %d", warmed)
	}
	restart()
	frames := h.play(6, fresh(`{}`), nil)
	wantTypes(t, frames, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	if n := h.fake.registers.Load() - warmed; n != 1 {
		t.Fatalf("registered %d times after the restart, want 1 (the registration found gone)", n)
	}
}

// A registration still unusable after its re-registration ends with 503,
// and the re-registration its message names really happened.
func TestStillStaleAfterReRegisteringSaysSoTruly(t *testing.T) {
	h := newHarnessConfig(t, twoWarm)
	before := h.fake.registers.Load()
	h.fake.setInvoke(func(_ context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		return nil, runtimeError(codes.NotFound, functionruntime.ReasonRegistrationNotFound, "no registration for run_uid "+r.Registration.RunUid)
	})
	e := errorOf(t, h.play(6, fresh(`{}`), nil))
	if e.GetCode() != 503 || !strings.Contains(e.GetMessage(), "after re-registering") {
		t.Fatalf("ErrorMessage %v, want 503 after re-registering", e)
	}
	if n := h.fake.registers.Load() - before; n != 1 {
		t.Fatalf("registered %d times before answering 503, want 1: the message says it re-registered", n)
	}
}
