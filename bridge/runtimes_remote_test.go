package bridge

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
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

// downRuntime holds a stopped runtime's address: it accepts each
// connection attempt and closes it at once, a failed handshake that backs
// the client off as a refused connection does, and counts the attempts.
type downRuntime struct {
	lis      net.Listener
	attempts atomic.Int32
	done     chan struct{}
}

func holdDown(t *testing.T, addr string) *downRuntime {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	d := &downRuntime{lis: lis, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			d.attempts.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(d.release)
	return d
}

// release frees the address, so the runtime can restart on it.
func (d *downRuntime) release() { _ = d.lis.Close(); <-d.done }

// waitDown returns once the client has failed at least attempts
// connection attempts and at least minDown has passed: with gRPC's
// default backoff (1 s growing 1.6 times per failure) five failures put
// the next attempt 5 to 8 s away. poke runs every 200 ms meanwhile.
func (d *downRuntime) waitDown(t *testing.T, attempts int32, minDown time.Duration, poke func()) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for d.attempts.Load() < attempts || time.Since(start) < minDown {
		if time.Now().After(deadline) {
			t.Fatalf("%d connection attempts in %s while the runtime was down, want %d", d.attempts.Load(), time.Since(start), attempts)
		}
		poke()
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d failed connection attempts in %s", d.attempts.Load(), time.Since(start).Round(time.Millisecond))
}

// A remote runtime that was down long enough for connection attempts to
// back off is used again within a few seconds of its restart: its
// connection reconnects by itself (status polls and registrations depend
// on it), and readiness says so as soon as it does.
func TestRemoteRuntimeReconnectsSoonAfterRestart(t *testing.T) {
	t.Run("connection", func(t *testing.T) {
		t.Parallel() // waits out the runtime's downtime
		// The longest backoff (2 s + 20%) with room for a loaded host; by
		// default the next attempt would be 8 s or more away (and five
		// failed attempts would not fit waitDown's 4 s).
		const backWithin = 6 * time.Second
		addr, stop := servePythonRuntime(t)
		rc, err := dialRuntime("python", addr, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rc.close(context.Background()) })
		waitState := func(want connectivity.State, within time.Duration) bool {
			ctx, cancel := context.WithTimeout(context.Background(), within)
			defer cancel()
			for s := rc.conn.GetState(); s != want; s = rc.conn.GetState() {
				rc.conn.Connect() // out of IDLE, as a call would
				if !rc.conn.WaitForStateChange(ctx, s) {
					return false
				}
			}
			return true
		}
		if !waitState(connectivity.Ready, 10*time.Second) {
			t.Fatalf("never connected: %s", rc.conn.GetState())
		}

		stop()
		down := holdDown(t, addr)
		down.waitDown(t, 5, 4*time.Second, rc.conn.Connect) // out of IDLE, as a status poll would
		down.release()
		serveRuntime(t, "python", listenAgain(t, addr))
		if !waitState(connectivity.Ready, backWithin) {
			t.Fatalf("runtime back for %s, connection still %s", backWithin, rc.conn.GetState())
		}
	})
	t.Run("readiness", func(t *testing.T) {
		t.Parallel() // waits out the runtime's downtime
		// A probe resets the backoff; by default the next attempt would
		// be 8 s or more away.
		const backWithin = 4 * time.Second
		addr, stop := servePythonRuntime(t)
		b := remoteBridge(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		probe := func() error { b.ready.checked = time.Time{}; return b.Ready(ctx) } // a load balancer's probe, uncached
		if err := probe(); err != nil {
			t.Fatalf("runtime serving: %v", err)
		}

		stop()
		down := holdDown(t, addr)
		down.waitDown(t, 5, 4*time.Second, func() { _ = probe() })
		down.release()
		serveRuntime(t, "python", listenAgain(t, addr))
		back := time.Now()
		for err := probe(); err != nil; err = probe() {
			if time.Since(back) > backWithin {
				t.Fatalf("runtime back for %s, Ready still: %v", backWithin, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// servePythonRuntime serves a python runtime on a free loopback port,
// returning its address and what stops it.
func servePythonRuntime(t *testing.T) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis.Addr().String(), serveRuntime(t, "python", lis)
}

// listenAgain listens on addr, which a runtime just gave up.
func listenAgain(t *testing.T, addr string) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("restarting the runtime on %s: %v", addr, err)
	}
	return lis
}
