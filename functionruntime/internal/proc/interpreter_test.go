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

func TestWithDefaultsFillsOnlyUnset(t *testing.T) {
	got := Settings{MaxLogLine: -1, NoSubreaper: true}.WithDefaults("sh", 99)
	if want := (Settings{Interpreter: "sh", Grace: DefaultGrace, MaxLogLine: DefaultMaxLogLine, MaxOutput: 99, NoSubreaper: true}); got != want {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
	set := Settings{Interpreter: "bash", Grace: time.Second, MaxLogLine: 10, MaxOutput: 5}
	if got := set.WithDefaults("sh", 99); got != set {
		t.Fatalf("set values changed to %+v", got)
	}
}
