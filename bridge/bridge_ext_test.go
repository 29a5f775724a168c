package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/internal/testtool"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// harness serves one bridge (python handler Svc/fn backed by a fake
// runtime) on a loopback h2c listener and plays the Restate runtime's side
// with restatetest.
type harness struct {
	t    *testing.T
	fake *fakeRuntime
	url  string
	// client plays the runtime's side (h2c); a test may wrap it to send
	// headers restate-server sends, such as traceparent.
	client *http.Client
	logs   *logRecords // the bridge's log, debug level
	// target is the handler play invokes, "Svc/fn" unless set.
	target string
	b      *bridge.Bridge
}

func newHarness(t *testing.T, extra string) *harness {
	t.Helper()
	return newHarnessWith(t, extra, bridge.Options{})
}

// newHarnessWith is newHarness with the bridge's options (metrics, a
// tracer); the fake runtime is always the python client.
func newHarnessWith(t *testing.T, extra string, opts bridge.Options) *harness {
	t.Helper()
	return newHarnessConfigWith(t, func(dir string) string {
		return svcFnConfig(dir, "        timeout: 2s\n"+extra)
	}, opts)
}

// svcFnConfig is the configuration of the handler the bridge tests serve,
// Svc/fn (python, mod.fn in dir), followed by more (its further settings,
// indented as its keys, or anything after them).
func svcFnConfig(dir, more string) string {
	return `
services:
  - name: Svc
    handlers:
      - name: fn
        runtime: python
        dir: ` + dir + `
        handler: mod.fn
` + more
}

// newHarnessConfig is newHarness with the configuration config makes for
// the handler directory dir (holding mod.py).
func newHarnessConfig(t *testing.T, config func(dir string) string) *harness {
	t.Helper()
	return newHarnessConfigWith(t, config, bridge.Options{})
}

// newHarnessConfigWith is newHarnessConfig with the bridge's options.
func newHarnessConfigWith(t *testing.T, config func(dir string) string, opts bridge.Options) *harness {
	t.Helper()
	return newHarnessFake(t, config, opts, newFakeRuntime())
}

// newHarnessFake is newHarnessConfigWith on a fake runtime the test set up
// before the bridge starts (its min_warm registrations included).
func newHarnessFake(t *testing.T, config func(dir string) string, opts bridge.Options, fake *fakeRuntime) *harness {
	t.Helper()
	logs := &logRecords{}
	opts.Logger = zerolog.New(logs).Level(zerolog.DebugLevel)
	b := startBridge(t, config, opts, fake)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := restate.NewHTTPServer(ln.Addr().String(), b.Handler())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &harness{t: t, fake: fake, url: "http://" + ln.Addr().String(), client: restatetest.NewH2CClient(), logs: logs, b: b}
}

