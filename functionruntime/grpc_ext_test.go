package functionruntime_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// served runs a harness's server over gRPC on a Unix socket and returns a
// network client, the socket address, and a stop function that triggers the
// graceful shutdown and returns Serve's result. opts go to NewGRPCServer.
func served(t *testing.T, h *harness, drain time.Duration, opts ...grpc.ServerOption) (*grpc.ClientConn, string, func() error) {
	t.Helper()
	addr := "unix://" + filepath.Join(t.TempDir(), "fr.sock")
	lis, err := functionruntime.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	gs := functionruntime.NewGRPCServer(h.srv, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(ctx, lis, drain) }()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(functionruntime.ClientCallOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	var stopped bool
	var result error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-serveErr
		}
		return result
	}
	t.Cleanup(func() {
		conn.Close()
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return conn, addr, stop
}

// The network path behaves as the in-process one: the example calls of
// docs/spec/function-runtime-server-contract.md, status codes with their
// ErrorInfo details, health and reflection.
func TestGRPCServerOverNetwork(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	conn, _, _ := served(t, h, time.Second)
	cli := executorv1.NewFunctionRuntimeClient(conn)
	ctx := context.Background()

	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "executor.v1.FunctionRuntime"})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", hc.GetStatus(), err)
	}

	reg, err := cli.RegisterFunction(ctx, h.registerReq("2b5d...", 1, digest("x")))
	if err != nil || reg.GetState() != stateReady {
		t.Fatalf("RegisterFunction: %v, %v", reg, err)
	}
	resp, err := cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{
		Registration: reg.GetRegistration(), InvocationId: "01J", ContentType: "application/json",
		Input: []byte(`{"command":"status"}`),
	})
	if err != nil || string(resp.GetOutput()) != `echo:{"command":"status"}` || resp.GetInvocationId() != "01J" {
		t.Fatalf("InvokeFunction: %v, %v", resp, err)
	}

	// Error details survive the network hop.
	_, err = cli.RegisterFunction(ctx, h.registerReq("2b5d...", 1, digest("other")))
	wantCode(t, err, codes.AlreadyExists, functionruntime.ReasonDigestMismatch)
	_, err = cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: &executorv1.FunctionRegistration{RunUid: "2b5d...", RegistrationId: "reg_stale"}})
	wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationStale)

	// An input above gRPC's default 4 MiB but within the 6 MiB bound passes;
	// one above the bound gets the server's own clear error.
	big := make([]byte, 5<<20)
	for i := range big {
		big[i] = 'a'
	}
	resp, err = cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: reg.GetRegistration(), Input: big})
	if err != nil || len(resp.GetOutput()) != len(big)+5 {
		t.Fatalf("5 MiB input: %v", err)
	}
	_, err = cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: reg.GetRegistration(), Input: make([]byte, functionruntime.DefaultMaxInputBytes+1)})
	wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInputTooLarge)

	// Reflection lists the service, so grpcurl needs no proto files.
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "executor.v1.FunctionRuntime") {
		t.Errorf("reflection services = %v", names)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// An input over the server's bound, however far over it, is the server's
// INPUT_TOO_LARGE (InvalidArgument: the bridge fails the invocation
// terminally), never gRPC's ResourceExhausted, which the contract maps to
// 429 (busy, retried for ever): past the bound plus 1 MiB it used to be.
// The same holds for a server whose bound is below the default.
func TestGRPCOversizedInputIsInvalidNotBusy(t *testing.T) {
	for _, c := range []struct {
		name  string
		lim   functionruntime.Limits
		input int
	}{
		{"default bound, 8 MiB", functionruntime.Limits{}, 8 << 20},
		{"default bound, 40 MiB", functionruntime.Limits{}, 40 << 20},
		{"1 KiB bound, 2 MiB", functionruntime.Limits{MaxInputBytes: 1 << 10}, 2 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, &fakeAdapter{}, c.lim, nil)
			conn, _, _ := served(t, h, time.Second)
			cli := executorv1.NewFunctionRuntimeClient(conn)
			reg, err := cli.RegisterFunction(context.Background(), h.registerReq("big", 1, digest("x")))
			if err != nil {
				t.Fatal(err)
			}
			_, err = cli.InvokeFunction(context.Background(), &executorv1.InvokeFunctionRequest{Registration: reg.GetRegistration(), Input: make([]byte, c.input)})
			wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInputTooLarge)
			if cl := functionruntime.Classify(err); cl != functionruntime.ClassInvalid {
				t.Fatalf("Classify = %v, want ClassInvalid", cl)
			}
		})
	}
}

