package functionruntime_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// fakeAdapter is an in-memory Adapter whose Start and Invoke behaviour each
// test controls. The server rules under test are about the server, so a
// fake that records what the server asked of it is the right tool; the real
// adapters have their own tests.
type fakeAdapter struct {
	// start replaces the default Start (which returns a fresh fakeWorker).
	start func(ctx context.Context, spec functionruntime.WorkerSpec) error
	// invoke replaces the default Invoke (which echoes the input).
	invoke func(ctx context.Context, inv functionruntime.Invocation) (functionruntime.Result, error)

	// closeErr is returned by every worker's Close.
	closeErr error
	// checkInterpreter, when set, makes the harness's adapter an
	// InterpreterChooser with this check.
	checkInterpreter func(string) error
	// inline, when set, makes the harness's adapter an InlineRunner.
	inline bool

	starts  atomic.Int32
	mu      sync.Mutex
	workers []*fakeWorker
}

func (a *fakeAdapter) Kind() string { return "fake" }

// ValidateHandler accepts module.function style handlers.
func (a *fakeAdapter) ValidateHandler(h string) error {
	mod, fn, ok := strings.Cut(h, ".")
	if !ok || mod == "" || fn == "" {
		return fmt.Errorf("handler %q must be module.function", h)
	}
	return nil
}

func (a *fakeAdapter) Start(ctx context.Context, spec functionruntime.WorkerSpec) (functionruntime.Worker, error) {
	a.starts.Add(1)
	if a.start != nil {
		if err := a.start(ctx, spec); err != nil {
			return nil, err
		}
	}
	w := &fakeWorker{a: a, spec: spec}
	a.mu.Lock()
	a.workers = append(a.workers, w)
	a.mu.Unlock()
	return w, nil
}

// allWorkers returns the workers started so far.
func (a *fakeAdapter) allWorkers() []*fakeWorker {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*fakeWorker(nil), a.workers...)
}

type fakeWorker struct {
	a          *fakeAdapter
	spec       functionruntime.WorkerSpec
	closed     atomic.Bool
	running    atomic.Int32
	maxRunning atomic.Int32
	invokes    atomic.Int32
}