// startBridge starts a bridge, closed when the test ends, on the
// configuration config makes for a fresh handler directory dir (holding
// mod.py), with rt as its python runtime: the one place the bridge tests
// build a bridge, whatever runtime plays the other side.
func startBridge(t *testing.T, config func(dir string) string, opts bridge.Options, rt executorv1.FunctionRuntimeClient) *bridge.Bridge {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mod.py"), []byte("def fn(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := bridge.ParseConfig([]byte(config(dir)), dir)
	if err != nil {
		t.Fatal(err)
	}
	opts.Clients = map[string]executorv1.FunctionRuntimeClient{"python": rt}
	b, err := bridge.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b
}

// play runs one invocation stream: start frames in, every frame out.
func (h *harness) play(version int, start []any, inject func(restatetest.Frame) []any) []restatetest.Frame {
	return h.playWith(version, start, inject, nil)
}

// playWith also hands the open session to onOpen, which may send frames
// (a CANCEL signal) independently of what the endpoint writes, as the
// runtime does.
func (h *harness) playWith(version int, start []any, inject func(restatetest.Frame) []any, onOpen func(*restatetest.Session)) []restatetest.Frame {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	service, handler := "Svc", "fn"
	if h.target != "" {
		service, handler, _ = strings.Cut(h.target, "/")
	}
	s := restatetest.Open(ctx, h.client, restatetest.InvokeURL(h.url, service, handler), version)
	defer s.Close()
	if err := s.Send(start...); err != nil {
		h.t.Fatal(err)
	}
	if onOpen != nil {
		go onOpen(s)
	}
	var got []restatetest.Frame
	for {
		f, err := s.Next()
		if err != nil {
			h.t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, f)
		if restatetest.Terminal(f.Type()) {
			return got
		}
		var out []any
		if inject != nil {
			out = append(out, inject(f)...)
		}
		if a, ok := restatetest.Answer(f); ok {
			out = append(out, a)
		}
		if len(out) > 0 {
			if err := s.Send(out...); err != nil {
				h.t.Fatal(err)
			}
		}
	}
}

func types(frames []restatetest.Frame) []wire.MessageType {
	out := make([]wire.MessageType, len(frames))
	for i, f := range frames {
		out[i] = f.Type()
	}
	return out
}

func wantTypes(t *testing.T, frames []restatetest.Frame, want ...wire.MessageType) {
	t.Helper()
	got := types(frames)
	if len(got) != len(want) {
		t.Fatalf("frames %v, want types %v", frames, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("frames %v, want types %v", frames, want)
		}
	}
}

func fresh(input string) []any {
	return []any{restatetest.Start("inv_test1", 1), restatetest.Input([]byte(input))}
}

func outputValue(t *testing.T, f restatetest.Frame) []byte {
	t.Helper()
	o, ok := restatetest.Message[*servicev1.OutputCommandMessage](f)
	if !ok || o.GetValue() == nil {
		t.Fatalf("frame %v is not a value output", f)
	}
	return o.GetValue().GetContent()
}

func errorOf(t *testing.T, frames []restatetest.Frame) *servicev1.ErrorMessage {
	t.Helper()
	last := frames[len(frames)-1]
	e, ok := restatetest.Message[*servicev1.ErrorMessage](last)
	if !ok {
		t.Fatalf("stream %v did not end with ErrorMessage", frames)
	}
	return e
}

// docs/ARCHITECTURE.md, the path of one invocation: Input → Run("invoke") →
// Output. The
// invoke result is journaled as the run's completion before the output,
// and InvokeFunction carries the Restate invocation id.
func TestInvokeResultIsJournaledAsRunBeforeOutput(t *testing.T) {
	for _, v := range []int{5, 6, 7} {
		h := newHarness(t, "")
		frames := h.play(v, fresh(`{"name":"x"}`), nil)
		wantTypes(t, frames, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
		run, _ := restatetest.Message[*servicev1.RunCommandMessage](frames[0])
		if run.GetName() != "invoke" {
			t.Errorf("v%d: run name %q, want invoke", v, run.GetName())
		}
		prop, _ := restatetest.Message[*servicev1.ProposeRunCompletionMessage](frames[1])
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(prop.GetValue(), &rec); err != nil || string(rec["output"]) != `{"name":"x"}` || !strings.Contains(string(rec["outputs"]), "echoed") {
			t.Errorf("v%d: journaled record %s does not carry output and outputs", v, prop.GetValue())
		}
		if got := string(outputValue(t, frames[2])); got != `{"name":"x"}` {
			t.Errorf("v%d: output %s", v, got)
		}
		if h.fake.lastReq.GetInvocationId() != "inv_test1" {
			t.Errorf("v%d: invocation_id %q, want the Restate invocation id", v, h.fake.lastReq.GetInvocationId())
		}
		if h.fake.lastReq.GetTimeoutMillis() != 2000 {
			t.Errorf("v%d: timeout_millis %d, want the handler's 2s", v, h.fake.lastReq.GetTimeoutMillis())
		}
	}
}

// The replay rule (docs/ARCHITECTURE.md): "when the journal already holds
// the completion of the invoke run, the bridge returns that recorded result
// and does not call InvokeFunction."
func TestReplayWithRecordedCompletionDoesNotInvoke(t *testing.T) {
	for _, v := range []int{6, 7} {
		h := newHarness(t, "")
		record := `{"output":{"recorded":true},"content_type":"application/json"}`
		frames := h.play(v, []any{
			restatetest.Start("inv_replay", 3), restatetest.Input([]byte(`{"new":1}`)),
			restatetest.Run(1, "invoke"), restatetest.RunValue(1, []byte(record)),
		}, nil)
		wantTypes(t, frames, wire.OutputCommandType, wire.EndMessageType)
		if got := string(outputValue(t, frames[0])); got != `{"recorded":true}` {
			t.Errorf("v%d: output %s, want the recorded one", v, got)
		}
		if n := h.fake.invokes.Load(); n != 0 {
			t.Errorf("v%d: InvokeFunction called %d times on replay of completed work", v, n)
		}
	}
}

// "Only a run that was never completed durably may execute again."
func TestReplayedRunWithoutCompletionInvokesAgain(t *testing.T) {
	h := newHarness(t, "")
	frames := h.play(6, []any{restatetest.Start("inv_r", 2), restatetest.Input([]byte(`1`)), restatetest.Run(1, "invoke")}, nil)
	wantTypes(t, frames, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	if n := h.fake.invokes.Load(); n != 1 {
		t.Fatalf("InvokeFunction called %d times, want 1", n)
	}
}

// Error class "handler signalled a terminal failure → run completed with a
// failure; invocation ends with that failure, no retry".
func TestTerminalHandlerFailureIsJournaledAndEnds(t *testing.T) {
	h := newHarness(t, "")
	h.fake.setInvoke(func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		return nil, runtimeError(codes.Unknown, functionruntime.ReasonHandlerTerminalError, "order not found")
	})
	frames := h.play(7, fresh(`{}`), nil)
	wantTypes(t, frames, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	prop, _ := restatetest.Message[*servicev1.ProposeRunCompletionMessage](frames[1])
	if prop.GetFailure() == nil || !strings.Contains(prop.GetFailure().GetMessage(), "order not found") {
		t.Fatalf("run completion %v is not the handler's terminal failure", prop)
	}
	out, _ := restatetest.Message[*servicev1.OutputCommandMessage](frames[2])
	if out.GetFailure() == nil || !strings.Contains(out.GetFailure().GetMessage(), "order not found") {
		t.Fatalf("output %v does not carry the failure", out)
	}
	if c := out.GetFailure().GetCode(); c != 500 {
		t.Errorf("failure code %d, want 500 when the handler gave none", c)
	}
}

// A terminal failure's own code (a Python TerminalError(message, code=404))
// is the code the run and the invocation fail with, as with a Restate SDK.
func TestTerminalHandlerFailureKeepsItsCode(t *testing.T) {
	h := newHarness(t, "")
	h.fake.setInvoke(func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		return nil, runtimeErrorWith(codes.Unknown, functionruntime.ReasonHandlerTerminalError, "order not found",
			map[string]string{functionruntime.MetadataTerminalCode: "404"})
	})
	frames := h.play(6, fresh(`{}`), nil)
	wantTypes(t, frames, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	prop, _ := restatetest.Message[*servicev1.ProposeRunCompletionMessage](frames[1])
	out, _ := restatetest.Message[*servicev1.OutputCommandMessage](frames[2])
	if prop.GetFailure().GetCode() != 404 || out.GetFailure().GetCode() != 404 {
		t.Fatalf("run completion %v and output %v, want failure code 404", prop, out)
	}
}

// Error classes that Restate retries: nothing is journaled, the attempt
// ends with an ErrorMessage whose code says why.
func TestRetryableFailuresEndWithErrorMessage(t *testing.T) {
	cases := []struct {
		name string
		err  error
		code uint32
	}{
		{"handler failed otherwise (500)", runtimeError(codes.Unknown, functionruntime.ReasonHandlerError, "ValueError: boom"), 500},
		{"worker crashed (500)", runtimeError(codes.Internal, functionruntime.ReasonWorkerCrashed, "worker died"), 500},
		{"timed out (504)", runtimeError(codes.DeadlineExceeded, functionruntime.ReasonInvocationTimeout, "timeout"), 504},
		{"registration busy (429)", runtimeError(codes.ResourceExhausted, functionruntime.ReasonRegistrationBusy, "busy"), 429},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "")
			h.fake.setInvoke(func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
				return nil, tc.err
			})
			frames := h.play(6, fresh(`{}`), nil)
			wantTypes(t, frames, wire.RunCommandType, wire.ErrorMessageType)
			if e := errorOf(t, frames); e.GetCode() != tc.code {
				t.Fatalf("ErrorMessage code %d, want %d (%v)", e.GetCode(), tc.code, e)
			}
		})
	}
}

