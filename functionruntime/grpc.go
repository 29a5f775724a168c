package functionruntime

import (
	"context"
	"errors"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// messageHeadroom is added to the payload bounds to size gRPC's own message
// limits, so that an oversized input reaches the server's own check (a
// clear INPUT_TOO_LARGE) instead of gRPC's generic ResourceExhausted, and a
// maximal output fits in a response.
const messageHeadroom = 1 << 20

// MessageFloor is the least gRPC message limit on both ends of a call,
// whatever the payload bounds: twice restate-server's default message size
// (32 MiB), so an input Restate delivers and a server's bound refuses gets
// the server's INPUT_TOO_LARGE (InvalidArgument, never retried) rather
// than gRPC's ResourceExhausted, which the contract maps to 429: a busy
// registration, retried for ever. A client does not know the server's
// bounds, which may be raised (--max-input-bytes), so it sends up to this
// floor too.
const MessageFloor = 64 << 20

// GRPCServer is a *grpc.Server serving one FunctionRuntime Server, gRPC
// health (grpc.health.v1) and server reflection, so grpcurl works without
// proto files.
type GRPCServer struct {
	*grpc.Server
	// Health is the health service; Serve sets it NOT_SERVING on shutdown.
	Health *health.Server
	fn     *Server
}

// KindHealthService is the grpc.health.v1 service name under which a
// server of the given runtime kind reports its status
// ("executor.v1.FunctionRuntime/python"). RegisterFunctionRequest names no
// runtime, so this is how a client learns which kind an address serves;
// a server of another kind answers NotFound for it.
func KindHealthService(kind string) string {
	return executorv1.FunctionRuntime_ServiceDesc.ServiceName + "/" + kind
}

// NewGRPCServer builds the gRPC server for s. Health reports SERVING for the
// empty service name, for executor.v1.FunctionRuntime and for
// [KindHealthService] of s's kind. opts are appended after the defaults, so
// they can override the message size limits.
func NewGRPCServer(s *Server, opts ...grpc.ServerOption) *GRPCServer {
	lim := s.Limits()
	base := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(max(lim.MaxInputBytes+messageHeadroom, MessageFloor)),
		grpc.MaxSendMsgSize(lim.MaxOutputBytes + messageHeadroom),
	}
	gs := grpc.NewServer(append(base, opts...)...)
	executorv1.RegisterFunctionRuntimeServer(gs, s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(executorv1.FunctionRuntime_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(KindHealthService(s.Kind()), healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return &GRPCServer{Server: gs, Health: hs, fn: s}
}

// AllowedRoots returns a server option that refuses, with InvalidArgument
// naming working_dir, every RegisterFunction whose working_dir, once its
// symlinks are resolved, is not one of dirs or beneath one; an accepted
// registration runs in the resolved path. An interpreter the registration
// names by path ([InterpreterMetadata]) must lie within them too. Relative dirs are taken from the
// current directory. It guards network callers, which this server does
// not authenticate; an in-process caller (NewLocalClient) is trusted.
func AllowedRoots(dirs []string) (grpc.ServerOption, error) {
	roots, err := resolveAllowedRoots(dirs)
	if err != nil {
		return nil, err
	}
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if reg, ok := req.(*executorv1.RegisterFunctionRequest); ok {
			dir, err := roots.confine(reg.GetWorkingDir())
			if err != nil {
				return nil, err
			}
			reg.WorkingDir = dir
			if ctx, err = roots.confineInterpreter(ctx, dir); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}), nil
}

// ClientCallOptions are the call options a remote client of this server
// should use: gRPC's default 4 MiB receive limit is below the default
// output bound, and its sends are bounded by [MessageFloor] (or a bigger
// default bound), so the server's own checks answer.
func ClientCallOptions() []grpc.CallOption {
	return []grpc.CallOption{
		grpc.MaxCallRecvMsgSize(max(DefaultMaxOutputBytes+messageHeadroom, MessageFloor)),
		grpc.MaxCallSendMsgSize(max(DefaultMaxInputBytes+messageHeadroom, MessageFloor)),
	}
}

// Serve serves lis until ctx ends, then shuts down gracefully: health turns
// NOT_SERVING, the listener stops accepting, every registration drains for
// at most drainTimeout (then in-flight invocations are cancelled), every
// worker is closed, and the remaining RPCs finish. It returns nil after a
// shutdown caused by ctx, or the error that stopped serving.
func (g *GRPCServer) Serve(ctx context.Context, lis net.Listener, drainTimeout time.Duration) error {
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Server.Serve(lis) }()

	select {
	case err := <-serveErr:
		// Serving stopped on its own: still release every worker.
		_ = g.fn.Shutdown(context.Background())
		return err
	case <-ctx.Done():
	}

	g.Health.Shutdown()
	// GracefulStop stops accepting at once and waits for running RPCs;
	// the drain below is what makes running invocations end.
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	drainCtx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	shutdownErr := g.fn.Shutdown(drainCtx)

	// Every registration is gone, so running RPCs end promptly; an RPC
	// that still hangs (a caller slow to read) gets a short grace.
	grace := time.NewTimer(5 * time.Second)
	defer grace.Stop()
	select {
	case <-stopped:
	case <-grace.C:
		g.Stop()
		<-stopped
	}
	if err := <-serveErr; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return shutdownErr
}
