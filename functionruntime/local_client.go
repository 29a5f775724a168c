package functionruntime

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// NewLocalClient returns a FunctionRuntimeClient that calls s directly, with
// no network hop, for a server embedded in the same process. It returns the
// same status errors a remote client would get, including Canceled or
// DeadlineExceeded when ctx ends while the server is still working (the
// server keeps going exactly as it would for a remote caller that went
// away). grpc.CallOptions are accepted and ignored.
//
// Requests are cloned before the server sees them, so a caller may reuse
// or modify a request after the call, as it could with a network client.
//
// Outgoing gRPC metadata reaches the server as incoming metadata, as over
// a network: the worker limits travel that way. Creating the client logs
// how worker limits are enforced (see [LogWorkerLimitMechanisms]).
func NewLocalClient(s *Server) executorv1.FunctionRuntimeClient {
	LogWorkerLimitMechanisms(s.log)
	return &localClient{s: s}
}

type localClient struct{ s *Server }

func (c *localClient) RegisterFunction(ctx context.Context, in *executorv1.RegisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.RegisterFunctionResponse, error) {
	return callLocal(ctx, in, c.s.RegisterFunction)
}

func (c *localClient) FunctionStatus(ctx context.Context, in *executorv1.FunctionStatusRequest, _ ...grpc.CallOption) (*executorv1.FunctionStatusResponse, error) {
	return callLocal(ctx, in, c.s.FunctionStatus)
}

func (c *localClient) InvokeFunction(ctx context.Context, in *executorv1.InvokeFunctionRequest, _ ...grpc.CallOption) (*executorv1.InvokeFunctionResponse, error) {
	return callLocal(ctx, in, c.s.InvokeFunction)
}

func (c *localClient) UnregisterFunction(ctx context.Context, in *executorv1.UnregisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.UnregisterFunctionResponse, error) {
	return callLocal(ctx, in, c.s.UnregisterFunction)
}

// callLocal runs one server method. The method runs in its own goroutine so
// that the caller returns as soon as ctx ends, as over a network; the
// method itself sees ctx and stops on its own (an invocation is cancelled,
// a registration wait returns).
func callLocal[Req proto.Message, Resp any](ctx context.Context, in Req, method func(context.Context, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	if err := ctx.Err(); err != nil {
		return zero, contextStatus(err)
	}
	req := proto.Clone(in).(Req)
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		ctx = metadata.NewIncomingContext(ctx, md.Copy())
	}
	type result struct {
		resp Resp
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := method(ctx, req)
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-ctx.Done():
		return zero, contextStatus(ctx.Err())
	}
}
