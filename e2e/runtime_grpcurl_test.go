package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// grpcurl runs grpcurl against addr. It returns stdout and, for a failed
// call, an error holding grpcurl's output.
func grpcurl(t testing.TB, bin, addr string, args ...string) (string, error) {
	t.Helper()
	full := append([]string{"-plaintext", "-max-time", "30"}, args...)
	// The address goes before the method, as in the examples of
	// docs/spec/function-runtime-server-contract.md.
	full = append(full[:len(full)-1], addr, full[len(full)-1])
	stdout, stderr, code := run(t, 60*time.Second, bin, full...)
	if code != 0 {
		return stdout, fmt.Errorf("grpcurl %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout, nil
}

// TestRuntimeServeContractExamples runs the grpcurl example calls of the
// Function Runtime Server Contract
// (docs/spec/function-runtime-server-contract.md), as written, against
// `bridge runtime serve --runtime python`, then the registration fence ("An invoke or
// unregister request carrying reg_01J... must return FailedPrecondition
// after the newer registration supersedes it"), then a graceful SIGTERM.
func TestRuntimeServeContractExamples(t *testing.T) {
	grpcurlBin := testtool.Require(t, "GRPCURL_BIN", "grpcurl", "to run the FunctionRuntime contract examples")
	testtool.Require(t, "", "python3", "to run the Python handler")

	workDir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	copyTestdata(t, "handler.py", filepath.Join(workDir, "handler.py"))

	addr := testtool.FreeAddr(t)
	rtGrpcurl := func(args ...string) (string, error) { t.Helper(); return grpcurl(t, grpcurlBin, addr, args...) }
	healthy := func() error {
		out, err := rtGrpcurl("grpc.health.v1.Health/Check")
		if err == nil && !strings.Contains(out, `"SERVING"`) {
			err = fmt.Errorf("health: %s", out)
		}
		return err
	}
	// The server runs in the test's directory, not workDir: only workers
	// may have workDir as their working directory.
	srv := newBridgeChild(t, "", healthy, "runtime", "serve", "--runtime", "python", "--listen", addr, "--log-format", "json", "--log-level", "debug")
	srv.start()
	if logs := srv.logs(); !strings.Contains(logs, addr) {
		t.Errorf("server logs do not name the listen address %s:\n%s", addr, logs)
	}

	sum := sha256.Sum256([]byte("handler.handle@" + workDir))
	digest := "sha256:" + hex.EncodeToString(sum[:])

	// Example call 1: RegisterFunction.
	register := func(attempt int) (string, error) {
		return rtGrpcurl("-d", fmt.Sprintf(`{
  "runUid": "2b5d...",
  "registrationAttempt": %d,
  "workingDir": %q,
  "handler": "handler.handle",
  "idleTimeoutSeconds": 300,
  "registrationDigest": %q
}`, attempt, workDir, digest), "executor.v1.FunctionRuntime/RegisterFunction")
	}
	out, err := register(1)
	if err != nil {
		t.Fatal(err)
	}
	var regResp struct {
		Registration struct {
			RunUID         string `json:"runUid"`
			RegistrationID string `json:"registrationId"`
		} `json:"registration"`
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &regResp); err != nil {
		t.Fatalf("RegisterFunction response %q: %v", out, err)
	}
	if regResp.State != "FUNCTION_REGISTRATION_STATE_READY" || regResp.Registration.RunUID != "2b5d..." ||
		!strings.HasPrefix(regResp.Registration.RegistrationID, "reg_01") {
		t.Fatalf("RegisterFunction response = %s", out)
	}
	oldID := regResp.Registration.RegistrationID

	// Example call 2: InvokeFunction with the contract's example input.
	invoke := func(regID string) (string, error) {
		return rtGrpcurl("-d", fmt.Sprintf(`{
  "registration": {
    "runUid": "2b5d...",
    "registrationId": %q
  },
  "invocationId": "01J...",
  "contentType": "application/json",
  "input": "eyJjb21tYW5kIjoic3RhdHVzIn0="
}`, regID), "executor.v1.FunctionRuntime/InvokeFunction")
	}
	out, err = invoke(oldID)
	if err != nil {
		t.Fatal(err)
	}
	var invResp struct {
		Registration struct {
			RegistrationID string `json:"registrationId"`
		} `json:"registration"`
		InvocationID string `json:"invocationId"`
		Output       string `json:"output"`
		ContentType  string `json:"contentType"`
	}
	if err := json.Unmarshal([]byte(out), &invResp); err != nil {
		t.Fatalf("InvokeFunction response %q: %v", out, err)
	}
	decoded, err := base64.StdEncoding.DecodeString(invResp.Output)
	if err != nil {
		t.Fatalf("output %q is not base64: %v", invResp.Output, err)
	}
	var got map[string]any
	if err := json.Unmarshal(decoded, &got); err != nil {
		t.Fatalf("output %q is not JSON: %v", decoded, err)
	}
	if got["command"] != "status" || got["upper"] != "STATUS" || fmt.Sprint(got["keys"]) != "[command]" {
		t.Fatalf("handler output = %s, want it derived from {\"command\":\"status\"}", decoded)
	}
	if invResp.InvocationID != "01J..." || invResp.ContentType != "application/json" || invResp.Registration.RegistrationID != oldID {
		t.Fatalf("InvokeFunction response = %s", out)
	}

	// FunctionStatus reads READY with recent activity.
	out, err = rtGrpcurl("-d", fmt.Sprintf(`{"registration":{"runUid":"2b5d...","registrationId":%q}}`, oldID),
		"executor.v1.FunctionRuntime/FunctionStatus")
	if err != nil || !strings.Contains(out, "FUNCTION_REGISTRATION_STATE_READY") || !strings.Contains(out, "lastActivityUnixNano") {
		t.Fatalf("FunctionStatus = %s, %v", out, err)
	}

	// Example 3: attempt 2 supersedes; the old ID is fenced.
	out, err = register(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &regResp); err != nil {
		t.Fatal(err)
	}
	newID := regResp.Registration.RegistrationID
	if regResp.State != "FUNCTION_REGISTRATION_STATE_READY" || newID == oldID || !strings.HasPrefix(newID, "reg_") {
		t.Fatalf("attempt 2 response = %s (old ID %s)", out, oldID)
	}
	if _, err := invoke(oldID); err == nil || !strings.Contains(err.Error(), "FailedPrecondition") {
		t.Fatalf("invoke with the superseded ID: %v, want FailedPrecondition", err)
	}
	_, err = rtGrpcurl("-d", fmt.Sprintf(`{"registration":{"runUid":"2b5d...","registrationId":%q},"cancelInFlight":true}`, oldID),
		"executor.v1.FunctionRuntime/UnregisterFunction")
	if err == nil || !strings.Contains(err.Error(), "FailedPrecondition") {
		t.Fatalf("unregister with the superseded ID: %v, want FailedPrecondition", err)
	}
	if _, err := invoke(newID); err != nil {
		t.Fatalf("the newer registration was affected by the stale calls: %v", err)
	}
	if procs := procsInDir(workDir); len(procs) == 0 {
		t.Fatalf("no worker process runs in %s while registered", workDir)
	}

	// Graceful shutdown: SIGTERM, exit 0, no worker left behind.
	srv.signal(syscall.SIGTERM)
	exited, ok := srv.waitExit(40 * time.Second)
	if !ok {
		t.Fatalf("server still running 40s after SIGTERM\n%s", srv.logs())
	}
	if exited.err != nil {
		t.Fatalf("server exit after SIGTERM: %v, want status 0\n%s", exited.err, srv.logs())
	}
	if procs := procsInDir(workDir); len(procs) != 0 {
		t.Fatalf("processes left behind after shutdown: %v", procs)
	}
	if !groupGone(srv.group()) {
		t.Fatal("the server's process group still has members after shutdown")
	}
}
