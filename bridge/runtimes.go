package bridge

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// runtimeConn is the FunctionRuntime a runtime kind talks to: an embedded
// in-process server (no network hop) or a remote gRPC server.
type runtimeConn struct {
	kind     string
	client   executorv1.FunctionRuntimeClient
	embedded *functionruntime.Server
	conn     *grpc.ClientConn
}

// isEmbedded says r is an in-process server (false for nil).
func (r *runtimeConn) isEmbedded() bool { return r != nil && r.embedded != nil }

// dialRuntime connects one runtime kind: embedded when address is empty,
// else a remote server at host:port or unix:///path.
func dialRuntime(kind, address string, log zerolog.Logger) (*runtimeConn, error) {
	if address == "" {
		k, ok := kinds.Lookup(kind)
		if !ok {
			return nil, fmt.Errorf("unknown runtime kind %q", kind)
		}
		// How worker limits are enforced is a fact of this process, not of
		// one runtime kind: logged once, without the kind's label.
		functionruntime.LogWorkerLimitMechanisms(log)
		srv := functionruntime.NewServer(functionruntime.Options{
			Adapter: k.New(),
			Logger:  log.With().Str("runtime", kind).Logger(),
		})
		return &runtimeConn{kind: kind, client: functionruntime.NewLocalClient(srv), embedded: srv}, nil
	}
	target := address
	if !strings.HasPrefix(target, "unix://") {
		target = "passthrough:///" + address
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(remoteKeepalive),
		grpc.WithConnectParams(remoteConnect),
		grpc.WithDefaultCallOptions(functionruntime.ClientCallOptions()...))
	if err != nil {
		return nil, fmt.Errorf("runtimes.%s: %w", kind, err)
	}
	return &runtimeConn{kind: kind, client: executorv1.NewFunctionRuntimeClient(conn), conn: conn}, nil
}

// remoteKeepalive makes a remote runtime that stopped answering (a hung
// process, a partitioned network, a peer gone without a FIN) a closed
// connection: after Time without a frame from it while a call is under
// way, the bridge sends an HTTP/2 PING and closes the connection when no
// answer came within Timeout; its calls fail Unavailable (503, retried)
// and the next ones connect afresh. Each call is bounded on its own
// besides (InvokeDeadlineMargin). Time is not shorter than what `bridge
// runtime serve` accepts: it sets no keepalive enforcement policy, so
// gRPC's default applies (at least 5 minutes between pings, none without
// a call under way), and a client pinging more often is sent GOAWAY
// too_many_pings, which would end its calls under way.
var remoteKeepalive = keepalive.ClientParameters{
	Time:                5 * time.Minute,
	Timeout:             20 * time.Second,
	PermitWithoutStream: false,
}

// remoteConnect paces reconnecting to a remote runtime. gRPC's default
// (1 s growing 1.6 times per failure up to 120 s) leaves a runtime that
// was down a few minutes unused for up to 2 minutes after it is back:
// readiness fails, min_warm registrations and invocations wait. One
// runtime serves a few bridge replicas, and a refused connection is cheap,
// so retrying at least every 2 s (jittered, so replicas do not retry in
// step) costs it little. A connection attempt, handshake included, gets 5
// s: on a loopback, a Unix socket or a LAN one that takes longer finds a
// runtime that would not answer calls either.
var remoteConnect = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   2 * time.Second,
	},
	MinConnectTimeout: 5 * time.Second,
}

func (r *runtimeConn) close(ctx context.Context) error {
	switch {
	case r.embedded != nil:
		return r.embedded.Shutdown(ctx)
	case r.conn != nil:
		return r.conn.Close()
	}
	return nil // an injected client belongs to whoever injected it
}
