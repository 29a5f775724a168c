package bridge

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// remoteBridge is a bridge, not started, whose one handler S/f runs on the
// remote python runtime at addr.
func remoteBridge(t *testing.T, addr string) *Bridge {
	t.Helper()
	return remoteBridgeWith(t, addr, "")
}

// remoteBridgeWith is remoteBridge with more top-level configuration.
func remoteBridgeWith(t *testing.T, addr, extra string) *Bridge {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig([]byte(extra+"runtimes: {python: \""+addr+"\"}\nservices:\n  - name: S\n    handlers:\n      - {name: f, runtime: python, dir: ., handler: m.f}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// A replica is ready once started and while its remote runtime serves;
// the reason it is not names the runtime.
func TestReadyFollowsStartAndRemoteRuntime(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs, stop := serveRuntimeGRPC(t, "python", lis)
	addr := lis.Addr().String()
	b := remoteBridge(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recheck := func() error { b.ready.checked = time.Time{}; return b.Ready(ctx) }

	if err := recheck(); err == nil || !strings.HasPrefix(err.Error(), "starting") {
		t.Fatalf("before Start: %v, want starting", err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recheck(); err != nil {
		t.Fatalf("started, runtime serving: %v", err)
	}
	gs.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := recheck(); err == nil || err.Error() != "runtimes.python ("+addr+"): NOT_SERVING" {
		t.Fatalf("runtime not serving: %v", err)
	}
	// With request identity on, the unsigned answer does not tell an
	// outsider where the runtime is; the log has the details.
	b.cfg.IdentityKeys = []string{"publickeyv1_any"}
	if err := recheck(); err == nil || strings.Contains(err.Error(), addr) ||
		err.Error() != "runtimes.python does not answer its health check (details in the bridge's log)" {
		t.Fatalf("runtime not serving, identity keys set: %v", err)
	}
	b.cfg.IdentityKeys = nil
	stop()
	if err := recheck(); err == nil || !strings.HasPrefix(err.Error(), "runtimes.python ("+addr+"): ") {
		t.Fatalf("runtime gone: %v", err)
	}
}

// A remote runtime address that serves HTTP but not gRPC (a web server, a
// wrong port) answers every call with 404, which gRPC reads as
// Unimplemented, as a runtime without the health service answers the
// health check: the replica must not call itself ready on it. A
// FunctionRuntime server without the health service still counts.
func TestReadyRefusesAnHTTPServerThatIsNotARuntime(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	notFound := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols)}
	notFound.Protocols.SetUnencryptedHTTP2(true) // gRPC's prior-knowledge h2c
	go func() { _ = notFound.Serve(lis) }()
	t.Cleanup(func() { _ = notFound.Close() })

	k, _ := kinds.Lookup("python")
	fn := functionruntime.NewServer(functionruntime.Options{Adapter: k.New(), Logger: zerolog.Nop()})
	t.Cleanup(func() { _ = fn.Shutdown(context.Background()) })
	bare := grpc.NewServer() // FunctionRuntime without grpc.health.v1
	executorv1.RegisterFunctionRuntimeServer(bare, fn)
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = bare.Serve(lis2) }()
	t.Cleanup(bare.Stop)

	for _, tc := range []struct {
		name, addr string
		wantErr    string
	}{
		{"HTTP 404", lis.Addr().String(), "not a FunctionRuntime server"},
		{"runtime without health", lis2.Addr().String(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := remoteBridge(t, tc.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			err := b.Ready(ctx)
			t.Logf("Ready: %v", err)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Ready: %v, want ready", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Ready: %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

// serveRuntime serves a FunctionRuntime server of the given kind, as
// `bridge runtime serve --runtime KIND` does, on lis; stop (also run at
// the test's end) stops it at once, as a SIGKILL would.
func serveRuntime(t *testing.T, kind string, lis net.Listener) (stop func()) {
	t.Helper()
	_, stop = serveRuntimeGRPC(t, kind, lis)
	return stop
}

// serveRuntimeGRPC is serveRuntime that also returns the gRPC server, whose
// health service a test sets.
func serveRuntimeGRPC(t *testing.T, kind string, lis net.Listener) (gs *functionruntime.GRPCServer, stop func()) {
	t.Helper()
	k, ok := kinds.Lookup(kind)
	if !ok {
		t.Fatalf("no runtime kind %q", kind)
	}
	fn := functionruntime.NewServer(functionruntime.Options{Adapter: k.New(), Logger: zerolog.Nop()})
	gs = functionruntime.NewGRPCServer(fn)
	go func() { _ = gs.Server.Serve(lis) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			gs.Stop()
			_ = fn.Shutdown(context.Background())
		})
	}
	t.Cleanup(stop)
	return gs, stop
}

// A python handler sent to a bash runtime server never runs as the bash
// file of the same name: the registration is refused as of another kind,
// and the invocation pauses (a configuration error) with words that say
// so.
func TestInvokeOnARuntimeOfAnotherKindIsRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveRuntime(t, "bash", lis)
	b := remoteBridge(t, lis.Addr().String())
	if err := os.WriteFile(filepath.Join(b.cfg.Services[0].Handlers[0].Dir, "m.sh"), []byte("f() { echo '\"the bash file ran\"'; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := b.Invoke(ctx, "S", "f", []byte(`1`))
	var be *Error
	if !errors.As(err, &be) || be.Class != ClassPermanent || !strings.Contains(err.Error(), `this FunctionRuntime server runs bash handlers, not "python" ones`) {
		t.Fatalf("Invoke = %v, %v; want a permanent refusal naming both kinds", res, err)
	}
}

// A runtime of another kind at a runtimes: address (runtimes.python
// pointing at `bridge runtime serve --runtime bash`) fails every handler
// of that kind, so the replica is not ready, and the reason names the
// kind it serves. A server that publishes no kind (an older `bridge
// runtime serve`, another implementation of the contract) cannot be told
// apart and still counts.
func TestReadyRefusesARuntimeOfAnotherKind(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serve   func(t *testing.T, lis net.Listener)
		wantErr string // "" for ready; ADDR stands for the address
	}{
		{"bash", func(t *testing.T, lis net.Listener) { serveRuntime(t, "bash", lis) },
			"runtimes.python (ADDR): serves another runtime kind (bash)"},
		{"python", func(t *testing.T, lis net.Listener) { serveRuntime(t, "python", lis) }, ""},
		{"no kind published", func(t *testing.T, lis net.Listener) {
			k, _ := kinds.Lookup("bash")
			fn := functionruntime.NewServer(functionruntime.Options{Adapter: k.New(), Logger: zerolog.Nop()})
			gs := grpc.NewServer()
			executorv1.RegisterFunctionRuntimeServer(gs, fn)
			hs := health.NewServer() // "" SERVING only
			healthpb.RegisterHealthServer(gs, hs)
			go func() { _ = gs.Serve(lis) }()
			t.Cleanup(func() { gs.Stop(); _ = fn.Shutdown(context.Background()) })
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			tc.serve(t, lis)
			b := remoteBridge(t, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			err = b.Ready(ctx)
			want := strings.ReplaceAll(tc.wantErr, "ADDR", addr)
			switch {
			case want == "" && err != nil:
				t.Fatalf("Ready: %v, want ready", err)
			case want != "" && (err == nil || err.Error() != want):
				t.Fatalf("Ready: %v, want %q", err, want)
			}
		})
	}
}

// A runtime listed in shared_runtimes does not gate readiness: replicas
// sharing it would all be taken out at once, the handlers of every other
// kind with them, by one runtime's outage.
func TestReadyLeavesSharedRuntimesOut(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := serveRuntimeGRPC(t, "python", lis)
	b := remoteBridgeWith(t, lis.Addr().String(), "shared_runtimes: [python]\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	gs.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	b.ready.checked = time.Time{}
	if err := b.Ready(ctx); err != nil {
		t.Fatalf("shared runtime NOT_SERVING: %v, want ready", err)
	}

	// Only a kind with a remote runtime can be one.
	_, err = ParseConfig([]byte("shared_runtimes: [bash]\nservices:\n  - name: S\n    handlers:\n      - {name: f, runtime: python, dir: ., handler: m.f}\n"), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `shared_runtimes[0]: "bash" names no remote runtime`) {
		t.Fatalf("shared_runtimes without its runtime: %v", err)
	}
}
