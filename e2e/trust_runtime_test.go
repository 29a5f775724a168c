package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// `bridge runtime serve --allowed-root DIR` on a Unix socket: the socket is
// owner-only, a registration whose working_dir resolves outside DIR (a
// plain path or a symlink inside DIR that leads out) is InvalidArgument
// naming working_dir, one inside DIR is READY, and neither start-up
// warning is logged.
func TestTrustRuntimeAllowedRoot(t *testing.T) {
	grpcurlBin := testtool.Require(t, "GRPCURL_BIN", "grpcurl", "to call the FunctionRuntime server")
	testtool.Require(t, "", "python3", "to run the Python handler")

	inside := newWorkspace(t, "handler.py")
	outside := newWorkspace(t, "handler.py")
	escape := filepath.Join(inside.fn, "escape")
	if err := os.Symlink(outside.fn, escape); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "rt.sock")
	// The unix:// target, as runtimes: configs write it (the pinned
	// grpcurl's -unix flag still dials TCP).
	call := func(args ...string) (string, error) {
		t.Helper()
		return grpcurl(t, grpcurlBin, "unix://"+sock, args...)
	}
	healthy := func() error {
		out, err := call("grpc.health.v1.Health/Check")
		if err == nil && !strings.Contains(out, `"SERVING"`) {
			err = fmt.Errorf("health: %s", out)
		}
		return err
	}
	srv := newBridgeChild(t, "", healthy, "runtime", "serve", "--runtime", "python", "--listen", "unix://"+sock,
		"--allowed-root", inside.fn, "--log-format", "json", "--log-level", "info")
	srv.start()

	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", fi.Mode())
	}
	if logs := srv.logs(); strings.Contains(logs, `"level":"warn"`) {
		t.Errorf("warnings logged for a confined server on a Unix socket:\n%s", logs)
	}

	register := func(uid, dir string) (string, error) {
		return call("-d", fmt.Sprintf(`{"runUid":%q,"registrationAttempt":1,"workingDir":%q,"handler":"handler.handle",
"registrationDigest":"sha256:%s"}`, uid, dir, strings.Repeat("0a", 32)), "executor.v1.FunctionRuntime/RegisterFunction")
	}
	for name, dir := range map[string]string{"outside": outside.fn, "escape": escape, "dotdot": inside.fn + "/../../" + filepath.Base(outside.root) + "/fn"} {
		out, err := register("run-"+name, dir)
		if err == nil {
			t.Fatalf("RegisterFunction with working_dir %s succeeded: %s", dir, out)
		}
		if msg := err.Error(); !strings.Contains(msg, "InvalidArgument") || !strings.Contains(msg, "working_dir:") ||
			!strings.Contains(msg, "not within an allowed root") {
			t.Errorf("RegisterFunction with working_dir %s: %v, want InvalidArgument naming working_dir", dir, err)
		}
	}
	if procs := procsInDir(outside.fn); len(procs) != 0 {
		t.Fatalf("a worker runs outside the allowed root: %v", procs)
	}

	out, err := register("run-inside", inside.fn)
	if err != nil || !strings.Contains(out, "FUNCTION_REGISTRATION_STATE_READY") {
		t.Fatalf("RegisterFunction inside the allowed root: %s, %v", out, err)
	}
}

// On a TCP address beyond loopback, and without --allowed-root, the server
// says at start what is exposed and what to do about it.
func TestTrustRuntimeWarnsWhenExposed(t *testing.T) {
	grpcurlBin := testtool.Require(t, "GRPCURL_BIN", "grpcurl", "to call the FunctionRuntime server")
	_, port, err := net.SplitHostPort(testtool.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	healthy := func() error {
		out, err := grpcurl(t, grpcurlBin, "127.0.0.1:"+port, "grpc.health.v1.Health/Check")
		if err == nil && !strings.Contains(out, `"SERVING"`) {
			err = fmt.Errorf("health: %s", out)
		}
		return err
	}
	srv := newBridgeChild(t, "", healthy, "runtime", "serve", "--runtime", "bash", "--listen", "0.0.0.0:"+port,
		"--log-format", "json", "--log-level", "info")
	srv.start()
	logs := srv.logs()
	for _, want := range []string{"authenticates no caller", "network policy", "no --allowed-root"} {
		if !strings.Contains(logs, want) {
			t.Errorf("start-up logs lack %q:\n%s", want, logs)
		}
	}
}
