package e2e

// The harness every e2e test shares: the tools a test needs, the bridge
// binary (built once per test binary), the `bridge` child process, the CLI
// runner, the per-test workspace filled from testdata/, and polling.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
	"github.com/fnbridge/fnbridge/restate"
)

// Bounds of the harness's waits. They are deadlines for polling, not
// sleeps: on an idle machine every condition is met in well under a second.
const (
	healthTimeout = 30 * time.Second
	stopGrace     = 15 * time.Second
	pollEvery     = testtool.PollEvery
)

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// requireInterpreters is testtool.Require for the two worker runtimes.
func requireInterpreters(t testing.TB) {
	t.Helper()
	testtool.Require(t, "", "python3", "to run the Python functions")
	testtool.Require(t, "", "bash", "to run the Bash functions")
}

// build is the one `go build ./cmd/bridge` of this test binary, made the
// first time a test asks for the bridge and BRIDGE_BIN names no file.
var build struct {
	once sync.Once
	dir  string // removed by TestMain
	bin  string
	err  error
}

// bridgeBin returns $BRIDGE_BIN when that file exists (the Makefile builds
// bin/bridge and exports it), else the binary built once for all tests.
func bridgeBin(t testing.TB) string {
	t.Helper()
	if p := testtool.BuiltBridge(); p != "" {
		return p
	}
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "fnbridge-e2e-bin-"); build.err != nil {
			return
		}
		build.bin, build.err = testtool.BuildBridge(build.dir)
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

