package python

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// An interpreter that hangs instead of answering the version check fails
// when the registration's context ends, not never.
func TestInterpreterProbeIsBounded(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "python3")
	writeScript(t, hang, "sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ResolveInterpreter(ctx, dir, hang, "")
	if err == nil || !strings.Contains(err.Error(), "does not run") || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("error = %v, want the probe killed at the deadline", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the probe took %s", d)
	}
}

// The probe's answer is kept per interpreter file: the next registration
// runs nothing, and an interpreter replaced (a venv made again) is asked
// again.
func TestInterpreterProbeIsCachedPerFile(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	py := filepath.Join(dir, "python")
	answer := func(v string) string {
		return `echo x >>` + calls + `; echo 'fnbridge-python-probe {"version": [` + v + `], "executable": "", "prefix": "/p", "base_prefix": "/p"}'`
	}
	writeScript(t, py, answer("3, 10, 1"))
	for range 3 {
		it, err := ResolveInterpreter(context.Background(), dir, py, "")
		if err != nil || it.Version != "3.10.1" || it.Executable != py || it.VirtualEnv != "" {
			t.Fatalf("resolved %+v, %v", it, err)
		}
	}
	// A new file, not just new content: the mtime alone may not move
	// within the clock's resolution.
	if err := os.Remove(py); err != nil {
		t.Fatal(err)
	}
	writeScript(t, py, answer("3, 12, 0")+"  # now longer")
	it, err := ResolveInterpreter(context.Background(), dir, py, "")
	if err != nil || it.Version != "3.12.0" {
		t.Fatalf("after replacing the interpreter: %+v, %v", it, err)
	}
	if b, _ := os.ReadFile(calls); strings.Count(string(b), "x") != 2 {
		t.Errorf("the probe ran %d times for two interpreter files, want 2", strings.Count(string(b), "x"))
	}
}
