package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rtTool returns the path of a tool the test needs: from the environment
// variable env when set, else looked up by name. Missing: t.Fatal under
// CI=true, else t.Skip.
func rtTool(t *testing.T, env, name string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" && env == "" {
		path, _ = exec.LookPath(name)
	}
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	msg := fmt.Sprintf("%s not available (set %s): needed to run the FunctionRuntime contract examples", name, env)
	if env == "" {
		msg = fmt.Sprintf("%s not found in PATH: needed to run the python handler", name)
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// rtBridgeBinary returns $BRIDGE_BIN when it exists, else builds
// ./cmd/bridge into a temporary directory.
func rtBridgeBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BRIDGE_BIN"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	out := filepath.Join(t.TempDir(), "bridge")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/bridge")
	cmd.Dir = rtModuleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/bridge: %v\n%s", err, b)
	}
	return out
}

func rtModuleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source")
	}
	return filepath.Dir(filepath.Dir(file))
}

// rtFreeAddr returns a loopback address no one listens on right now.
func rtFreeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// rtLockedBuffer collects a child's stderr.
type rtLockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *rtLockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *rtLockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// rtServer is a running `bridge runtime serve` child in its own process
// group.
type rtServer struct {
	cmd  *exec.Cmd
	logs *rtLockedBuffer
	done chan struct{} // closed once the child is reaped
	err  error         // Wait's result, valid after done
}

func rtStartServer(t *testing.T, bin, kind, addr string) *rtServer {
	t.Helper()
	logs := &rtLockedBuffer{}
	cmd := exec.Command(bin, "runtime", "serve", "--runtime", kind, "--listen", addr, "--log-format", "json", "--log-level", "debug")
	cmd.Stdout = logs
	cmd.Stderr = logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &rtServer{cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		// Owned process: TERM the group, KILL after a grace, always reap.
		select {
		case <-s.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-s.done
			}
		}
		if t.Failed() {
			t.Log("server logs:\n" + logs.String())
		}
	})
	return s
}

// rtGrpcurl runs grpcurl against addr. It returns stdout and, for a failed
// call, an error holding grpcurl's combined output.
func rtGrpcurl(grpcurl, addr string, args ...string) (string, error) {
	full := append([]string{"-plaintext", "-max-time", "30"}, args...)
	// The address goes before the method, as in the contract's examples.
	full = append(full[:len(full)-1], addr, full[len(full)-1])
	cmd := exec.Command(grpcurl, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("grpcurl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// rtProcsInDir lists live processes whose working directory is dir.
func rtProcsInDir(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || (cwd != dir && !strings.HasPrefix(cwd, dir+"/")) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		found = append(found, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}

// TestRuntimeServeContractExamples runs the Function Runtime Server
// Contract's grpcurl example calls, as written, against `bridge runtime
// serve --runtime python`, then the registration fence ("An invoke or
// unregister request carrying reg_01J... must return FailedPrecondition
// after the newer registration supersedes it"), then a graceful SIGTERM.
func TestRuntimeServeContractExamples(t *testing.T) {
	grpcurl := rtTool(t, "GRPCURL_BIN", "grpcurl")
	rtTool(t, "", "python3")
	bin := rtBridgeBinary(t)

	workDir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	handler := `def handle(input):
    return {"command": input["command"], "upper": input["command"].upper(), "keys": sorted(input)}
`
	if err := os.WriteFile(filepath.Join(workDir, "handler.py"), []byte(handler), 0o644); err != nil {
		t.Fatal(err)
	}

	addr := rtFreeAddr(t)
	srv := rtStartServer(t, bin, "python", addr)

	// Wait for health.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := rtGrpcurl(grpcurl, addr, "grpc.health.v1.Health/Check")
		if err == nil && strings.Contains(out, `"SERVING"`) {
			break
		}
		select {
		case <-srv.done:
			t.Fatalf("server exited before serving: %v\n%s", srv.err, srv.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 30s: %v\n%s", err, srv.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(srv.logs.String(), addr) {
		t.Errorf("server logs do not name the listen address %s:\n%s", addr, srv.logs.String())
	}

	sum := sha256.Sum256([]byte("handler.handle@" + workDir))
	digest := "sha256:" + hex.EncodeToString(sum[:])

	// Example call 1: RegisterFunction.
	register := func(attempt int) (string, error) {
		return rtGrpcurl(grpcurl, addr, "-d", fmt.Sprintf(`{
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

	// Example call 2: InvokeFunction with the contract's input.
	invoke := func(regID string) (string, error) {
		return rtGrpcurl(grpcurl, addr, "-d", fmt.Sprintf(`{
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
	out, err = rtGrpcurl(grpcurl, addr, "-d", fmt.Sprintf(`{"registration":{"runUid":"2b5d...","registrationId":%q}}`, oldID),
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
	_, err = rtGrpcurl(grpcurl, addr, "-d", fmt.Sprintf(`{"registration":{"runUid":"2b5d...","registrationId":%q},"cancelInFlight":true}`, oldID),
		"executor.v1.FunctionRuntime/UnregisterFunction")
	if err == nil || !strings.Contains(err.Error(), "FailedPrecondition") {
		t.Fatalf("unregister with the superseded ID: %v, want FailedPrecondition", err)
	}
	if _, err := invoke(newID); err != nil {
		t.Fatalf("the newer registration was affected by the stale calls: %v", err)
	}
	if procs := rtProcsInDir(workDir); len(procs) == 0 {
		t.Fatalf("no worker process runs in %s while registered", workDir)
	}

	// Graceful shutdown: SIGTERM, exit 0, no worker left behind.
	if err := syscall.Kill(srv.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
		if srv.err != nil {
			t.Fatalf("server exit after SIGTERM: %v, want status 0\n%s", srv.err, srv.logs.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("server still running 40s after SIGTERM\n%s", srv.logs.String())
	}
	if procs := rtProcsInDir(workDir); len(procs) != 0 {
		t.Fatalf("processes left behind after shutdown: %v", procs)
	}
	if err := syscall.Kill(-srv.cmd.Process.Pid, 0); err == nil {
		t.Fatal("the server's process group still has members after shutdown")
	}
}