// serveHTTP serves h in process on a loopback listener with
// restate.NewHTTPServer (HTTP/1.1 and h2c with prior knowledge), as `bridge
// serve` does, until the test's cleanup shuts it down; it returns the base
// URL.
func serveHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := restate.NewHTTPServer(ln.Addr().String(), h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("in-process server: %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	})
	return "http://" + ln.Addr().String()
}

// lockedBuffer collects what several goroutines write (logs).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// bridgeChild is a long-running `bridge` child (serve, or runtime serve; or
// another program, bin, such as the cluster tests' HAProxy)
// owned by the test that made it. Each incarnation leads its own process
// group; the test may kill it and start it again with the same arguments
// (same address). Every incarnation appends its output to one log file.
type bridgeChild struct {
	t       *testing.T
	bin     string // the program; empty: the bridge (bridgeBin)
	args    []string
	env     []string     // added to the test's environment
	dir     string       // working directory
	healthy func() error // nil once the incarnation serves
	logPath string

	mu    sync.Mutex
	cmd   *exec.Cmd
	pgid  int           // of the current or last incarnation
	done  chan struct{} // closed once the incarnation is reaped
	err   error         // Wait's result, valid after done
	ended time.Time     // when it was reaped, valid after done
}

// newBridgeChild prepares (does not start) `bridge args...` in dir with a
// health check. Its cleanup stops the running incarnation and, when the
// test failed, prints the log.
func newBridgeChild(t *testing.T, dir string, healthy func() error, args ...string) *bridgeChild {
	t.Helper()
	logDir := t.TempDir()
	b := &bridgeChild{t: t, args: args, dir: dir, healthy: healthy, logPath: filepath.Join(logDir, "bridge.log")}
	t.Cleanup(func() {
		b.stop()
		if t.Failed() {
			t.Logf("%s log (last 200 lines):\n%s", b.name(), tail(b.logPath, 200))
		}
	})
	return b
}

// serveArgs are the arguments of `bridge serve` on addr.
func serveArgs(configPath, addr, logLevel string, extra ...string) []string {
	return append([]string{"serve", "--config", configPath, "--listen", addr, "--log-format", "json", "--log-level", logLevel}, extra...)
}

// httpHealth is the health check of `bridge serve`: GET /health answers 200.
func httpHealth(addr string) func() error {
	client := &http.Client{Timeout: 2 * time.Second}
	return func() error {
		resp, err := client.Get("http://" + addr + "/health")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
}

// bridgeServe is a `bridge serve` on addr with the config's directory as
// working directory.
type bridgeServe struct {
	*bridgeChild
	addr string
}

// startBridge starts `bridge serve --config configPath --listen addr` at
// debug level plus extra flags, and waits until it is healthy.
func startBridge(t *testing.T, configPath, addr string, extra ...string) *bridgeServe {
	t.Helper()
	b := newBridgeServe(t, configPath, addr, "debug", extra...)
	b.start()
	return b
}

// newBridgeServe prepares a `bridge serve` without starting it.
func newBridgeServe(t *testing.T, configPath, addr, logLevel string, extra ...string) *bridgeServe {
	t.Helper()
	return &bridgeServe{
		bridgeChild: newBridgeChild(t, filepath.Dir(configPath), httpHealth(addr), serveArgs(configPath, addr, logLevel, extra...)...),
		addr:        addr,
	}
}

// URI is the deployment address to register with restate-server.
func (b *bridgeServe) URI() string { return "http://" + b.addr }

// start launches a new incarnation and waits until it is healthy; the
// test fails if it exits first or is not healthy within healthTimeout.
func (b *bridgeChild) start() {
	b.t.Helper()
	logFile, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.t.Fatal(err)
	}
	bin := b.bin
	if bin == "" {
		bin = bridgeBin(b.t)
	}
	cmd := exec.Command(bin, b.args...)
	cmd.Dir = b.dir
	if len(b.env) > 0 {
		cmd.Env = append(os.Environ(), b.env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own group so the test can signal everything the bridge runs at once;
	// Pdeathsig so a crashed test binary leaves no bridge behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		b.t.Fatalf("start %s: %v", b.name(), err)
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.pgid, b.done, b.err = cmd, cmd.Process.Pid, done, nil
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logFile.Close()
		b.mu.Lock()
		b.err, b.ended = err, time.Now()
		b.mu.Unlock()
		close(done)
	}()
	deadline := time.Now().Add(healthTimeout)
	for {
		err := b.healthy()
		if err == nil {
			return
		}
		select {
		case <-done:
			b.t.Fatalf("%s exited before it was healthy: %v\n%s", b.name(), b.exit().err, tail(b.logPath, 30))
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s not healthy within %s: %v\n%s", b.name(), healthTimeout, err, tail(b.logPath, 30))
		}
	}
}

// name is the program and its arguments, for messages.
func (b *bridgeChild) name() string {
	prog := "bridge"
	if b.bin != "" {
		prog = filepath.Base(b.bin)
	}
	return prog + " " + strings.Join(b.args, " ")
}

// current returns the running incarnation's process and its done channel
// (nil, nil before the first start).
func (b *bridgeChild) current() (*exec.Cmd, chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd, b.done
}

// pid is the running incarnation's PID, 0 when none runs.
func (b *bridgeChild) pid() int {
	cmd, done := b.current()
	if cmd == nil {
		return 0
	}
	select {
	case <-done:
		return 0
	default:
		return cmd.Process.Pid
	}
}

// group is the process group of the current or last incarnation.
func (b *bridgeChild) group() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pgid
}

// logs returns everything the incarnations have written.
func (b *bridgeChild) logs() string {
	out, err := os.ReadFile(b.logPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		b.t.Errorf("reading the bridge log: %v", err)
	}
	return string(out)
}

// exit is how an incarnation ended.
type exit struct {
	err error     // Wait's result: nil for status 0
	at  time.Time // when it was reaped
}

func (b *bridgeChild) exit() exit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return exit{b.err, b.ended}
}

// waitExit waits at most d for the running incarnation to end; ok is false
// when it is still running.
func (b *bridgeChild) waitExit(d time.Duration) (e exit, ok bool) {
	cmd, done := b.current()
	if cmd == nil {
		return exit{}, true
	}
	select {
	case <-done:
		return b.exit(), true
	case <-time.After(d):
		return exit{}, false
	}
}

// signal sends sig to the running incarnation's own process only.
func (b *bridgeChild) signal(sig syscall.Signal) {
	b.t.Helper()
	cmd, _ := b.current()
	if cmd == nil {
		b.t.Fatalf("signal %v: the bridge was never started", sig)
	}
	if err := syscall.Kill(cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		b.t.Fatalf("signal %v to bridge %d: %v", sig, cmd.Process.Pid, err)
	}
}

// kill SIGKILLs the incarnation's whole process group at once (a crash of
// the bridge and whatever shares its group) and reaps the leader.
func (b *bridgeChild) kill() {
	b.t.Helper()
	cmd, done := b.current()
	if cmd == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		b.t.Fatalf("SIGKILL group %d: %v", cmd.Process.Pid, err)
	}
	<-done
}

