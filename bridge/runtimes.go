package bridge

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
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

// dialRuntime connects one runtime kind: embedded when address is empty,
// else a remote server at host:port or unix:///path.
func dialRuntime(kind, address string, log zerolog.Logger) (*runtimeConn, error) {
	if address == "" {
		k, ok := kinds.Lookup(kind)
		if !ok {
			return nil, fmt.Errorf("unknown runtime kind %q", kind)
		}
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

func (r *runtimeConn) close(ctx context.Context) error {
	switch {
	case r.embedded != nil:
		return r.embedded.Shutdown(ctx)
	case r.conn != nil:
		return r.conn.Close()
	}
	return nil // an injected client belongs to whoever injected it
}
