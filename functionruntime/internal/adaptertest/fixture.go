// Package adaptertest is the conformance suite of the built-in adapters:
// [Run] checks every behaviour the function-runtime contract
// (docs/spec/function-runtime-server-contract.md) asks of an adapter and
// that the python and bash adapters share, in the manner of
// golang.org/x/net/nettest's TestConn. Each adapter package describes
// itself with an [Adapter]: how to build it, how its inputs and outputs
// are spelled, and the handler files that play each case. What only one
// interpreter does stays in that adapter's own tests, which use the same
// [Fixture].
//
// It also holds the helper-process entry point of the server-death tests
// ([Main]) and the benchmark bodies both adapters run. It is only
// imported by tests.
package adaptertest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// Grace is the SIGTERM-to-SIGKILL grace of the suite's adapters: short,
// so the tests of a handler that ignores SIGTERM stay quick.
const Grace = 500 * time.Millisecond

// Options are the adapter settings the suite varies; [Adapter.New] maps
// them onto the adapter's own options. Zero fields mean the defaults.
type Options struct {
	Interpreter string
	Grace       time.Duration
}

// Handler is a handler string and the files of its working directory
// (relative path → content).
type Handler struct {
	Handler string
	Files   map[string]string
}

// Adapter describes one adapter to the suite. Every field is required
// unless its comment says otherwise.
type Adapter struct {
	// Kind is what the adapter's Kind method returns.
	Kind string
	// Interpreter is the program the adapter runs, looked up in PATH by
	// [Require].
	Interpreter string
	// New builds the adapter.
	New func(Options) functionruntime.Adapter
	// Text spells a text as the handler's input (a JSON string for
	// python, the bytes themselves for bash).
	Text func(string) string
	// Decode reads a handler's output that is a text back (the inverse of
	// Text for what a handler returns).
	Decode func([]byte) (string, error)

	// ValidHandlers and InvalidHandlers are handler strings
	// ValidateHandler must accept and refuse.
	ValidHandlers, InvalidHandlers []string
	// StartFailures are handlers that cannot be loaded; Start must fail
	// naming the handler and saying why.
	StartFailures []StartFailure
	// SymlinkInside is a handler reached through a symlink that stays
	// inside the working directory; it is fine.
	SymlinkInside Case
	// Env is a handler that returns its whole environment.
	Env EnvCase
	// Cwd is a handler reporting its working directory; WantCwd is its
	// output for working directory dir.
	Cwd     Handler
	WantCwd func(dir string) string
	// CwdAtLoad is Cwd's function in a file that changes directory when
	// it is loaded; its output must still be WantCwd's.
	CwdAtLoad Handler
	// Failures are handlers that fail, each call with the exact
	// HandlerError it must yield; they run on one worker, which survives.
	Failures []Failure
	// Outputs appends the text Text(s) to the file FNBRIDGE_OUTPUTS names
	// and returns OutputsResult (raw).
	Outputs       Handler
	OutputsResult string

	// Lifecycle is the handler of the process tests. Its input is an
	// event spelled with Text: "pid" returns the worker's pid; "sleep"
	// creates the file "sleeping" in the working directory and sleeps
	// 60s; "ignore_term" ignores SIGTERM, then creates "sleeping" and
	// sleeps; each of Spawns
	// starts a background child (sleep) and returns its pid; each
	// Crashes event kills the worker mid-invocation. Any other event is
	// returned as it came. Loading the file writes LoadLine to stderr.
	Lifecycle Handler
	LoadLine  string
	Spawns    []string
	Crashes   []Crash
	// BreakRestart are ways to break the lifecycle handler's files so the
	// worker cannot be started again.
	BreakRestart []Breakage
	// SlowStart is a handler whose loading writes the worker's pid to the
	// file "pid" (complete when it appears) and then hangs.
	SlowStart Handler

	// Logs is a handler that writes Lines (the last without a newline) to
	// its logs and returns LogsResult (raw); its files write LoadLines
	// while loading.
	Logs       Handler
	LogsResult string
	Lines      []string
	LoadLines  []string
	// Levels is the level each of Lines is logged at: a line keeps the
	// level it starts with or, as a JSON line, names.
	Levels []string
	// BigLine writes one line of n 'x' to stderr for input BigLineInput(n)
	// and returns BigLineResult (raw).
	BigLine       Handler
	BigLineInput  func(n int) string
	BigLineResult string

	// Orphans is the handler of the server-death test, with two events:
	// "bg" starts a background sleep child and returns "worker subshell
	// child" pids at once (subshell: the process running the function,
	// possibly the worker itself); "long" starts a sleep child, writes the
	// same three pids to the file "long" (complete when it appears) and
	// waits for the child.
	Orphans Handler

	// Inline, optional, runs every worker's invocations in its own shell
	// (WorkerSpec.Inline): the suite's rules hold there too.
	Inline bool

	sharedOnce sync.Once
	shared     functionruntime.Adapter
}

