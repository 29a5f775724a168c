package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
)

// Bounds of the bridge suite's waits. They are deadlines for polling, not
// sleeps: on an idle machine every condition is met in well under a second.
const (
	bridgeHealthTimeout = 30 * time.Second
	bridgeStopGrace     = 15 * time.Second
	pollEvery           = 25 * time.Millisecond
)

// bridgeEnv is what one group of bridge tests shares: the `bridge` binary
// and the restate-server the group's bridges register with (nil for the
// CLI tests, which need no server).
type bridgeEnv struct {
	bin string
	srv *restateserver.Server
	// identityKey is the publickeyv1_ key matching the server's signing
	// key, when the server signs its requests.
	identityKey string
}

// requireCommand skips the test (fails it under CI=true) when name is not
// in PATH.
func requireCommand(t *testing.T, name, why string) {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return
	}
	msg := fmt.Sprintf("%s not found in PATH: needed %s", name, why)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// fnWorkspace is one test's directory: bridge.yaml at its root, the
// functions in fn/ (the registration's working directory, where handlers
// write their marker files).
type fnWorkspace struct {
	root string
	fn   string
}

// newWorkspace writes files (name → content) into fn/ of a fresh
// directory. The path is resolved through symlinks so it compares equal to
// what /proc reports as a worker's working directory.
func newWorkspace(t *testing.T, files map[string]string) *fnWorkspace {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &fnWorkspace{root: root, fn: filepath.Join(root, "fn")}
	if err := os.Mkdir(w.fn, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(w.fn, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// config writes bridge.yaml and returns its path.
func (w *fnWorkspace) config(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(w.root, "bridge.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// lines returns the non-empty lines of the marker file fn/name (none when
// the file does not exist yet).
func (w *fnWorkspace) lines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.fn, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// pids returns the integers of the marker file's lines; a line may hold a
// word before the PID ("started 123").
func (w *fnWorkspace) pids(t *testing.T, name string) []int {
	t.Helper()
	var out []int
	for _, l := range w.lines(t, name) {
		f := strings.Fields(l)
		pid, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			t.Fatalf("marker %s: line %q does not end with a PID", name, l)
		}
		out = append(out, pid)
	}
	return out
}

// bridgeProcess is one `bridge serve` child, leader of its own process
// group, owned by the test that started it.
type bridgeProcess struct {
	addr  string
	pgid  int
	cmd   *exec.Cmd
	logs  *rtLockedBuffer
	done  chan struct{} // closed once reaped
	err   error         // Wait's result, valid after done
	ended time.Time     // when it was reaped, valid after done
}

// startBridge starts `bridge serve --config configPath --listen addr` plus
// extra flags, and waits until GET /health answers. Its cleanup TERMs the
// group, KILLs it after a grace period, reaps it, and prints its stderr
// when the test failed.
func startBridge(t *testing.T, bin, configPath, addr string, extra ...string) *bridgeProcess {
	t.Helper()
	p := spawnBridge(t, bin, configPath, addr, extra...)
	p.waitHealthy(t)
	return p
}

// spawnBridge starts the child without waiting for health.
func spawnBridge(t *testing.T, bin, configPath, addr string, extra ...string) *bridgeProcess {
	t.Helper()
	args := append([]string{"serve", "--config", configPath, "--listen", addr, "--log-format", "json", "--log-level", "debug"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(configPath)
	logs := &rtLockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	// Own group so the test can kill everything the bridge runs in one
	// signal; Pdeathsig so a crashed test binary leaves no bridge behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start bridge serve: %v", err)
	}
	p := &bridgeProcess{addr: addr, pgid: cmd.Process.Pid, cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		p.ended = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("bridge serve --listen %s %v stderr:\n%s", addr, extra, logs.String())
		}
	})
	return p
}

// URI is the deployment address to register with restate-server.
func (p *bridgeProcess) URI() string { return "http://" + p.addr }

func (p *bridgeProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *bridgeProcess) waitHealthy(t *testing.T) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(bridgeHealthTimeout)
	for {
		resp, err := client.Get(p.URI() + "/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case <-p.done:
			t.Fatalf("bridge serve exited before it was healthy: %v\n%s", p.err, p.logs.String())
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge serve not healthy on %s within %s: %v", p.addr, bridgeHealthTimeout, err)
		}
	}
}

// kill SIGKILLs the whole group at once (a crash) and reaps the leader.
func (p *bridgeProcess) kill(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-p.pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("SIGKILL group %d: %v", p.pgid, err)
	}
	<-p.done
}

// stop is the owner's cleanup: TERM the group, KILL after a grace, reap,
// and KILL once more for stragglers of the group.
func (p *bridgeProcess) stop(t *testing.T) {
	if !p.exited() {
		_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(bridgeStopGrace):
			t.Logf("bridge serve %s ignored SIGTERM for %s; killing it", p.addr, bridgeStopGrace)
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			<-p.done
		}
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
}

// groupGone reports whether no process of group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// pidAlive reports whether pid is a live process: a zombie (dead, not yet
// reaped) counts as gone.
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may itself
	// contain spaces or parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// eventually polls cond until it holds or timeout passes; then the test
// fails with what and cond's last description of the state.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last state: %s)", what, timeout, state)
		}
		time.Sleep(pollEvery)
	}
}