// "FailedPrecondition before dispatch (stale, draining, unready) →
// re-lease or re-register, then ErrorMessage 503 if still failing."
func TestStaleRegistrationIsReRegisteredOnce(t *testing.T) {
	h := newHarness(t, "")
	var calls int
	h.fake.setInvoke(func(_ context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		calls++
		if calls == 1 {
			return nil, runtimeError(codes.FailedPrecondition, functionruntime.ReasonRegistrationStale, "stale")
		}
		return &executorv1.InvokeFunctionResponse{Output: []byte(`"ok"`), ContentType: "application/json"}, nil
	})
	frames := h.play(6, fresh(`{}`), nil)
	wantTypes(t, frames, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	if n := h.fake.registers.Load(); n != 2 {
		t.Fatalf("registered %d times, want 2 (initial + after stale)", n)
	}

	h2 := newHarness(t, "")
	h2.fake.setInvoke(func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		return nil, runtimeError(codes.FailedPrecondition, functionruntime.ReasonRegistrationDraining, "draining")
	})
	frames = h2.play(6, fresh(`{}`), nil)
	if e := errorOf(t, frames); e.GetCode() != 503 {
		t.Fatalf("still stale after re-registering: code %d, want 503", e.GetCode())
	}
}

// "Unimplemented, invalid registration, permanent init failure →
// ErrorMessage with should_pause": PAUSE on v7, a long retry delay on v6.
func TestPermanentFailurePausesOnV7AndDelaysOnV6(t *testing.T) {
	cases := []struct {
		name     string
		register func(*executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error)
	}{
		{"unimplemented", func(*executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
			return nil, status.Error(codes.Unimplemented, "unknown service executor.v1.FunctionRuntime")
		}},
		{"invalid registration", func(*executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
			return nil, runtimeError(codes.InvalidArgument, functionruntime.ReasonInvalidArgument, "handler: bad")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "")
			h.fake.setRegister(tc.register)
			e7 := errorOf(t, h.play(7, fresh(`{}`), nil))
			if e7.GetBehavior() != servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE {
				t.Errorf("v7: behavior %v, want PAUSE (%v)", e7.GetBehavior(), e7)
			}
			e6 := errorOf(t, h.play(6, fresh(`{}`), nil))
			if e6.GetNextRetryDelay() < uint64(time.Minute.Milliseconds()) {
				t.Errorf("v6: next_retry_delay %dms, want a long delay (%v)", e6.GetNextRetryDelay(), e6)
			}
			if h.fake.invokes.Load() != 0 {
				t.Errorf("InvokeFunction was called on a registration that never became ready")
			}
		})
	}
}