// StartFailure is a handler Start must refuse with an error containing
// every Want and the handler string.
type StartFailure struct {
	Name string
	Handler
	// Setup, optional, prepares the working directory further (symlinks).
	Setup func(t testing.TB, dir string)
	Want  []string
}

// Case is a handler whose one invocation with Input returns Output (raw).
type Case struct {
	Handler
	Setup         func(t testing.TB, dir string) // optional
	Input, Output string
}

// EnvCase is a handler returning its environment, read back by Parse.
// ServerVars are interpreter variables set in the server that must not
// reach (nor affect) the worker; Added are variables the interpreter adds
// to its own environment, which the comparison ignores.
type EnvCase struct {
	Handler
	Parse      func([]byte) (map[string]string, error)
	ServerVars map[string]string
	Added      []string
}

// Failure is a handler failing on every call.
type Failure struct {
	Name string
	Handler
	Calls []FailedCall
}

// FailedCall is one input and the error it must yield.
type FailedCall struct {
	Input string
	Want  functionruntime.HandlerError
}

// Crash is a lifecycle event that kills the worker mid-invocation, and
// what the crash error must say about how it ended.
type Crash struct{ Event, Want string }

// Breakage breaks the lifecycle files in dir; a restart then fails with
// an error containing Want.
type Breakage struct {
	Name  string
	Break func(dir string) error
	Want  string
}

// adapter returns the one adapter of the fixtures, so the interpreter is
// resolved (and probed) once.
func (a *Adapter) adapter() functionruntime.Adapter {
	a.sharedOnce.Do(func() { a.shared = a.New(Options{Grace: Grace}) })
	return a.shared
}

// Require skips the test when program (an interpreter) is not in PATH,
// or fails it in CI, where the interpreters are required.
func Require(t testing.TB, program string) {
	t.Helper()
	testtool.Require(t, "", program, "to run the adapter's workers")
}

// WriteFiles creates files (relative path → content) under dir.
func WriteFiles(t testing.TB, dir string, files map[string]string) {
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

// Fixture is one registration under test: a working directory holding the
// handler's files, a log sink and the spec Start gets.
type Fixture struct {
	Dir  string
	Logs *proctest.Logs
	Spec functionruntime.WorkerSpec
	// A is the adapter Start uses; a test may replace it to vary options.
	A functionruntime.Adapter

	desc *Adapter
}

// NewFixture writes files into a fresh working directory and prepares a
// registration of handler there, with run UID "run-1".
func (a *Adapter) NewFixture(t testing.TB, handler string, files map[string]string) *Fixture {
	t.Helper()
	Require(t, a.Interpreter)
	dir := t.TempDir()
	WriteFiles(t, dir, files)
	logs := &proctest.Logs{}
	return &Fixture{
		Dir:  dir,
		Logs: logs,
		A:    a.adapter(),
		Spec: functionruntime.WorkerSpec{
			RunUID: "run-1", Dir: dir, Handler: handler, Logger: logs.Logger("run-1"), Inline: a.Inline,
		},
		desc: a,
	}
}

// Start starts the worker, failing the test if it does not start; the
// worker is closed at the end of the test.
func (f *Fixture) Start(t testing.TB) functionruntime.Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := f.A.Start(ctx, f.Spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", f.Spec.Handler, err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// StartErr returns the error of a Start that must fail.
func (f *Fixture) StartErr(t testing.TB) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := f.A.Start(ctx, f.Spec)
	if err == nil {
		_ = w.Close()
		t.Fatalf("Start(%q) succeeded, want an error", f.Spec.Handler)
	}
	return err
}

// Invocation is invocation id with a JSON content type and a logger that
// adds invocation_id.
func (f *Fixture) Invocation(id string, input []byte) functionruntime.Invocation {
	return functionruntime.Invocation{
		ID: id, Input: input, ContentType: "application/json",
		Logger: f.Logs.Logger("run-1").With().Str("invocation_id", id).Logger(),
	}
}

// Invoke runs invocation "inv-1" with input, bounded by 30s.
func (f *Fixture) Invoke(t testing.TB, w functionruntime.Worker, input string) (functionruntime.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.Invoke(ctx, f.Invocation("inv-1", []byte(input)))
}

// MustInvoke is Invoke failing the test on an error.
func (f *Fixture) MustInvoke(t testing.TB, w functionruntime.Worker, input string) functionruntime.Result {
	t.Helper()
	res, err := f.Invoke(t, w, input)
	if err != nil {
		t.Fatalf("Invoke(%q): %v", input, err)
	}
	return res
}

// PidOf asks the lifecycle handler for its worker's pid.
func (f *Fixture) PidOf(t testing.TB, w functionruntime.Worker) int {
	t.Helper()
	out := f.MustInvoke(t, w, f.desc.Text("pid")).Output
	pid, err := strconv.Atoi(string(out))
	if err != nil {
		t.Fatalf("handler returned %q, want a pid", out)
	}
	return pid
}
