package bash_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/rs/zerolog"
)

// helperEnv selects a helper-process role when the test binary re-executes
// itself.
const helperEnv = "FNBRIDGE_BASH_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "server" {
		runServerHelper()
		return
	}
	os.Exit(m.Run())
}

// orphanSh is the handler file of the server-death test. "bg" returns at
// once but leaves a background sleep behind (and its worker then holds a
// pre-forked idle subshell); "long" starts a sleep child, records the pids
// and waits for it.
const orphanSh = `
run() {
  case $1 in
  bg)
    sleep 60 &
    echo "$$ $BASHPID $!"
    ;;
  long)
    sleep 60 &
    echo "$$ $BASHPID $!" >"$PWD/long.tmp"
    mv "$PWD/long.tmp" "$PWD/long"
    wait
    ;;
  esac
}
`

// runServerHelper plays a server: in the directory named by
// FNBRIDGE_TEST_DIR it starts two workers, runs "bg" on the first and
// prints its output, then runs "long" on the second until it is killed.
func runServerHelper() {
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	spec := functionruntime.WorkerSpec{
		RunUID: "helper", Dir: os.Getenv("FNBRIDGE_TEST_DIR"), Handler: "h.run", Logger: zerolog.Nop(),
	}
	a := bash.New(bash.Options{})
	idle, err := a.Start(context.Background(), spec)
	if err != nil {
		fail(err)
	}
	res, err := idle.Invoke(context.Background(), functionruntime.Invocation{ID: "1", Input: []byte("bg"), Logger: zerolog.Nop()})
	if err != nil {
		fail(err)
	}
	fmt.Println(string(res.Output))
	busy, err := a.Start(context.Background(), spec)
	if err != nil {
		fail(err)
	}
	_, err = busy.Invoke(context.Background(), functionruntime.Invocation{ID: "2", Input: []byte("long"), Logger: zerolog.Nop()})
	fail(fmt.Errorf("long invocation returned: %v", err))
}

// Rule (contract): workers "die with the server (Linux parent-death
// signal)"; no orphan bash process survives a SIGKILLed server. That
// covers the invocation's subshell and its children, a background child
// an earlier invocation left, and the idle pre-forked subshell, not just
// the worker process itself.
func TestServerKillLeavesNoHandlerProcess(t *testing.T) {
	requireBash(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"h.sh": orphanSh})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// The killed helper cannot remove its worker scratch directories: keep
	// them inside the test's temporary directory.
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
	idle := parsePids(t, line)
	long := filepath.Join(dir, "long")
	proctest.Eventually(t, 10*time.Second, "long invocation running", func() bool {
		_, err := os.Stat(long)
		return err == nil
	})
	b, err := os.ReadFile(long)
	if err != nil {
		t.Fatal(err)
	}
	busy := parsePids(t, string(b))
	// The "bg" subshell itself has ended; its worker and child run on.
	for _, pid := range []int{idle[0], idle[2], busy[0], busy[1], busy[2]} {
		if proctest.ProcessDead(pid) {
			t.Fatalf("process %d is not running before the server is killed", pid)
		}
	}
	t.Cleanup(func() { killGroups(idle[0], busy[0]) })

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	var left []int
	for {
		left = append(liveInGroup(idle[0]), liveInGroup(busy[0])...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3s after the server was SIGKILLed these processes of its bash workers' groups are alive: %v "+
				"(idle worker, subshell, bg child: %v; busy worker, subshell, sleep: %v)", left, idle, busy)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// parsePids parses "worker subshell child" pids.
func parsePids(t *testing.T, s string) []int {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 3 {
		t.Fatalf("want three pids, got %q", s)
	}
	pids := make([]int, len(f))
	for i, x := range f {
		pid, err := strconv.Atoi(x)
		if err != nil {
			t.Fatalf("want three pids, got %q", s)
		}
		pids[i] = pid
	}
	return pids
}

// liveInGroup lists the processes of group pgid that are neither gone nor
// zombies, reaping zombies that were re-parented to this process.
func liveInGroup(pgid int) []int {
	var ws syscall.WaitStatus
	for {
		if pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil); err != nil || pid <= 0 {
			break
		}
	}
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
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		if f[0] != "Z" {
			live = append(live, pid)
		}
	}
	return live
}

// killGroups leaves nothing behind should the test fail.
func killGroups(pgids ...int) {
	for _, g := range pgids {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
}