// A failed initialization is retried at the next attempt at once, and
// while it keeps failing the invocation is retried (503), not paused: a
// worker killed while starting is not a permanent fault. A broken handler
// becomes permanent after a few rounds (TestRegistrationFailingThreeRoundsIsPermanent).
func TestFailedInitializationIsRetriedNotPaused(t *testing.T) {
	h := newHarness(t, "")
	h.fake.setRegister(func(in *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		return &executorv1.RegisterFunctionResponse{
			Registration: &executorv1.FunctionRegistration{RunUid: in.RunUid, RegistrationId: "reg_x"},
			State:        executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED}, nil
	})
	e := errorOf(t, h.play(7, fresh(`{}`), nil))
	if e.GetCode() != 503 || e.GetBehavior() == servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE {
		t.Fatalf("first failed initialization: %v, want a retryable 503", e)
	}
	if !strings.Contains(e.GetMessage(), "SyntaxError") {
		t.Fatalf("error %q does not carry the fatal error", e.GetMessage())
	}
	if got := h.fake.attempts; len(got) != 2 || got[1] != got[0]+1 {
		t.Fatalf("registration attempts %v, want an immediate retry at the next attempt", got)
	}
}

// "when all are busy an invocation waits a bounded time, then fails
// retryably (429)".
func TestAllRegistrationsBusyFailsWith429(t *testing.T) {
	h := newHarness(t, "        concurrency: 1\n        lease_timeout: 200ms\n")
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	h.fake.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &executorv1.InvokeFunctionResponse{Output: []byte(`1`), ContentType: "application/json"}, nil
	})
	done := make(chan []restatetest.Frame, 1)
	go func() { done <- h.play(6, []any{restatetest.Start("inv_a", 1), restatetest.Input([]byte(`1`))}, nil) }()
	<-started
	frames := h.play(6, []any{restatetest.Start("inv_b", 1), restatetest.Input([]byte(`2`))}, nil)
	if e := errorOf(t, frames); e.GetCode() != 429 {
		t.Fatalf("code %d, want 429 while the only registration is leased", e.GetCode())
	}
	close(release)
	wantTypes(t, <-done, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
}

