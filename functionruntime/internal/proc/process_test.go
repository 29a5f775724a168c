package proc

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

func startSh(t *testing.T, script string, env []string) *Process {
	t.Helper()
	sh := testtool.Require(t, "", "sh", "to run the worker scripts")
	p, err := Start(Config{Path: sh, Args: []string{"-c", script}, Dir: t.TempDir(), Env: env, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(100 * time.Millisecond) })
	return p
}

// readLine reads one line the script wrote to fd 4.
func readLine(t *testing.T, p *Process) string {
	t.Helper()
	line, err := bufio.NewReader(p.Responses()).ReadString('\n')
	if err != nil {
		t.Fatalf("read fd 4: %v", err)
	}
	return strings.TrimSpace(line)
}

// Rule: workers get "NEVER the server's own environment"; a nil Env is
// empty, not inherited.
func TestStartEnvironmentNotInherited(t *testing.T) {
	t.Setenv("FNBRIDGE_PROC_SECRET", "x")
	p := startSh(t, `env >&4`, nil)
	env, _ := bufio.NewReader(p.Responses()).ReadString(0)
	if strings.Contains(env, "FNBRIDGE_PROC_SECRET") {
		t.Fatalf("server environment leaked: %q", env)
	}
}

// Rule: own process group; fds 3 and 4 are the request and response pipes.
func TestStartGroupAndPipes(t *testing.T) {
	p := startSh(t, `read x <&3; echo "got $x $$" >&4; sleep 60`, []string{"PATH=/usr/bin:/bin"})
	if _, err := p.Requests().Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if got, want := readLine(t, p), "got ping "+strconv.Itoa(p.Pid()); got != want {
		t.Fatalf("worker said %q, want %q", got, want)
	}
	if pgid, _ := syscall.Getpgid(p.Pid()); pgid != p.Pid() {
		t.Fatalf("pgid %d, want own group %d", pgid, p.Pid())
	}
}

// Rule: "kill the worker's whole process group (TERM, then KILL after the
// grace), reap it"; "no orphans".
func TestTerminateKillsStubbornGroup(t *testing.T) {
	// The leader and a detached grandchild both ignore SIGTERM.
	p := startSh(t, `trap '' TERM; (trap '' TERM; sleep 300 & echo $! >&4) ; sleep 300`, []string{"PATH=/usr/bin:/bin"})
	grandchild, err := strconv.Atoi(readLine(t, p))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.Terminate(200 * time.Millisecond)
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond {
		t.Fatalf("Terminate took %v: SIGTERM-ignoring group killed before the grace", elapsed)
	}
	if !p.HasExited() || !strings.Contains(p.ExitDescription(), "killed") {
		t.Fatalf("leader not reaped or not killed: %q", p.ExitDescription())
	}
	if err := syscall.Kill(-p.Pid(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("group %d still has members after Terminate (grandchild %d): %v", p.Pid(), grandchild, err)
	}
	p.Terminate(0) // idempotent
}

func TestTerminateQuickWhenGroupObeysTerm(t *testing.T) {
	p := startSh(t, `sleep 300 & sleep 300`, []string{"PATH=/usr/bin:/bin"})
	start := time.Now()
	p.Terminate(5 * time.Second)
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Fatalf("Terminate waited %v although the group exits on SIGTERM", elapsed)
	}
}

// Exited children re-parented to the server are reaped between
// invocations, without touching the live leader.
func TestReapStrays(t *testing.T) {
	p := startSh(t, `( sleep 0.05 & echo $! >&4 ); read x <&3`, []string{"PATH=/usr/bin:/bin"})
	orphan, err := strconv.Atoi(readLine(t, p))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.ReapStrays()
		if errors.Is(syscall.Kill(orphan, 0), syscall.ESRCH) {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(orphan) + "/stat")
			t.Fatalf("orphan %d never reaped: %s", orphan, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p.HasExited() {
		t.Fatal("ReapStrays reaped the leader")
	}
}
