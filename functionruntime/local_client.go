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
// DeadlineExceeded when ctx ends. grpc.CallOptions are accepted and
// ignored.
//
// InvokeFunction, the call made for every invocation, runs in the
// caller's goroutine: when ctx ends the server stops the worker as it
// would for a remote caller that went away, and the call returns once it
// has, with the registration free again. The other calls return as soon
// as ctx ends, while the server goes on (a registration waiting for its
// worker, say).
//
// Requests are cloned before the server sees them, so a caller may reuse
// or modify a request after the call, as it could with a network client.
//
// Outgoing gRPC metadata reaches the server as incoming metadata, as over
// a network: the worker limits travel that way. Its creator logs how
// worker limits are enforced (see [LogWorkerLimitMechanisms]), once for
// the process rather than per server.
func NewLocalClient(s *Server) executorv1.FunctionRuntimeClient {
	return &localClient{s: s}
}

type localClient struct{ s *Server }

func (c *localClient) RegisterFunction(ctx context.Context, in *executorv1.RegisterFunctionRequest, _ ...grpc.CallOption) (*executorv1.RegisterFunctionResponse, error) {
	return callLocal(ctx, in, c.s.RegisterFunction)
}

func (c *localClient) FunctionStatus(ctx context.Context, in *executorv1.FunctionStatusRequest, _ ...grpc.CallOption) (*executorv1.FunctionStatusResponse, error) {
	return callLocal(ctx, in, c.s.FunctionStatus)
}

// InvokeFunction calls the server in this goroutine. A goroutine per call,
// as the other methods have, cost a bridge serving Python about a tenth of
// its CPU per invocation at c=1 (a thread woken to run the goroutine,
// another to hand the result back); the server's own handling of the
// caller's context makes a cancelled call return promptly without it.
func (c *localClient) InvokeFunction(ctx context.Context, in *executorv1.InvokeFunctionRequest, _ ...grpc.CallOption) (*executorv1.InvokeFunctionResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextStatus(err)
	}
	return c.s.InvokeFunction(incoming(ctx), proto.Clone(in).(*executorv1.InvokeFunctionRequest))
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
	ctx = incoming(ctx)
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

// incoming makes ctx's outgoing gRPC metadata the server's incoming
// metadata, as a network hop would.
func incoming(ctx context.Context) context.Context {
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		return metadata.NewIncomingContext(ctx, md.Copy())
	}
	return ctx
}
