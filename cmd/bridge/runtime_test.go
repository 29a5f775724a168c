package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/internal/testtool"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// A flag runtime serve cannot take is refused before anything starts,
// naming the flag, with exit 2 (the README: a mistake to fix, which a
// supervisor should not retry); an address it cannot listen on is a
// failure to start (1).
func TestRuntimeServeRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"invalid --runtime is a clear error", []string{"--runtime", "ruby"}, `--runtime "ruby": want bash or python`, 2},
		// A listen address of the wrong form is a mistake (2), as serve's
		// is; one that cannot be bound is a failure (1, below).
		{"listen address without a path", []string{"--listen", "unix://"}, "--listen", 2},
		{"listen address without a port", []string{"--listen", "nonsense"}, `"nonsense" is not host:port`, 2},
		{"listen port out of range", []string{"--listen", "127.0.0.1:99999"}, "port 99999 is not from 0 to 65535", 2},
		{"duration flag", []string{"--default-timeout", "abc"}, "want a duration such as 30s", 2},
		{"default above max timeout", []string{"--default-timeout", "2h", "--max-timeout", "1h"}, "--default-timeout 2h0m0s: must not exceed --max-timeout", 2},
		{"non-positive drain timeout", []string{"--drain-timeout", "0s"}, "--drain-timeout 0s: must be positive", 2},
		{"non-positive --max-input-bytes", []string{"--max-input-bytes", "0"}, "--max-input-bytes 0: must be positive", 2},
		{"negative --orphan-grace", []string{"--orphan-grace", "-1s"}, "--orphan-grace -1s: must not be negative", 2},
		{"missing --allowed-root", []string{"--allowed-root", "/nonexistent/fnbridge-root"}, `--allowed-root: "/nonexistent/fnbridge-root" does not exist`, 2},
		{"empty --allowed-root", []string{"--allowed-root", ""}, "--allowed-root: an empty directory name", 2},
		{"bad log format", []string{"--log-format", "xml"}, `--log-format "xml"`, 2},
		{"--socket-group on TCP", []string{"--socket-group", "0"}, `--socket-group: applies to a unix:///path --listen address, not "127.0.0.1:9090"`, 2},
		{"unknown --socket-group", []string{"--listen", "unix:///tmp/fnbridge-never.sock", "--socket-group", "no-such-group-fnbridge"}, `--socket-group: no group "no-such-group-fnbridge"`, 2},
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests = append(tests, struct {
		name string
		args []string
		want string
		code int
	}{"listen address in use", []string{"--listen", busy.Addr().String()}, "address already in use", 1})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := runBridge(append([]string{"runtime", "serve"}, tt.args...), &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.want)
			}
		})
	}
}

// `bridge runtime serve --runtime bash --listen unix:///path` serves
// executor.v1.FunctionRuntime with health, and stops cleanly when its
// context ends (what SIGTERM does through signal.NotifyContext).
func TestRuntimeServeBashOverUnixSocket(t *testing.T) {
	rs := serveBashRuntime(t, "shout() { printf '{\"said\":%s}' \"$1\"; }\n")
	dir, sock, ctx, conn := rs.dir, rs.sock, rs.ctx, rs.conn
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		ccancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		rs.exitedEarly()
		if time.Now().After(deadline) {
			t.Fatalf("not healthy: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	cli := executorv1.NewFunctionRuntimeClient(conn)
	sum := sha256.Sum256([]byte("fn.shout"))
	reg, err := cli.RegisterFunction(ctx, &executorv1.RegisterFunctionRequest{
		RunUid: "run-cli", RegistrationAttempt: 1, WorkingDir: dir, Handler: "fn.shout",
		RegistrationDigest: "sha256:" + hex.EncodeToString(sum[:]),
	})
	if err != nil || reg.GetState() != executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY {
		t.Fatalf("RegisterFunction: %v, %v", reg, err)
	}
	out, err := cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: reg.GetRegistration(), Input: []byte(`"hi"`), ContentType: "application/json"})
	if err != nil || string(out.GetOutput()) != `{"said":"hi"}` {
		t.Fatalf("InvokeFunction: %q, %v", out.GetOutput(), err)
	}

	rs.stop("serve after shutdown: %v, want nil (exit 0)")
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	_, err = cli.FunctionStatus(context.Background(), &executorv1.FunctionStatusRequest{Registration: reg.GetRegistration()})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("call after shutdown: %v, want Unavailable", err)
	}
}

