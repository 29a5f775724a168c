package restateserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
)

// The core without a testing.TB, as the benchmark uses it: Launch returns a
// ready server, Close stops it and removes the temporary directory Launch
// made, while a caller's Dir is left with the server's log in it.
func TestLaunchAndClose(t *testing.T) {
	bin := restateserver.Binary(t)
	ctx := context.Background()

	s, err := restateserver.Launch(ctx, restateserver.Options{Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	base, pid := s.BaseDir(), s.PID()
	if pid == 0 || pid != s.Pgid() {
		t.Errorf("PID %d, Pgid %d: want the running group leader", pid, s.Pgid())
	}
	if _, err := s.Query(ctx, "SELECT id FROM sys_invocation LIMIT 1"); err != nil {
		t.Fatalf("query after Launch: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if !groupGone(pid) {
		t.Errorf("process group %d survived Close", pid)
	}
	if _, err := os.Stat(filepath.Dir(base)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left the temporary directory of %s: %v", base, err)
	}

	dir := filepath.Join(t.TempDir(), "rs")
	s, err = restateserver.Launch(ctx, restateserver.Options{Binary: bin, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.BaseDir(), dir+string(filepath.Separator)) {
		t.Errorf("base directory %s is not under Dir %s", s.BaseDir(), dir)
	}
	if err := s.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "restate-server-*.log"))
	if len(logs) == 0 {
		t.Errorf("Close removed the caller's Dir %s or its log", dir)
	}
}

// A server that cannot start is an error carrying the cause, and leaves
// neither a process nor the temporary directory behind.
func TestLaunchFailures(t *testing.T) {
	t.Setenv(restateserver.BinaryEnv, "")
	if _, err := restateserver.Launch(context.Background(), restateserver.Options{}); err == nil || !strings.Contains(err.Error(), "RESTATE_SERVER_BIN is not set") {
		t.Errorf("Launch without a binary: %v", err)
	}

	// A short TMPDIR of our own (t.TempDir may exceed the length Launch
	// accepts for its parent) to see what Launch leaves in it.
	tmp, err := os.MkdirTemp("/tmp", "rst-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	exits := filepath.Join(tmp, "exits")
	sleeps := filepath.Join(tmp, "sleeps")
	pidFile := filepath.Join(tmp, "pid")
	if err := os.WriteFile(exits, []byte("#!/bin/sh\necho no such flag >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sleeps, []byte("#!/bin/sh\necho $$ > "+pidFile+"\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	_, err = restateserver.Launch(context.Background(), restateserver.Options{Binary: exits})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "no such flag") {
		t.Errorf("Launch of a binary that exits: %v, want the exit and the log tail", err)
	}

	// Cancel the start once the stand-in server runs: Launch must stop it.
	ctx, cancel := context.WithCancel(context.Background())
	pidc := make(chan int, 1)
	go func() {
		defer cancel()
		for ctx.Err() == nil {
			if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				pidc <- pid
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err = restateserver.Launch(ctx, restateserver.Options{Binary: sleeps})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Launch with a cancelled context: %v, want context.Canceled", err)
	}
	select {
	case pid := <-pidc:
		if pid == 0 || !groupGone(pid) {
			t.Errorf("the unready server's group %d survived", pid)
		}
	default:
		t.Error("the stand-in server never ran")
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "rs-*")); len(left) != 0 {
		t.Errorf("failed starts left directories behind: %v", left)
	}
}