// A run queued for a busy pool is not shown in flight: its RunCommand
// reaches Restate once a registration is leased for it, just before the
// function runs, so Restate gets the command and the result close
// together rather than the queue's wait apart.
func TestQueuedInvocationFlushesItsRunOnceLeased(t *testing.T) {
	h := newHarness(t, "        concurrency: 1\n")
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	h.fake.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &executorv1.InvokeFunctionResponse{Output: r.GetInput(), ContentType: "application/json"}, nil
	})
	done := make(chan []restatetest.Frame, 1)
	go func() { done <- h.play(6, []any{restatetest.Start("inv_a", 1), restatetest.Input([]byte(`1`))}, nil) }()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := restatetest.Open(ctx, h.client, restatetest.InvokeURL(h.url, "Svc", "fn"), 6)
	defer s.Close()
	if err := s.Send(restatetest.Start("inv_b", 1), restatetest.Input([]byte(`2`))); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, 5*time.Second, "the queued invocation in flight", func() (bool, string) {
		n := h.b.InFlight()
		return n == 2, fmt.Sprintf("%d invocations in flight", n)
	})
	first := s.NextAsync()
	select {
	case r := <-first:
		t.Fatalf("queued invocation wrote %v (%v) while the only registration was leased", r.Frame, r.Err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	r := <-first
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	got := []restatetest.Frame{r.Frame}
	rest, err := s.Play(nil, nil)
	if err != nil {
		t.Fatalf("after %v: %v", rest, err)
	}
	wantTypes(t, append(got, rest...), wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	wantTypes(t, <-done, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
}

// "Restate CANCEL signal → in-flight invoke cancelled (worker killed),
// invocation ends with a terminal cancelled failure."
func TestCancelSignalCancelsInvokeAndEnds409(t *testing.T) {
	h := newHarness(t, "")
	started, cancelled := make(chan struct{}), make(chan struct{})
	h.fake.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return nil, status.FromContextError(ctx.Err()).Err()
	})
	frames := h.playWith(7, fresh(`{}`), nil, func(s *restatetest.Session) {
		<-started
		_ = s.Send(restatetest.Cancel())
	})
	select {
	case <-cancelled:
	default:
		t.Fatal("InvokeFunction's context was not cancelled")
	}
	last := frames[len(frames)-1]
	if last.Type() != wire.EndMessageType {
		t.Fatalf("stream %v does not end with End", frames)
	}
	out, ok := restatetest.Message[*servicev1.OutputCommandMessage](frames[len(frames)-2])
	if !ok || out.GetFailure().GetCode() != 409 {
		t.Fatalf("output %v, want failure 409", frames[len(frames)-2])
	}
}

// A handler whose min_warm registrations fail at start (a missing file, a
// syntax error) stops no other: the bridge starts, logs why, serves the
// healthy handler, and the broken one's invocations fail with the reason.
func TestBrokenHandlerAtStartStopsNoOther(t *testing.T) {
	fake := newFakeRuntime()
	fake.setRegister(func(in *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		if strings.Contains(in.RunUid, "broken") {
			return nil, runtimeError(codes.InvalidArgument, functionruntime.ReasonInvalidArgument, "reading handler source: open nosuch.sh: no such file or directory")
		}
		return readyAs(in, "reg_fake"), nil
	})
	h := newHarnessFake(t, func(dir string) string {
		return `
services:
  - name: Svc
    handlers:
      - {name: fn, runtime: python, dir: ` + dir + `, handler: mod.fn, min_warm: 1}
      - {name: broken, runtime: python, dir: ` + dir + `, handler: mod.fn, min_warm: 1}
`
	}, bridge.Options{}, fake)
	if recs := h.logs.withMessage("a handler's min_warm registrations failed: its invocations fail until it is fixed; the other handlers serve"); len(recs) != 1 ||
		!strings.Contains(fmt.Sprint(recs[0]["error"]), "Svc/broken") {
		t.Fatalf("the failure was logged %v, want once naming Svc/broken", recs)
	}
	frames := h.play(6, fresh(`{"ok":1}`), nil)
	if got := outputValue(t, frames[len(frames)-2]); string(got) != `{"ok":1}` {
		t.Fatalf("the healthy handler answered %q", got)
	}
	h.target = "Svc/broken"
	frames = h.play(6, fresh(`{}`), nil)
	if e := errorOf(t, frames); !strings.Contains(e.GetMessage(), "no such file or directory") {
		t.Fatalf("the broken handler's invocation: %v, want its reason", e)
	}
}

// The min_warm registrations of every handler are made side by side: a
// start waits for the slowest import, not for the sum of them (a few
// heavy imports one after the other outlasted a startup probe). Each
// registration here waits for all three to be in flight.
func TestStartWarmsSideBySide(t *testing.T) {
	fake := newFakeRuntime()
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	fake.setRegister(func(in *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		mu.Lock()
		if arrived++; arrived == 3 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
			return nil, status.Error(codes.Unavailable, "the other warm registrations did not come while this one was made")
		}
		return readyAs(in, "reg_"+in.RunUid), nil
	})
	h := newHarnessFake(t, func(dir string) string {
		return `
services:
  - name: Svc
    handlers:
      - {name: fn, runtime: python, dir: ` + dir + `, handler: mod.fn, concurrency: 2, min_warm: 2}
      - {name: other, runtime: python, dir: ` + dir + `, handler: mod.fn, min_warm: 1}
`
	}, bridge.Options{}, fake)
	if recs := h.logs.withMessage("a handler's min_warm registrations failed: its invocations fail until it is fixed; the other handlers serve"); len(recs) != 0 {
		t.Fatalf("warming failed: %v", recs)
	}
}

