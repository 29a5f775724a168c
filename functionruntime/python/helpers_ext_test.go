package python_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/fnbridge/fnbridge/functionruntime/python"
)

// requirePython skips (or, in CI, fails) when python3 is not installed.
func requirePython(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 is required in CI: %v", err)
		}
		t.Skipf("python3 not found in PATH: %v", err)
	}
}

// writeFiles creates files (relative path → content) under dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sharedAdapter is one adapter for the tests that need no special options,
// so the interpreter is resolved once.
var sharedAdapter = sync.OnceValue(func() functionruntime.Adapter {
	return python.New(python.Options{Grace: 500 * time.Millisecond})
})

type fixture struct {
	dir  string
	logs *proctest.Logs
	spec functionruntime.WorkerSpec
	a    functionruntime.Adapter
}

func newFixture(t testing.TB, handler string, files map[string]string) *fixture {
	t.Helper()
	requirePython(t)
	dir := t.TempDir()
	writeFiles(t, dir, files)
	logs := &proctest.Logs{}
	// Every invocation's log lines must be synchronised by the worker's
	// marker; a missing marker means lines lost their invocation fields.
	t.Cleanup(func() {
		if recs := logs.Records("worker log marker missing"); len(recs) > 0 {
			t.Errorf("log marker missing: %v", recs)
		}
	})
	return &fixture{
		dir:  dir,
		logs: logs,
		a:    sharedAdapter(),
		spec: functionruntime.WorkerSpec{
			RunUID: "run-1", Dir: dir, Handler: handler, Logger: logs.Logger("run-1"),
		},
	}
}

func (f *fixture) start(t testing.TB) functionruntime.Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := f.a.Start(ctx, f.spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", f.spec.Handler, err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func (f *fixture) startErr(t testing.TB) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := f.a.Start(ctx, f.spec)
	if err == nil {
		_ = w.Close()
		t.Fatalf("Start(%q) succeeded, want an error", f.spec.Handler)
	}
	return err
}

func (f *fixture) invocation(id, input string) functionruntime.Invocation {
	return functionruntime.Invocation{
		ID: id, Input: []byte(input), ContentType: "application/json",
		Logger: f.logs.Logger("run-1").With().Str("invocation_id", id).Logger(),
	}
}

func (f *fixture) invoke(t testing.TB, w functionruntime.Worker, input string) (functionruntime.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.Invoke(ctx, f.invocation("inv-1", input))
}

func (f *fixture) mustInvoke(t testing.TB, w functionruntime.Worker, input string) functionruntime.Result {
	t.Helper()
	res, err := f.invoke(t, w, input)
	if err != nil {
		t.Fatalf("Invoke(%s): %v", input, err)
	}
	return res
}

// pidOf invokes a handler that returns its worker's pid.
func (f *fixture) pidOf(t testing.TB, w functionruntime.Worker) int {
	t.Helper()
	out := f.mustInvoke(t, w, `"pid"`).Output
	pid, err := strconv.Atoi(string(out))
	if err != nil {
		t.Fatalf("handler returned %q, want a pid", out)
	}
	return pid
}