// Past every limit, gRPC refuses the message itself: that is no busy
// registration either. A ResourceExhausted without those words (another
// server's busy answer) still is.
func TestClassifyGRPCSizeRefusals(t *testing.T) {
	for msg, want := range map[string]functionruntime.ErrorClass{
		"grpc: received message larger than max (70000000 vs. 67108864)": functionruntime.ClassInvalid,
		"trying to send message larger than max (70000000 vs. 67108864)": functionruntime.ClassInvalid,
		"the function is busy": functionruntime.ClassBusy,
	} {
		if got := functionruntime.Classify(status.Error(codes.ResourceExhausted, msg)); got != want {
			t.Errorf("Classify(ResourceExhausted %q) = %v, want %v", msg, got, want)
		}
	}
}

// Graceful shutdown: stop accepting, drain in-flight invocations for at most
// the drain timeout, then cancel them, close every worker, return nil.
func TestGRPCServeGracefulShutdown(t *testing.T) {
	g := newGate()
	defer g.open()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	conn, addr, stop := served(t, h, 100*time.Millisecond)
	cli := executorv1.NewFunctionRuntimeClient(conn)
	reg, err := cli.RegisterFunction(context.Background(), h.registerReq("run-1", 1, digest("x")))
	if err != nil {
		t.Fatal(err)
	}
	invErr := make(chan error, 1)
	go func() {
		_, err := cli.InvokeFunction(context.Background(), &executorv1.InvokeFunctionRequest{Registration: reg.GetRegistration(), InvocationId: "held"})
		invErr <- err
	}()
	g.waitEntered(t)
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Serve returned %v, want nil after a graceful shutdown", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %v with a 100ms drain", d)
	}
	wantCode(t, <-invErr, codes.Aborted, functionruntime.ReasonInvocationAborted)
	if !ad.allWorkers()[0].closed.Load() {
		t.Error("worker not closed by shutdown")
	}
	// The socket is gone and nothing accepts any more.
	path := strings.TrimPrefix(addr, "unix://")
	if _, err := net.DialTimeout("unix", path, time.Second); err == nil {
		t.Error("socket still accepts after shutdown")
	}
}

// With AllowedRoots, a network registration outside the roots is refused
// before any worker starts, and one inside runs in its resolved path.
func TestGRPCServerAllowedRoots(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	root, err := filepath.EvalSymlinks(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(root, "run"), link); err != nil {
		t.Fatal(err)
	}
	cli := confinedClient(t, h, root)
	ctx := context.Background()

	req := h.registerReq("run-out", 1, digest("x"))
	req.WorkingDir = t.TempDir()
	_, err = cli.RegisterFunction(ctx, req)
	st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
	if !strings.HasPrefix(st.Message(), "working_dir:") || !strings.Contains(st.Message(), "not within an allowed root") {
		t.Errorf("message = %q", st.Message())
	}
	if got := functionruntime.ErrorInfo(err).GetMetadata()["field"]; got != "working_dir" {
		t.Errorf("ErrorInfo field = %q, want working_dir", got)
	}
	if n := ad.starts.Load(); n != 0 {
		t.Fatalf("adapter started %d workers for a refused working_dir", n)
	}

	req = h.registerReq("run-in", 1, digest("x"))
	req.WorkingDir = link
	reg, err := cli.RegisterFunction(ctx, req)
	if err != nil || reg.GetState() != stateReady {
		t.Fatalf("RegisterFunction inside the root: %v, %v", reg, err)
	}
	if got := ad.allWorkers()[0].spec.Dir; got != filepath.Join(root, "run") {
		t.Errorf("worker runs in %q, want the resolved %q", got, filepath.Join(root, "run"))
	}
}

