package bridge

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
)

// A replica is ready once started and while its remote runtime serves;
// the reason it is not names the runtime.
func TestReadyFollowsStartAndRemoteRuntime(t *testing.T) {
	k, _ := kinds.Lookup("python")
	fn := functionruntime.NewServer(functionruntime.Options{Adapter: k.New(), Logger: zerolog.Nop()})
	gs := functionruntime.NewGRPCServer(fn)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Server.Serve(lis) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			gs.Stop()
		}
		_ = fn.Shutdown(context.Background())
	})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	cfg, err := ParseConfig([]byte("runtimes: {python: \""+addr+"\"}\nservices:\n  - name: S\n    handlers:\n      - {name: f, runtime: python, dir: ., handler: m.f}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
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
	gs.Stop()
	stopped = true
	if err := recheck(); err == nil || !strings.HasPrefix(err.Error(), "runtimes.python ("+addr+"): ") {
		t.Fatalf("runtime gone: %v", err)
	}
}
