package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// `bridge invoke` is the inner loop: on a terminal it prints the result,
// what the function printed and only the bridge's warnings and errors, as
// console lines; redirected, it logs JSON at info as before. Either way a
// function's own lines keep their levels.
func TestInvokeLogsOnATerminal(t *testing.T) {
	requireInterpreters(t)
	ws := newWorkspace(t, "loglevels.py")
	cfg := ws.config(t, "services:\n  - name: Logs\n    handlers:\n      - {name: run, runtime: python, dir: fn, handler: loglevels.run}\n")
	args := []string{"invoke", "--config", cfg, "Logs/run", "{}"}

	stdout, term, code := runOnTerminal(t, 60*time.Second, args...)
	if code != 0 || strings.TrimSpace(stdout) != `{"ok":true}` {
		t.Fatalf("on a terminal: exit %d, stdout %q\nterminal:\n%s", code, stdout, term)
	}
	for _, want := range []string{"INF", "a plain line", "WRN", "WARNING:root:low disk", "ERR", "a JSON error", `"code":7`} {
		if !strings.Contains(term, want) {
			t.Errorf("the terminal does not show %q:\n%s", want, term)
		}
	}
	for _, unwanted := range []string{`{"level"`, "registering function", "registration ready"} {
		if strings.Contains(term, unwanted) {
			t.Errorf("the terminal shows %q (the bridge's info, or JSON):\n%s", unwanted, term)
		}
	}

	// A flag the user sets wins over the terminal default.
	_, term, code = runOnTerminal(t, 60*time.Second, append([]string{"--log-format", "json"}, args...)...)
	if code != 0 || !strings.Contains(term, `"level":"warn"`) || !strings.Contains(term, "a plain line") || strings.Contains(term, "registering function") {
		t.Errorf("--log-format json on a terminal: exit %d, want JSON, the bridge's from warn:\n%s", code, term)
	}
	_, term, code = runOnTerminal(t, 60*time.Second, append([]string{"--log-level", "warn"}, args...)...)
	if code != 0 || !strings.Contains(term, "WARNING:root:low disk") || strings.Contains(term, "a plain line") {
		t.Errorf("--log-level warn on a terminal: exit %d, want the function's lines from warn only:\n%s", code, term)
	}

	stdout, stderr, code := runBridge(t, 60*time.Second, args...)
	if code != 0 || strings.TrimSpace(stdout) != `{"ok":true}` {
		t.Fatalf("redirected: exit %d, stdout %q\nstderr:\n%s", code, stdout, stderr)
	}
	levels := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		rec := parseRecord(t, line)
		if rec["source"] == "handler" {
			levels[fmt.Sprint(rec["message"])] = fmt.Sprint(rec["level"])
		}
	}
	want := map[string]string{"a plain line": "info", "WARNING:root:low disk": "warn", "a JSON error": "error"}
	for msg, level := range want {
		if levels[msg] != level {
			t.Errorf("redirected: %q logged at %q, want %s (handler lines: %v)", msg, levels[msg], level, levels)
		}
	}
}

// parseRecord decodes one JSON log line or fails the test.
func parseRecord(t *testing.T, line string) map[string]any {
	t.Helper()
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("log line is not JSON: %q", line)
	}
	return rec
}

// runOnTerminal runs the bridge binary with its stderr on a fresh
// pseudo-terminal (stdout on a pipe), in its own process group, and
// returns stdout, everything the terminal showed and the exit code.
func runOnTerminal(t *testing.T, timeout time.Duration, args ...string) (stdout, term string, code int) {
	t.Helper()
	master, slave := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bridgeBin(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = slave.Close() // the child holds its copy; the master reads EOF (EIO) once it is gone
	shown := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(master)
		shown <- b
	}()
	err := cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("bridge %s did not finish within %s", strings.Join(args, " "), timeout)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee != nil {
		code = ee.ExitCode()
	}
	// Workers the command started share its terminal until they are reaped.
	select {
	case b := <-shown:
		term = string(b)
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal stayed open after the command exited")
	}
	return out.String(), term, code
}

// openPTY opens a pseudo-terminal pair; both ends close at the end of the
// test.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return m, s
}