func TestListen(t *testing.T) {
	dir := t.TempDir()
	t.Run("tcp host:port", func(t *testing.T) {
		lis, err := functionruntime.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		if lis.Addr().Network() != "tcp" {
			t.Errorf("network = %s", lis.Addr().Network())
		}
	})
	t.Run("unix socket is owner-only", func(t *testing.T) {
		path := filepath.Join(dir, "a.sock")
		lis, err := functionruntime.Listen("unix://" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != functionruntime.UnixSocketMode {
			t.Errorf("mode = %v, want %v", fi.Mode().Perm(), functionruntime.UnixSocketMode)
		}
		if got := lis.Addr().String(); got != path {
			t.Errorf("Addr = %s, want the socket's path %s", got, path)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("directory holds %d entries, want only the socket: the private bind directory was left behind", len(entries))
		}
	})
	t.Run("close removes the socket but not a file that replaced it", func(t *testing.T) {
		path := filepath.Join(dir, "closed.sock")
		lis, err := functionruntime.Listen("unix://" + path)
		if err != nil {
			t.Fatal(err)
		}
		lis.Close()
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("socket left after Close: %v", err)
		}
		lis, err = functionruntime.Listen("unix://" + path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		lis.Close()
		if b, _ := os.ReadFile(path); string(b) != "keep" {
			t.Error("Close removed a file that was not its socket")
		}
		os.Remove(path)
	})
	t.Run("abstract, relative after unix:// and too long socket paths are refused", func(t *testing.T) {
		// The private bind directory adds about 14 bytes to the path.
		long := filepath.Join(dir, strings.Repeat("d", 100-len(dir)))
		if err := os.Mkdir(long, 0o700); err != nil {
			t.Fatal(err)
		}
		for addr, want := range map[string]string{
			"unix:@fnbridge": "abstract socket",
			// gRPC's naming: unix:// then an absolute path; unix:rel.sock
			// is the relative form.
			"unix://rel.sock": `a path after unix:// must be absolute (unix:///run/x.sock); write unix:rel.sock for one relative`,
			"unix://" + filepath.Join(dir, strings.Repeat("x", 110)): "too long",
			"unix://" + filepath.Join(long, "s.sock"):                "too long",
		} {
			if lis, err := functionruntime.Listen(addr); err == nil || !strings.Contains(err.Error(), want) {
				if lis != nil {
					lis.Close()
				}
				t.Errorf("Listen(%q) = %v, want an error containing %q", addr, err, want)
			}
		}
	})
	t.Run("a stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(dir, "stale.sock")
		old, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		old.(*net.UnixListener).SetUnlinkOnClose(false)
		old.Close() // leaves the file behind, like a crashed server
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("stale socket file missing: %v", err)
		}
		lis, err := functionruntime.Listen("unix:" + path)
		if err != nil {
			t.Fatalf("Listen over a stale socket: %v", err)
		}
		lis.Close()
	})
	t.Run("a live socket is refused", func(t *testing.T) {
		path := filepath.Join(dir, "live.sock")
		live, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()
		if _, err := functionruntime.Listen("unix://" + path); err == nil || !strings.Contains(err.Error(), "another server") {
			t.Fatalf("Listen over a live socket: %v", err)
		}
	})
	t.Run("a regular file is never replaced", func(t *testing.T) {
		path := filepath.Join(dir, "file")
		if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := functionruntime.Listen("unix://" + path); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("Listen over a file: %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "keep" {
			t.Fatal("file was touched")
		}
	})
	t.Run("bad addresses", func(t *testing.T) {
		for _, a := range []string{"", "unix://", "not-an-address"} {
			if lis, err := functionruntime.Listen(a); err == nil {
				lis.Close()
				t.Errorf("Listen(%q) succeeded", a)
			}
		}
	})
}

// A TCP address beyond loopback is warned about once, naming the address
// and what to do; loopback and Unix sockets are not.
func TestWarnIfExposed(t *testing.T) {
	tests := []struct {
		address string
		warn    bool
	}{
		{"0.0.0.0:0", true},
		{"127.0.0.1:0", false},
		{"[::1]:0", false},
		{"unix://" + filepath.Join(t.TempDir(), "w.sock"), false},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			lis, err := functionruntime.Listen(tt.address)
			if err != nil {
				if strings.HasPrefix(tt.address, "[::1]") {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				t.Fatal(err)
			}
			defer lis.Close()
			var buf bytes.Buffer
			got := functionruntime.WarnIfExposed(zerolog.New(&buf), lis.Addr())
			logs := buf.String()
			if got != tt.warn {
				t.Fatalf("WarnIfExposed(%s) = %v, want %v; logs: %s", lis.Addr(), got, tt.warn, logs)
			}
			if !tt.warn {
				if logs != "" {
					t.Errorf("unexpected log: %s", logs)
				}
				return
			}
			if strings.Count(logs, "\n") != 1 || !strings.Contains(logs, `"level":"warn"`) ||
				!strings.Contains(logs, lis.Addr().String()) || !strings.Contains(logs, "authenticates no caller") ||
				!strings.Contains(logs, "unix://") || !strings.Contains(logs, "network policy") {
				t.Errorf("warning = %s, want one warn line naming the address, the missing authentication and the remedies", logs)
			}
		})
	}
}

// The server publishes its runtime kind as the health service
// "executor.v1.FunctionRuntime/KIND", so a client can tell a server of
// another kind at the address it was given (RegisterFunctionRequest names
// no runtime). The name is a wire contract between bridge versions.
func TestGRPCServerPublishesItsKind(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	conn, _, stop := served(t, h, time.Second)
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "executor.v1.FunctionRuntime/fake"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of executor.v1.FunctionRuntime/fake = %v, %v; want SERVING", resp.GetStatus(), err)
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "executor.v1.FunctionRuntime/python"})
	wantCode(t, err, codes.NotFound, "")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
