package proc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An interpreter given as a relative path is pinned to an absolute one,
// so workers run the same program wherever the server's working directory
// moves; a missing one is an error, which Start reports.
func TestLookInterpreterPinsAnAbsolutePath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "interp"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(dir))
	got, err := LookInterpreter(filepath.Join(filepath.Base(dir), "interp"))
	if err != nil || got != filepath.Join(dir, "interp") {
		t.Fatalf("LookInterpreter = %q, %v; want %s", got, err, filepath.Join(dir, "interp"))
	}
	if _, err := LookInterpreter("fnbridge-no-such-interpreter"); err == nil {
		t.Fatal("a missing interpreter was found")
	}
}

func TestApplyDefaultsFillsOnlyUnset(t *testing.T) {
	grace, line := time.Duration(0), -1
	ApplyDefaults(&grace, &line)
	if grace != DefaultGrace || line != DefaultMaxLogLine {
		t.Fatalf("defaults = %v, %d", grace, line)
	}
	grace, line = time.Second, 10
	ApplyDefaults(&grace, &line)
	if grace != time.Second || line != 10 {
		t.Fatalf("set values changed to %v, %d", grace, line)
	}
}