// killLeader SIGKILLs the bridge process alone (a crash: no shutdown code
// runs) and reaps it; its workers are left to their Pdeathsig.
func (b *bridgeChild) killLeader() {
	b.signal(syscall.SIGKILL)
	_, done := b.current()
	<-done
}

// stop is the owner's cleanup: TERM the group, KILL it after stopGrace,
// reap, and KILL once more for stragglers of the group.
func (b *bridgeChild) stop() {
	cmd, done := b.current()
	if cmd == nil {
		return
	}
	pgid := cmd.Process.Pid
	select {
	case <-done:
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(stopGrace):
			b.t.Logf("%s ignored SIGTERM for %s; killing it", b.name(), stopGrace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// tail returns the last n lines of a log file.
func tail(path string, n int) string { return restateserver.LogTail(path, n) }

// run runs a short-lived command in its own process group and returns its
// stdout, stderr and exit code; the test fails when it does not finish
// within timeout (the whole group is killed then) or cannot start.
func run(t testing.TB, timeout time.Duration, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runWithInput(t, timeout, "", bin, args...)
}

// runWithInput is run with stdin reading input (empty: /dev/null).
func runWithInput(t testing.TB, timeout time.Duration, input, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	if input != "" {
		cmd.Stdin = strings.NewReader(input)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// On timeout kill the whole group, workers included.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err := cmd.Run()
	name := filepath.Base(bin) + " " + strings.Join(args, " ")
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %s\nstderr:\n%s", name, timeout, errb.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("%s: %v", name, err)
	}
	return out.String(), errb.String(), code
}

// runBridge runs a short-lived bridge command (invoke, manifest, a serve
// that must refuse to start) with run.
func runBridge(t testing.TB, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return run(t, timeout, bridgeBin(t), args...)
}

// fnWorkspace is one test's directory: bridge.yaml at its root, the
// functions in fn/ (the registration's working directory, where handlers
// write their marker files).
type fnWorkspace struct {
	root string
	fn   string
}

// newWorkspace copies the named handler files from testdata/ into fn/ of a
// fresh directory. The path is resolved through symlinks so it compares
// equal to what /proc reports as a worker's working directory.
func newWorkspace(t *testing.T, handlers ...string) *fnWorkspace {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &fnWorkspace{root: root, fn: filepath.Join(root, "fn")}
	if err := os.Mkdir(w.fn, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range handlers {
		copyTestdata(t, name, filepath.Join(w.fn, name))
	}
	return w
}

// copyTestdata copies testdata/name to dst.
func copyTestdata(t testing.TB, name, dst string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, string(b))
}

// writeFile writes a file, making its directory, or fails the test.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// config writes bridge.yaml and returns its path.
func (w *fnWorkspace) config(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(w.root, "bridge.yaml")
	writeFile(t, path, yaml)
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

// waitDead fails the test unless process pid has exited (a zombie counts:
// it runs no more code) within timeout.
func waitDead(t testing.TB, timeout time.Duration, what string, pid int) {
	t.Helper()
	testtool.Eventually(t, timeout, fmt.Sprintf("%s (PID %d)", what, pid), func() (bool, string) {
		return !procstat.Alive(pid), "alive"
	})
}

// groupGone reports whether no process of group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// liveInGroups lists the live processes whose process group is one of
// pgids: what is left of the workers and everything they started.
func liveInGroups(pgids map[int]bool) []procstat.Stat {
	var out []procstat.Stat
	for _, p := range procstat.All() {
		if p.PGID > 1 && pgids[p.PGID] && !p.Dead() {
			out = append(out, p)
		}
	}
	return out
}

// childrenOf lists the live children of pid, whatever they run.
func childrenOf(pid int) []procstat.Stat {
	var out []procstat.Stat
	for _, p := range procstat.All() {
		if p.PPID == pid && !p.Dead() {
			out = append(out, p)
		}
	}
	return out
}

// procsInDir lists live processes whose working directory is dir or below.
// (procstat reads /proc/PID/stat only; the working directory is the cwd
// link.)
func procsInDir(dir string) []string {
	var found []string
	for _, p := range procstat.All() {
		if p.Dead() {
			continue
		}
		proc := "/proc/" + strconv.Itoa(p.PID)
		cwd, err := os.Readlink(proc + "/cwd")
		if err != nil || (cwd != dir && !strings.HasPrefix(cwd, dir+"/")) {
			continue
		}
		cmdline, _ := os.ReadFile(proc + "/cmdline")
		found = append(found, strconv.Itoa(p.PID)+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}