// --orphan-grace parses, defaults to functionruntime.DefaultOrphanGrace and
// reaches the server's options; 0 turns reaping off.
func TestRuntimeServeOrphanGraceFlag(t *testing.T) {
	tests := []struct {
		args []string
		want time.Duration
	}{
		{nil, functionruntime.DefaultOrphanGrace},
		{[]string{"--orphan-grace", "90s"}, 90 * time.Second},
		{[]string{"--orphan-grace", "0"}, 0},
	}
	for _, tt := range tests {
		cmd, f := runtimeServeCmd(&globalFlags{})
		if err := cmd.ParseFlags(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if got := f.serverOptions(nil, zerolog.Nop()).OrphanGrace; got != tt.want {
			t.Errorf("%v: OrphanGrace = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// A registration nobody calls on `bridge runtime serve --orphan-grace` is
// unregistered after its idle_timeout_seconds (0 here) plus the grace.
func TestRuntimeServeReapsOrphans(t *testing.T) {
	rs := serveBashRuntime(t, "shout() { :; }\n", "--orphan-grace", "200ms")
	dir, ctx := rs.dir, rs.ctx
	cli := executorv1.NewFunctionRuntimeClient(rs.conn)

	sum := sha256.Sum256([]byte("fn.shout"))
	req := &executorv1.RegisterFunctionRequest{
		RunUid: "run-orphan", RegistrationAttempt: 1, WorkingDir: dir, Handler: "fn.shout",
		RegistrationDigest: "sha256:" + hex.EncodeToString(sum[:]),
	}
	var (
		reg *executorv1.RegisterFunctionResponse
		err error
	)
	deadline := time.Now().Add(20 * time.Second)
	for {
		// WaitForReady: the server may not listen yet.
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		reg, err = cli.RegisterFunction(cctx, req, grpc.WaitForReady(true))
		ccancel()
		if err == nil {
			break
		}
		rs.exitedEarly()
		if time.Now().After(deadline) {
			t.Fatalf("RegisterFunction: %v", err)
		}
	}
	if reg.GetState() != executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY {
		t.Fatalf("RegisterFunction: %v", reg)
	}

	// Watch with a stale registration ID: not the caller's contact.
	stale := &executorv1.FunctionStatusRequest{Registration: &executorv1.FunctionRegistration{RunUid: "run-orphan", RegistrationId: "reg_watcher"}}
	deadline = time.Now().Add(20 * time.Second)
	for {
		_, err := cli.FunctionStatus(ctx, stale)
		if status.Code(err) == codes.NotFound {
			break
		}
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			t.Fatalf("FunctionStatus with a stale ID: %v; want NotFound once the orphan is reaped", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err = cli.FunctionStatus(ctx, &executorv1.FunctionStatusRequest{Registration: reg.GetRegistration()})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("FunctionStatus of the reaped registration: %v, want NotFound", err)
	}

	rs.stop("serve after shutdown: %v")
}

// bashRuntime is `bridge runtime serve --runtime bash` running on a Unix
// socket, serving fn.sh in dir, with a client connection to it.
type bashRuntime struct {
	t      *testing.T
	dir    string
	sock   string
	ctx    context.Context // the command's context
	cancel context.CancelFunc
	done   chan error // the command's result
	conn   *grpc.ClientConn
}

// serveBashRuntime writes source to fn.sh and starts `bridge runtime serve
// --runtime bash --listen unix://SOCK` with the flags extra and
// --log-level error; the test's cleanup closes the connection and ends
// the command's context.
func serveBashRuntime(t *testing.T, source string, extra ...string) *bashRuntime {
	t.Helper()
	testtool.Require(t, "", "bash", "to run the Bash runtime")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fn.sh"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := &bashRuntime{t: t, dir: dir, sock: filepath.Join(t.TempDir(), "rt.sock"), done: make(chan error, 1)}
	rs.ctx, rs.cancel = context.WithCancel(context.Background())
	t.Cleanup(rs.cancel)
	args := append([]string{"runtime", "serve", "--runtime", "bash", "--listen", "unix://" + rs.sock}, extra...)
	root := newRootCmd()
	root.SetArgs(append(args, "--log-level", "error"))
	go func() { rs.done <- root.ExecuteContext(rs.ctx) }()
	conn, err := grpc.NewClient("unix://"+rs.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rs.conn = conn
	return rs
}

// exitedEarly fails the test if the command has already returned.
func (rs *bashRuntime) exitedEarly() {
	rs.t.Helper()
	select {
	case err := <-rs.done:
		rs.t.Fatalf("serve exited early: %v", err)
	default:
	}
}

// stop ends the command's context and waits for it to return nil (exit
// 0), failing the test with failure (a format taking the error) if it
// returns an error.
func (rs *bashRuntime) stop(failure string) {
	rs.t.Helper()
	rs.cancel()
	select {
	case err := <-rs.done:
		if err != nil {
			rs.t.Fatalf(failure, err)
		}
	case <-time.After(30 * time.Second):
		rs.t.Fatal("serve did not stop after its context ended")
	}
}