// playCancelled plays one invocation whose function runs until Restate's
// CANCEL, sent once it started, stops it.
func (h *harness) playCancelled() []restatetest.Frame {
	h.t.Helper()
	started := make(chan struct{})
	h.fake.setInvoke(func(ctx context.Context, _ *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		close(started)
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	})
	return h.playWith(7, fresh(`1`), nil, func(s *restatetest.Session) {
		<-started
		_ = s.Send(restatetest.Cancel())
	})
}

// "Giving the registrations back takes what is left of shutdown_timeout
// (all of them at once)": with a runtime that does not answer, every
// handler's unregisters get that time, not only the first handler's, and
// Close ends at the deadline.
func TestCloseGivesEveryHandlerTheDeadline(t *testing.T) {
	fake := newFakeRuntime()
	h := newHarnessFake(t, func(dir string) string {
		return `
services:
  - name: Svc
    handlers:
      - {name: a, runtime: python, dir: ` + dir + `, handler: mod.fn, concurrency: 2, min_warm: 2}
      - {name: b, runtime: python, dir: ` + dir + `, handler: mod.fn, concurrency: 2, min_warm: 2}
      - {name: c, runtime: python, dir: ` + dir + `, handler: mod.fn, concurrency: 2, min_warm: 2}
`
	}, bridge.Options{}, fake)
	fake.hangUnregister.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_ = h.b.Close(ctx)
	if took := time.Since(begin); took > 3*time.Second {
		t.Fatalf("Close took %v with a 400ms deadline", took)
	}
	if n, late := fake.unregisters.Load(), fake.lateUnregisters.Load(); n != 6 || late != 0 {
		t.Fatalf("%d unregisters, %d of them after the deadline; want all 6 asked in time", n, late)
	}
}
