package python_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	switch os.Getenv(helperEnv) {
	case "server":
		runServerHelper()
		return
	case "busy-server":
		runBusyServerHelper()
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

// orphanPy is the handler of the server-death test: it starts a sleep
// child (in the worker's group), records the pids and sleeps.
const orphanPy = `
import os, subprocess, time

def long(event):
    child = subprocess.Popen(["sleep", "60"])
    with open("pids.tmp", "w") as f:
        f.write("%d %d" % (os.getpid(), child.pid))
    os.rename("pids.tmp", "pids")
    time.sleep(60)
`

// runBusyServerHelper plays a server whose only invocation runs until the
// server is killed.
func runBusyServerHelper() {
	a := python.New(python.Options{})
	w, err := a.Start(context.Background(), functionruntime.WorkerSpec{
		RunUID: "helper", Dir: os.Getenv("FNBRIDGE_TEST_DIR"), Handler: "orphan.long", Logger: zerolog.Nop(),
	})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	_, err = w.Invoke(context.Background(), functionruntime.Invocation{ID: "1", Input: []byte(`null`), Logger: zerolog.Nop()})
	fmt.Println("error: long invocation returned:", err)
	os.Exit(1)
}

// Rule (contract): workers "die with the server (Linux parent-death
// signal)"; no orphan python process survives a SIGKILLed server, and
// neither do the processes a handler started (they are in the worker's
// group).
func TestServerKillLeavesNoHandlerProcess(t *testing.T) {
	requirePython(t)
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep command")
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"orphan.py": orphanPy})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=busy-server", "FNBRIDGE_TEST_DIR="+dir, "TMPDIR="+t.TempDir())
	cmd.Stdout = os.Stderr // only errors are printed
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pidsFile := filepath.Join(dir, "pids")
	proctest.Eventually(t, 20*time.Second, "handler running", func() bool {
		_, err := os.Stat(pidsFile)
		return err == nil
	})
	b, err := os.ReadFile(pidsFile)
	if err != nil {
		t.Fatal(err)
	}
	var worker, child int
	if _, err := fmt.Sscanf(string(b), "%d %d", &worker, &child); err != nil {
		t.Fatalf("handler wrote %q: %v", b, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-worker, syscall.SIGKILL) })
	for _, pid := range []int{worker, child} {
		if proctest.ProcessDead(pid) {
			t.Fatalf("process %d not running before the server is killed", pid)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		var ws syscall.WaitStatus
		for { // reap what was re-parented to this process
			if pid, err := syscall.Wait4(-worker, &ws, syscall.WNOHANG, nil); err != nil || pid <= 0 {
				break
			}
		}
		left := liveInGroup(worker)
		for _, pid := range []int{worker, child} {
			if !proctest.ProcessDead(pid) && !slices.Contains(left, pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3s after the server was SIGKILLed, these processes of its python worker's group are alive: %v (worker %d, its sleep child %d)", left, worker, child)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// liveInGroup lists the processes of group pgid that are neither gone nor
// zombies.
func liveInGroup(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var live []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			live = append(live, pid)
		}
	}
	return live
}
