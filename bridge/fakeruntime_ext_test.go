package bridge_test

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// fakeRuntime is an in-memory FunctionRuntime for the bridge's own rules:
// it counts calls and lets a test script what RegisterFunction and
// InvokeFunction answer. The real runtime's rules are tested in package
// functionruntime; here only the bridge's reaction matters.
type fakeRuntime struct {
	registers, invokes, unregisters atomic.Int32
	// hangUnregister makes UnregisterFunction wait for its context's end
	// (a runtime that does not answer); lateUnregisters counts the calls
	// that came with their context already ended.
	hangUnregister  atomic.Bool
	lateUnregisters atomic.Int32

	mu       sync.Mutex
	register func(*executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error)
	invoke   func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error)
	lastReq  *executorv1.InvokeFunctionRequest
	attempts []int32
}

var _ executorv1.FunctionRuntimeClient = (*fakeRuntime)(nil)

func newFakeRuntime() *fakeRuntime {
	f := &fakeRuntime{}
	f.invoke = func(_ context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		return &executorv1.InvokeFunctionResponse{Registration: r.Registration, InvocationId: r.InvocationId,
			Output: r.Input, ContentType: "application/json", Outputs: map[string]string{"echoed": "yes"}}, nil
	}
	return f
}

func (f *fakeRuntime) RegisterFunction(_ context.Context, in *executorv1.RegisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.RegisterFunctionResponse, error) {
	f.registers.Add(1)
	f.mu.Lock()
	f.attempts = append(f.attempts, in.RegistrationAttempt)
	reg := f.register
	f.mu.Unlock()
	if reg != nil {
		return reg(in)
	}
	return &executorv1.RegisterFunctionResponse{
		Registration: &executorv1.FunctionRegistration{RunUid: in.RunUid, RegistrationId: "reg_fake"},
		State:        executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
	}, nil
}

func (f *fakeRuntime) FunctionStatus(_ context.Context, in *executorv1.FunctionStatusRequest, _ ...grpc.CallOption) (*executorv1.FunctionStatusResponse, error) {
	return &executorv1.FunctionStatusResponse{Registration: in.Registration,
		State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED, FatalError: "import failed: SyntaxError"}, nil
}

func (f *fakeRuntime) InvokeFunction(ctx context.Context, in *executorv1.InvokeFunctionRequest, _ ...grpc.CallOption) (*executorv1.InvokeFunctionResponse, error) {
	f.invokes.Add(1)
	f.mu.Lock()
	f.lastReq = in
	inv := f.invoke
	f.mu.Unlock()
	return inv(ctx, in)
}

func (f *fakeRuntime) UnregisterFunction(ctx context.Context, in *executorv1.UnregisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.UnregisterFunctionResponse, error) {
	f.unregisters.Add(1)
	if ctx.Err() != nil {
		f.lateUnregisters.Add(1)
	}
	if f.hangUnregister.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &executorv1.UnregisterFunctionResponse{Registration: in.Registration}, nil
}

func (f *fakeRuntime) setInvoke(fn func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error)) {
	f.mu.Lock()
	f.invoke = fn
	f.mu.Unlock()
}

func (f *fakeRuntime) setRegister(fn func(*executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error)) {
	f.mu.Lock()
	f.register = fn
	f.mu.Unlock()
}

// readyAs answers a registration READY, with registration ID regID.
func readyAs(in *executorv1.RegisterFunctionRequest, regID string) *executorv1.RegisterFunctionResponse {
	return &executorv1.RegisterFunctionResponse{
		Registration: &executorv1.FunctionRegistration{RunUid: in.RunUid, RegistrationId: regID},
		State:        executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
	}
}

// runtimeError builds the status the real server returns, with its
// ErrorInfo reason.
func runtimeError(code codes.Code, reason, msg string) error {
	return runtimeErrorWith(code, reason, msg, nil)
}

// runtimeErrorWith is runtimeError with ErrorInfo metadata.
func runtimeErrorWith(code codes.Code, reason, msg string, md map[string]string) error {
	st, _ := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: functionruntime.ErrorDomain, Metadata: md})
	return st.Err()
}