// assertJSON compares got with the JSON text want by value, so formatting
// differences (spacing, key order) do not matter.
func assertJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %q is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation %q: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s = %s, want %s", what, got, want)
	}
}

// callOK invokes service/handler through the ingress and fails the test
// unless the answer is 200.
func callOK(ctx context.Context, t *testing.T, srv *restateserver.Server, service, handler, body string, headers map[string]string) []byte {
	t.Helper()
	status, out, err := srv.Call(ctx, service, handler, []byte(body), headers)
	if err != nil {
		t.Fatalf("call %s/%s: %v", service, handler, err)
	}
	if status != http.StatusOK {
		t.Fatalf("call %s/%s: status %d: %s", service, handler, status, out)
	}
	return out
}

// invocationRows returns sys_invocation rows of every invocation of
// service (each test uses its own service names).
func invocationRows(ctx context.Context, t *testing.T, srv *restateserver.Server, service, columns string) []map[string]any {
	t.Helper()
	rows, err := srv.Query(ctx, fmt.Sprintf("SELECT %s FROM sys_invocation WHERE target_service_name = '%s'", columns, service))
	if err != nil {
		t.Fatalf("query sys_invocation for %s: %v", service, err)
	}
	return rows
}

// invocationRow returns the sys_invocation row of one invocation.
func invocationRow(ctx context.Context, t *testing.T, srv *restateserver.Server, id, columns string) map[string]any {
	t.Helper()
	rows, err := srv.Query(ctx, fmt.Sprintf("SELECT %s FROM sys_invocation WHERE id = '%s'", columns, id))
	if err != nil {
		t.Fatalf("query sys_invocation for %s: %v", id, err)
	}
	if len(rows) != 1 {
		t.Fatalf("sys_invocation has %d rows for %s", len(rows), id)
	}
	return rows[0]
}

// waitCompleted polls until the invocation's status is completed.
func waitCompleted(t *testing.T, srv *restateserver.Server, id string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "invocation "+id+" completes", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := srv.InvocationStatus(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return st == "completed", st
	})
}

// invocationOutput fetches a completed invocation's result through the
// ingress (GET /restate/invocation/{id}/output, which answers 470 while the
// invocation has not completed) and returns the final status and body.
func invocationOutput(t *testing.T, srv *restateserver.Server, id string, timeout time.Duration) (int, []byte) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var (
		status int
		body   []byte
	)
	eventually(t, timeout, "output of "+id, func() (bool, string) {
		resp, err := client.Get(srv.IngressURL() + "/restate/invocation/" + id + "/output")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		if err != nil {
			return false, err.Error()
		}
		status = resp.StatusCode
		return status != 470, fmt.Sprintf("%d %s", status, body)
	})
	return status, body
}

// runBridgeCLI runs a short-lived bridge command and returns its stdout,
// stderr and exit code.
func runBridgeCLI(t *testing.T, bin string, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// On timeout kill the whole group, workers included.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("bridge %s did not finish within %s\nstderr:\n%s", strings.Join(args, " "), timeout, errb.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("bridge %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}
