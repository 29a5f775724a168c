package python_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/fnbridge/fnbridge/functionruntime/python"
	"github.com/rs/zerolog"
)

// helperEnv selects a helper-process role when the test binary re-executes
// itself.
const helperEnv = "FNBRIDGE_PYTHON_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "server" {
		runServerHelper()
		return
	}
	os.Exit(m.Run())
}

// runServerHelper plays a server: it starts a worker in the directory named
// by FNBRIDGE_TEST_DIR, prints the worker's pid, and waits to be killed.
func runServerHelper() {
	a := python.New(python.Options{})
	w, err := a.Start(context.Background(), functionruntime.WorkerSpec{
		RunUID: "helper", Dir: os.Getenv("FNBRIDGE_TEST_DIR"), Handler: "h.lifecycle", Logger: zerolog.Nop(),
	})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	res, err := w.Invoke(context.Background(), functionruntime.Invocation{ID: "1", Input: []byte(`"pid"`), Logger: zerolog.Nop()})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(string(res.Output))
	select {}
}

// Rule: workers "die with the server (Pdeathsig SIGKILL)".
func TestWorkerDiesWithServer(t *testing.T) {
	requirePython(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"h.py": handlerPy})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// The killed helper cannot remove its worker scratch directory: keep
	// it inside the test's temporary directory.
	cmd.Env = append(os.Environ(), helperEnv+"=server", "FNBRIDGE_TEST_DIR="+dir, "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper printed %q", line)
	}
	if proctest.ProcessDead(pid) {
		t.Fatalf("worker %d not running", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	proctest.Eventually(t, 10*time.Second, "worker killed with its server", func() bool { return proctest.ProcessDead(pid) })
	// It may have been re-parented to this process: reap it.
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
}
