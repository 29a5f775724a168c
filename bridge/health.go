package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// Readiness of a replica for a load balancer (GET /health/ready): the
// bridge is ready once Start has registered the min_warm registrations and
// while every remote runtime it uses answers its gRPC health check, but
// those of shared_runtimes, whose outage is every replica's. A
// handler whose own registration fails is not counted: Restate already
// retries or pauses its invocations, and taking the replica out would stop
// the healthy handlers too.

// readyCacheFor is how long a remote runtime's health answer is reused, so
// frequent probes of several load balancers cost the runtime one check.
// A variable for tests.
var readyCacheFor = time.Second

// readiness caches the last remote-runtime check.
type readiness struct {
	mu      sync.Mutex
	checked time.Time
	err     error
	logged  string // the last detailed failure logged, so probes log it once
}

// Ready reports why the bridge cannot take invocations now, or nil.
func (b *Bridge) Ready(ctx context.Context) error {
	if !b.started.Load() {
		return errors.New("starting: min_warm registrations not ready yet")
	}
	b.ready.mu.Lock()
	defer b.ready.mu.Unlock()
	if time.Since(b.ready.checked) < readyCacheFor {
		return b.ready.err
	}
	err := b.checkRuntimes(ctx)
	b.ready.err, b.ready.checked = err, time.Now()
	var rf *runtimeFailure
	if !errors.As(err, &rf) {
		b.ready.logged = ""
		return err
	}
	if detail := rf.Error(); detail != b.ready.logged {
		b.ready.logged = detail
		b.log.Warn().Str("runtime", rf.kind).Msg("not ready: " + detail)
	}
	if len(b.cfg.IdentityKeys) > 0 {
		// Readiness is unsigned: with request identity on, whoever can
		// reach the listener must not learn the runtimes' addresses.
		b.ready.err = fmt.Errorf("runtimes.%s does not answer its health check (details in the bridge's log)", rf.kind)
	}
	return b.ready.err
}

// runtimeFailure is a remote runtime's failed health check.
type runtimeFailure struct {
	kind, addr, why string
}

func (f *runtimeFailure) Error() string {
	return fmt.Sprintf("runtimes.%s (%s): %s", f.kind, f.addr, f.why)
}

// checkRuntimes asks every remote runtime's grpc.health.v1 service (as
// `bridge runtime serve` offers) whether it serves, and whether it serves
// the kind it is configured for (runtimeKindFailure). A server without the
// health service is asked for FunctionStatus instead: any answer but
// Unimplemented shows a reachable FunctionRuntime server. An HTTP server
// that is not gRPC at all also reads as Unimplemented (its 404), and must
// not count as serving.
func (b *Bridge) checkRuntimes(ctx context.Context) error {
	names := make([]string, 0, len(b.runtimes))
	for k, rc := range b.runtimes {
		if rc.conn != nil && !slices.Contains(b.cfg.SharedRuntimes, k) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		rc := b.runtimes[k]
		if rc.conn.GetState() == connectivity.TransientFailure {
			// Connecting is backing off: try again now, so a runtime
			// that is back is seen by the next probe, not after the
			// backoff (this runs at most once a second, readyCacheFor).
			rc.conn.ResetConnectBackoff()
		}
		hc := healthpb.NewHealthClient(rc.conn)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		switch {
		case status.Code(err) == codes.Unimplemented:
			_, err := rc.client.FunctionStatus(ctx, &executorv1.FunctionStatusRequest{})
			if c := status.Code(err); c == codes.Unimplemented || c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.Canceled {
				return &runtimeFailure{k, b.cfg.Runtimes[k], "not a FunctionRuntime server: FunctionStatus: " + status.Convert(err).Message()}
			}
		case err != nil:
			return &runtimeFailure{k, b.cfg.Runtimes[k], status.Convert(err).Message()}
		case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			return &runtimeFailure{k, b.cfg.Runtimes[k], resp.GetStatus().String()}
		default:
			if why := runtimeKindFailure(ctx, hc, k); why != "" {
				return &runtimeFailure{k, b.cfg.Runtimes[k], why}
			}
		}
	}
	return nil
}

// runtimeKindFailure says why a serving runtime is not of the kind it is
// configured for, or "". A server publishes its kind as a health service
// (functionruntime.KindHealthService); one of another kind answers
// NotFound for ours, and its own kind is found by asking for the others.
// A server that publishes no kind at all (an older `bridge runtime
// serve`, another implementation of the contract) cannot be told apart
// and counts, as before.
func runtimeKindFailure(ctx context.Context, hc healthpb.HealthClient, kind string) string {
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: functionruntime.KindHealthService(kind)})
	switch {
	case status.Code(err) == codes.NotFound:
		for _, other := range kinds.Names() {
			if other == kind {
				continue
			}
			if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: functionruntime.KindHealthService(other)}); err == nil {
				return "serves another runtime kind (" + other + ")"
			}
		}
		return ""
	case err != nil:
		return status.Convert(err).Message()
	case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return resp.GetStatus().String()
	}
	return ""
}

// Drain stops taking invocations (readiness 503, new streams refused so
// that Restate retries them on another replica) and waits, bounded by ctx,
// until the invocations in flight have ended; see restate.Endpoint.Drain.
// The listener stays open, so probes see the drain. Close afterwards.
func (b *Bridge) Drain(ctx context.Context) error { return b.endpoint.Drain(ctx) }

// InFlight is the number of invocation streams being served.
func (b *Bridge) InFlight() int { return b.endpoint.InFlight() }

// Drain drains every generation's bridge (Bridge.Drain), the current one
// first: the streams a reload left on a replaced bridge are in flight too.
func (l *Live) Drain(ctx context.Context) error {
	for _, b := range l.serving() {
		if err := b.Drain(ctx); err != nil {
			return err
		}
	}
	return nil
}

// InFlight is the number of invocation streams being served, by every
// generation (Bridge.InFlight).
func (l *Live) InFlight() int {
	n := 0
	for _, b := range l.serving() {
		n += b.InFlight()
	}
	return n
}