func (w *fakeWorker) Invoke(ctx context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
	if w.closed.Load() {
		return functionruntime.Result{}, errors.New("fake worker: invoke after close")
	}
	w.invokes.Add(1)
	n := w.running.Add(1)
	defer w.running.Add(-1)
	for {
		m := w.maxRunning.Load()
		if n <= m || w.maxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	inv.Logger.Info().Msg("fake handler running")
	if w.a.invoke != nil {
		return w.a.invoke(ctx, inv)
	}
	return functionruntime.Result{Output: append([]byte("echo:"), inv.Input...), ContentType: inv.ContentType}, nil
}

func (w *fakeWorker) Close() error {
	w.closed.Store(true)
	return w.a.closeErr
}

// gate lets a test hold invocations (or starts) and release them.
type gate struct {
	entered chan string   // receives the invocation ID when one enters
	release chan struct{} // closed to let every held call return
	once    sync.Once
}

func newGate() *gate {
	return &gate{entered: make(chan string, 16), release: make(chan struct{})}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// invoke holds until released (echoing the input) or until ctx ends.
func (g *gate) invoke(ctx context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
	g.entered <- inv.ID
	select {
	case <-g.release:
		return functionruntime.Result{Output: inv.Input}, nil
	case <-ctx.Done():
		return functionruntime.Result{}, ctx.Err()
	}
}

// start holds Start until released or until ctx ends.
func (g *gate) start(ctx context.Context, spec functionruntime.WorkerSpec) error {
	g.entered <- spec.RunUID
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// waitEntered waits for one held call to enter.
func (g *gate) waitEntered(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.entered:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a held call to start")
		return ""
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// harness is a Server with a fake adapter, reached through the in-process
// client, with a working directory and captured logs.
type harness struct {
	t    *testing.T
	ad   *fakeAdapter
	srv  *functionruntime.Server
	cli  executorv1.FunctionRuntimeClient
	dir  string
	logs *syncBuffer
}

func newHarness(t *testing.T, ad *fakeAdapter, lim functionruntime.Limits, now func() time.Time) *harness {
	t.Helper()
	return newHarnessWith(t, ad, functionruntime.Options{Limits: lim, Now: now})
}

// newHarnessWith is newHarness with the server's options; the harness sets
// their Adapter (ad) and Logger (the captured logs).
func newHarnessWith(t *testing.T, ad *fakeAdapter, opts functionruntime.Options) *harness {
	t.Helper()
	logs := &syncBuffer{}
	opts.Adapter = ad
	switch {
	case ad.checkInterpreter != nil && ad.inline:
		opts.Adapter = inlineChoosingAdapter{choosingAdapter{ad}}
	case ad.checkInterpreter != nil:
		opts.Adapter = choosingAdapter{ad}
	case ad.inline:
		opts.Adapter = inlineAdapter{ad}
	}
	opts.Logger = zerolog.New(logs).Level(zerolog.DebugLevel)
	srv := functionruntime.NewServer(opts)
	h := &harness{t: t, ad: ad, srv: srv, cli: functionruntime.NewLocalClient(srv), dir: t.TempDir(), logs: logs}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		for i, w := range ad.allWorkers() {
			if !w.closed.Load() {
				t.Errorf("worker %d was not closed by Shutdown", i)
			}
			if m := w.maxRunning.Load(); m > 1 {
				t.Errorf("worker %d ran %d invocations at once; the server must allow one", i, m)
			}
		}
	})
	return h
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (h *harness) registerReq(uid string, attempt int32, dig string) *executorv1.RegisterFunctionRequest {
	return &executorv1.RegisterFunctionRequest{
		RunUid:              uid,
		RegistrationAttempt: attempt,
		WorkingDir:          h.dir,
		Handler:             "handler.handle",
		Env:                 map[string]string{"GREETING": "hello"},
		IdleTimeoutSeconds:  300,
		RegistrationDigest:  dig,
	}
}

func (h *harness) register(uid string, attempt int32, dig string) (*executorv1.RegisterFunctionResponse, error) {
	return h.cli.RegisterFunction(context.Background(), h.registerReq(uid, attempt, dig))
}

// mustReady registers and requires READY.
func (h *harness) mustReady(uid string, attempt int32) *executorv1.FunctionRegistration {
	h.t.Helper()
	resp, err := h.register(uid, attempt, digest(uid))
	if err != nil {
		h.t.Fatalf("RegisterFunction(%s, %d): %v", uid, attempt, err)
	}
	if resp.GetState() != executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY {
		h.t.Fatalf("RegisterFunction(%s, %d) state = %v, want READY", uid, attempt, resp.GetState())
	}
	return resp.GetRegistration()
}

func (h *harness) invoke(ref *executorv1.FunctionRegistration, id string, input string) (*executorv1.InvokeFunctionResponse, error) {
	return h.cli.InvokeFunction(context.Background(), &executorv1.InvokeFunctionRequest{
		Registration: ref, InvocationId: id, Input: []byte(input), ContentType: "application/json",
	})
}

func (h *harness) status(ref *executorv1.FunctionRegistration) (*executorv1.FunctionStatusResponse, error) {
	return h.cli.FunctionStatus(context.Background(), &executorv1.FunctionStatusRequest{Registration: ref})
}

// wantCode checks a status code and, when reason is not empty, the
// ErrorInfo reason; it returns the status for further checks.
func wantCode(t *testing.T, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status", err)
	}
	if st.Code() != code {
		t.Fatalf("code = %v (%s), want %v", st.Code(), st.Message(), code)
	}
	if reason != "" {
		info := functionruntime.ErrorInfo(err)
		if info == nil {
			t.Fatalf("no ErrorInfo detail on %v, want reason %s", err, reason)
		}
		if info.GetReason() != reason || info.GetDomain() != functionruntime.ErrorDomain {
			t.Fatalf("ErrorInfo = %s/%s, want %s/%s", info.GetDomain(), info.GetReason(), functionruntime.ErrorDomain, reason)
		}
	}
	return st
}

// TestMain fails the run when goroutines outlive the tests: every worker,
// invocation and registration goroutine must end.
func TestMain(m *testing.M) {
	if path := os.Getenv(connectHelperEnv); path != "" {
		// A helper process of TestListenGroupLetsTheGroupConnect,
		// running as another user: connect, and say whether it could.
		c, err := net.Dial("unix", path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.Close()
		os.Exit(0)
	}
	base, _ := goroutines()
	flag.Parse()
	fuzzing := flag.Lookup("test.fuzz") != nil && flag.Lookup("test.fuzz").Value.String() != ""
	code := m.Run()
	if code == 0 && !fuzzing {
		deadline := time.Now().Add(5 * time.Second)
		for n, _ := goroutines(); n > base && time.Now().Before(deadline); n, _ = goroutines() {
			time.Sleep(10 * time.Millisecond)
		}
		if n, stacks := goroutines(); n > base {
			fmt.Fprintf(os.Stderr, "goroutine leak: %d goroutines after tests, %d before\n%s\n", n, base, stacks)
			code = 1
		}
	}
	os.Exit(code)
}

// processLifetime marks the goroutines a real worker's start leaves
// running for the rest of the process by design (package proc's spawn
// thread and orphan reaper, and the signal loop the reaper's
// signal.Notify starts): they are no leak.
var processLifetime = []string{"internal/proc.onSpawnThread", "becomeSubreaper", "os/signal.loop"}

// goroutines counts the goroutines but those of processLifetime, and
// returns every goroutine's stack.
func goroutines() (int, []byte) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		lifetime := false
		for _, fn := range processLifetime {
			lifetime = lifetime || bytes.Contains(g, []byte(fn))
		}
		if !lifetime {
			n++
		}
	}
	return n, buf
}
