package bridge

import (
	"context"
	"errors"
	"net"
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

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// hungRuntimeServer is a remote FunctionRuntime whose registrations are
// READY at once and whose InvokeFunction never answers (a stopped or
// partitioned runtime); ended receives why each call's context ended on
// the server's side.
type hungRuntimeServer struct {
	executorv1.UnimplementedFunctionRuntimeServer
	ended chan error
}

func (s *hungRuntimeServer) RegisterFunction(_ context.Context, in *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
	return &executorv1.RegisterFunctionResponse{
		Registration: &executorv1.FunctionRegistration{RunUid: in.RunUid, RegistrationId: "reg_hung"},
		State:        executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY,
	}, nil
}

func (s *hungRuntimeServer) FunctionStatus(_ context.Context, in *executorv1.FunctionStatusRequest) (*executorv1.FunctionStatusResponse, error) {
	return &executorv1.FunctionStatusResponse{Registration: in.Registration,
		State: executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY}, nil
}

func (s *hungRuntimeServer) InvokeFunction(ctx context.Context, _ *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		// Without a deadline of its own the call would wait for ever.
		return nil, status.Error(codes.Internal, "InvokeFunction came without a deadline (grpc-timeout)")
	}
	<-ctx.Done()
	s.ended <- ctx.Err()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// Over a real gRPC connection to a remote runtime that does not answer,
// the invocation ends at the handler's timeout plus InvokeDeadlineMargin
// as a timeout (504), and the deadline reaches the runtime, whose own
// call ends with it (so a runtime that comes back frees the registration).
func TestRemoteRuntimeThatDoesNotAnswerTimesOut(t *testing.T) {
	t.Parallel() // waits out the margin
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hung := &hungRuntimeServer{ended: make(chan error, 1)}
	executorv1.RegisterFunctionRuntimeServer(srv, hung)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	rc, err := dialRuntime("python", lis.Addr().String(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.close(context.Background()) })
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &HandlerConfig{Name: "h", Runtime: "python", Dir: dir, Handler: "m.f", Concurrency: 1,
		Timeout: Duration(100 * time.Millisecond), IdleTimeout: Duration(DefaultIdleTimeout), LeaseTimeout: Duration(DefaultLeaseTimeout)}
	p := newPool("test", "S", h, rc.client, zerolog.Nop(), &sync.Once{})

	_, _, err = p.invoke(context.Background(), "inv_1", []byte(`1`), "application/json")
	var e *Error
	if !errors.As(err, &e) || e.Class != ClassTimeout || !strings.Contains(e.Message, "did not answer") {
		t.Fatalf("invoke on a runtime that does not answer: %v, want a timeout saying so", err)
	}
	if got := <-hung.ended; !errors.Is(got, context.DeadlineExceeded) && !errors.Is(got, context.Canceled) {
		t.Fatalf("the runtime's call ended with %v", got)
	}
}
