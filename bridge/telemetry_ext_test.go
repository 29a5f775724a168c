package bridge_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/bridge/telemetry/telemetrytest"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/internal/testtool"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/identity"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// metricsOf reads the series of the harness's only handler, Svc/fn.
type metricsOf struct {
	t *testing.T
	m *telemetry.Metrics
}

func (r metricsOf) value(name string, labels ...string) float64 {
	r.t.Helper()
	f := telemetrytest.Gather(r.t, r.m.Registry())
	v, ok := f.Value(name, labels...)
	if !ok {
		r.t.Fatalf("no single series %s%v: %v", name, labels, f.Labels(name))
	}
	return v
}

func (r metricsOf) expect(name string, want float64, labels ...string) {
	r.t.Helper()
	if got := r.value(name, labels...); got != want {
		r.t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// One attempt of each kind the fake runtime can produce, each counted once
// under its outcome (the README's definitions), and the execution-side
// counters: only calls that reached the function are timed, a crash and a
// busy refusal are counted, a replay runs nothing.
func TestMetricsCountEachAttemptByOutcome(t *testing.T) {
	m := telemetry.NewMetrics("test")
	h := newHarnessWith(t, "", bridge.Options{Metrics: m})
	r := metricsOf{t, m}
	answer := func(err error) {
		h.fake.setInvoke(func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
			return nil, err
		})
	}

	wantTypes(t, h.play(6, fresh(`1`), nil), wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	record := `{"output":1,"content_type":"application/json"}`
	wantTypes(t, h.play(6, []any{restatetest.Start("inv_replay", 3), restatetest.Input([]byte(`1`)),
		restatetest.Run(1, "invoke"), restatetest.RunValue(1, []byte(record))}, nil), wire.OutputCommandType, wire.EndMessageType)
	answer(runtimeError(codes.Unknown, functionruntime.ReasonHandlerTerminalError, "order not found"))
	h.play(6, fresh(`1`), nil)
	answer(runtimeError(codes.Unknown, functionruntime.ReasonHandlerError, "ValueError"))
	h.play(6, fresh(`1`), nil)
	answer(runtimeError(codes.Internal, functionruntime.ReasonWorkerCrashed, "worker died"))
	h.play(6, fresh(`1`), nil)
	answer(runtimeError(codes.ResourceExhausted, functionruntime.ReasonRegistrationBusy, "busy"))
	if e := errorOf(t, h.play(6, fresh(`1`), nil)); e.GetCode() != 429 || !strings.Contains(e.GetMessage(), "same instance identity") {
		// The bridge leased the registration: someone else keeps it
		// busy, and the message says who that usually is.
		t.Fatalf("busy runtime: code %d, message %q; want 429 naming a replica with the same instance identity", e.GetCode(), e.GetMessage())
	}
	h.playCancelled()

	for outcome, want := range map[string]float64{
		"ok": 1, "replayed": 1, "terminal_failure": 1,
		"retryable_failure": 3, // handler error, crash, busy
		"cancelled":         1, "suspended": 0, "paused": 0,
	} {
		r.expect("fnbridge_invocations_total", want, "handler", "fn", "outcome", outcome)
	}
	r.expect("fnbridge_attempt_duration_seconds", 7)
	r.expect("fnbridge_function_duration_seconds", 5) // not the replay, not the busy refusal
	r.expect("fnbridge_journal_replays_total", 1)
	r.expect("fnbridge_worker_crashes_total", 1)
	r.expect("fnbridge_runtime_resource_exhausted_total", 1)
	r.expect("fnbridge_worker_starts_total", 1) // one registration served all
	r.expect("fnbridge_worker_start_failures_total", 0)
	r.expect("fnbridge_lease_wait_seconds", 6) // every attempt that ran leased once
	r.expect("fnbridge_lease_timeouts_total", 0)
}

// While an invocation runs its registration is busy and its stream in
// flight; a second one finds no free registration, waits lease_timeout
// and is refused (429, a lease timeout); afterwards the registration is
// idle again and nothing is in flight.
func TestMetricsGaugesFollowALeasedRegistration(t *testing.T) {
	m := telemetry.NewMetrics("test")
	h := newHarnessWith(t, "        concurrency: 2\n        lease_timeout: 200ms\n", bridge.Options{Metrics: m})
	r := metricsOf{t, m}
	r.expect("fnbridge_registrations", 2, "state", "unregistered")
	r.expect("fnbridge_warm_workers", 0)

	release, started := make(chan struct{}), make(chan struct{}, 2)
	h.fake.setInvoke(func(ctx context.Context, req *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &executorv1.InvokeFunctionResponse{Output: []byte(`1`), ContentType: "application/json"}, nil
	})
	done := make(chan []restatetest.Frame, 2)
	for i := range 2 {
		go func() {
			done <- h.play(6, []any{restatetest.Start(fmt.Sprintf("inv_hold%d", i), 1), restatetest.Input([]byte(`1`))}, nil)
		}()
	}
	<-started
	<-started
	r.expect("fnbridge_registrations", 2, "state", "busy")
	r.expect("fnbridge_warm_workers", 2)
	r.expect("fnbridge_inflight_streams", 2)
	if e := errorOf(t, h.play(6, []any{restatetest.Start("inv_refused", 1), restatetest.Input([]byte(`2`))}, nil)); e.GetCode() != 429 {
		t.Fatalf("code %d, want 429 while both registrations are leased", e.GetCode())
	}
	r.expect("fnbridge_lease_timeouts_total", 1)
	r.expect("fnbridge_lease_wait_seconds", 3)
	r.expect("fnbridge_invocations_total", 1, "outcome", "retryable_failure")
	close(release)
	<-done
	<-done
	testtool.Eventually(t, 5*time.Second, "both registrations idle, no stream in flight", func() (bool, string) {
		f := telemetrytest.Gather(t, m.Registry())
		idle, _ := f.Value("fnbridge_registrations", "state", "idle")
		inflight, _ := f.Value("fnbridge_inflight_streams")
		return idle == 2 && inflight == 0, fmt.Sprintf("idle %v, in flight %v", idle, inflight)
	})
	r.expect("fnbridge_invocations_total", 2, "outcome", "ok")
	r.expect("fnbridge_worker_starts_total", 2)
}

// A runtime without FunctionRuntime pauses the invocation (paused); an
// initialization that fails is counted as a failed worker start each
// time, here twice (the immediate retry), and leaves the slot failed.
func TestMetricsCountPausesAndFailedStarts(t *testing.T) {
	m := telemetry.NewMetrics("test")
	h := newHarnessWith(t, "", bridge.Options{Metrics: m})
	r := metricsOf{t, m}
	h.fake.setRegister(func(*executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		return nil, status.Error(codes.Unimplemented, "unknown service executor.v1.FunctionRuntime")
	})
	h.play(7, fresh(`1`), nil)
	r.expect("fnbridge_invocations_total", 1, "outcome", "paused")

	m2 := telemetry.NewMetrics("test")
	h2 := newHarnessWith(t, "", bridge.Options{Metrics: m2})
	r2 := metricsOf{t, m2}
	h2.fake.setRegister(func(in *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		return &executorv1.RegisterFunctionResponse{
			Registration: &executorv1.FunctionRegistration{RunUid: in.RunUid, RegistrationId: "reg_x"},
			State:        executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED}, nil
	})
	if e := errorOf(t, h2.play(7, fresh(`1`), nil)); e.GetCode() != 503 {
		t.Fatalf("failed initialization: %v, want 503", e)
	}
	r2.expect("fnbridge_worker_start_failures_total", 2)
	r2.expect("fnbridge_worker_starts_total", 0)
	r2.expect("fnbridge_registrations", 1, "state", "failed")
	r2.expect("fnbridge_invocations_total", 1, "outcome", "retryable_failure")
}

// A registration the runtime refuses as invalid is a failed worker start
// too (fnbridge_worker_start_failures_total), as an import error is.
func TestMetricsCountRefusedRegistrationsAsFailedStarts(t *testing.T) {
	m := telemetry.NewMetrics("test")
	h := newHarnessWith(t, "", bridge.Options{Metrics: m})
	r := metricsOf{t, m}
	h.fake.setRegister(func(*executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "handler: no such module")
	})
	h.play(7, fresh(`1`), nil)
	r.expect("fnbridge_worker_start_failures_total", 1)
	r.expect("fnbridge_registrations", 1, "state", "failed")
}

// A slot an invocation registers for itself (a cold start) is busy while
// it registers: invocations queue then, and a saturation alert on busy
// must see it.
func TestMetricsRegistrationBusyWhileItRegisters(t *testing.T) {
	m := telemetry.NewMetrics("test")
	h := newHarnessWith(t, "", bridge.Options{Metrics: m})
	r := metricsOf{t, m}
	registering, release := make(chan struct{}), make(chan struct{})
	h.fake.setRegister(func(in *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
		close(registering)
		<-release
		return readyAs(in, "reg_x"), nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.play(6, fresh(`1`), nil)
	}()
	<-registering
	r.expect("fnbridge_registrations", 1, "state", "busy")
	close(release)
	<-done
	testtool.Eventually(t, 5*time.Second, "the registration idle once its invocation ended", func() (bool, string) {
		idle, _ := telemetrytest.Gather(t, m.Registry()).Value("fnbridge_registrations", "state", "idle")
		return idle == 1, fmt.Sprintf("idle %v", idle)
	})
}

// headerTransport adds headers to every request, as restate-server adds
// traceparent to an invoke request when it traces.
type headerTransport struct {
	base http.RoundTripper
	h    http.Header
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// With a tracer, each attempt is a server span continuing the trace
// context of the invoke request, and each function execution a client
// span under it, with the attributes the README lists; a failed attempt's
// spans carry the error.
func TestSpansPerAttemptAndExecution(t *testing.T) {
	rcv := telemetrytest.NewReceiver(t)
	tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingConfig{Endpoint: rcv.URL() + "/v1/traces", ServiceName: "fnbridge"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, "", bridge.Options{Tracer: tr.Tracer})
	const traceID, restateSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	base := h.client.Transport
	h.client = &http.Client{Transport: headerTransport{base: base, h: http.Header{
		"Traceparent": {"00-" + traceID + "-" + restateSpan + "-01"}, "Tracestate": {"restate=x"}}}}
	h.play(6, []any{restatetest.Start("inv_traced", 1), restatetest.Input([]byte(`1`))}, nil)
	h.fake.setInvoke(func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		return nil, runtimeError(codes.Unknown, functionruntime.ReasonHandlerTerminalError, "order not found")
	})
	h.client = &http.Client{Transport: base}
	h.play(6, []any{restatetest.Start("inv_root", 1), restatetest.Input([]byte(`1`))}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	byName := map[string][]telemetrytest.Span{}
	for _, s := range rcv.Spans() {
		byName[s.GetName()] = append(byName[s.GetName()], s)
	}
	attempts, execs := byName["Svc/fn"], byName["function Svc/fn"]
	if len(attempts) != 2 || len(execs) != 2 || len(byName) != 2 {
		t.Fatalf("spans by name %v, want two attempts (Svc/fn) and two executions (function Svc/fn)", byName)
	}
	for i, inv := range []string{"inv_traced", "inv_root"} {
		a, e := attempts[i], execs[i]
		if a.Attr("restate.invocation.id") != inv {
			t.Fatalf("attempt %d is %s, want %s (spans end in order)", i, a.Attr("restate.invocation.id"), inv)
		}
		if a.GetKind() != tracev1.Span_SPAN_KIND_SERVER || e.GetKind() != tracev1.Span_SPAN_KIND_CLIENT {
			t.Errorf("%s: kinds %v and %v, want server attempt and client execution", inv, a.GetKind(), e.GetKind())
		}
		if e.ParentIDHex() != a.SpanIDHex() || e.TraceIDHex() != a.TraceIDHex() {
			t.Errorf("%s: execution %s/%s is not a child of attempt %s/%s", inv, e.TraceIDHex(), e.ParentIDHex(), a.TraceIDHex(), a.SpanIDHex())
		}
		for k, v := range map[string]string{"fnbridge.service": "Svc", "fnbridge.handler": "fn", "fnbridge.durability": "function", "fnbridge.journal.replayed_entries": "0"} {
			if a.Attr(k) != v {
				t.Errorf("%s attempt: %s = %q, want %q", inv, k, a.Attr(k), v)
			}
		}
		if e.Attr("fnbridge.run_uid") != bridge.DefaultInstance()+"-svc-fn-0" || e.Attr("fnbridge.runtime") != "python" {
			t.Errorf("%s execution: run_uid %q runtime %q", inv, e.Attr("fnbridge.run_uid"), e.Attr("fnbridge.runtime"))
		}
	}
	traced, root := attempts[0], attempts[1]
	if traced.TraceIDHex() != traceID || traced.ParentIDHex() != restateSpan || traced.GetTraceState() != "restate=x" {
		t.Errorf("traced attempt in trace %s under %s (state %q), want Restate's trace %s under its span %s", traced.TraceIDHex(), traced.ParentIDHex(), traced.GetTraceState(), traceID, restateSpan)
	}
	if traced.Attr("fnbridge.outcome") != "ok" || traced.GetStatus().GetCode() == tracev1.Status_STATUS_CODE_ERROR {
		t.Errorf("traced attempt: outcome %q status %v, want ok", traced.Attr("fnbridge.outcome"), traced.GetStatus())
	}
	if root.ParentIDHex() != "" || root.TraceIDHex() == traceID {
		t.Errorf("an attempt without traceparent is in trace %s under %q, want a new root", root.TraceIDHex(), root.ParentIDHex())
	}
	if root.Attr("fnbridge.outcome") != "terminal_failure" || root.GetStatus().GetCode() != tracev1.Status_STATUS_CODE_ERROR {
		t.Errorf("failed attempt: outcome %q status %v, want terminal_failure with an error status", root.Attr("fnbridge.outcome"), root.GetStatus())
	}
	// The runtime's own words, not grpc's "rpc error: code = ..." wrapper.
	if ex := execs[1]; ex.GetStatus().GetCode() != tracev1.Status_STATUS_CODE_ERROR || ex.Attr("fnbridge.error_class") != "handler_terminal" ||
		!strings.HasPrefix(ex.GetStatus().GetMessage(), "order not found") {
		t.Errorf("failed execution: status %v class %q, want an error status with the runtime's message", ex.GetStatus(), ex.Attr("fnbridge.error_class"))
	}
}

// tracedClient plays the runtime's side with restate-server's trace
// headers on every invoke request.
func tracedClient(h *harness, traceparent, tracestate string) *http.Client {
	return &http.Client{Transport: headerTransport{base: h.client.Transport, h: http.Header{
		"Traceparent": {traceparent}, "Tracestate": {tracestate}}}}
}

// envOf captures the per-invocation environment each InvokeFunction call
// carries (functionruntime.MetadataEnv).
func envOf(h *harness) <-chan []string {
	got := make(chan []string, 1)
	h.fake.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		got <- md.Get(functionruntime.MetadataEnv)
		return &executorv1.InvokeFunctionResponse{Output: []byte(`1`), ContentType: "application/json"}, nil
	})
	return got
}

// The function continues the trace: it gets TRACEPARENT and TRACESTATE
// as its per-invocation environment, those of its execution span when the
// bridge exports spans, else those Restate sent with the attempt; an
// attempt without trace context sends none.
func TestFunctionGetsTheTraceContext(t *testing.T) {
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	restateTP := "00-" + traceID + "-b7ad6b7169203331-01"

	h := newHarness(t, "")
	h.client = tracedClient(h, restateTP, "restate=x")
	got := envOf(h)
	h.play(6, fresh(`1`), nil)
	if env := <-got; !slices.Equal(env, []string{"TRACEPARENT=" + restateTP, "TRACESTATE=restate=x"}) {
		t.Errorf("without a tracer the function got %q, want Restate's trace context", env)
	}

	rcv := telemetrytest.NewReceiver(t)
	tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingConfig{Endpoint: rcv.URL() + "/v1/traces", ServiceName: "fnbridge"})
	if err != nil {
		t.Fatal(err)
	}
	h = newHarnessWith(t, "", bridge.Options{Tracer: tr.Tracer})
	h.client = tracedClient(h, restateTP, "restate=x")
	got = envOf(h)
	h.play(6, fresh(`1`), nil)
	env := <-got
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var exec telemetrytest.Span
	for _, s := range rcv.Spans() {
		if s.GetName() == "function Svc/fn" {
			exec = s
		}
	}
	if want := []string{"TRACEPARENT=00-" + traceID + "-" + exec.SpanIDHex() + "-01", "TRACESTATE=restate=x"}; exec.Span == nil || !slices.Equal(env, want) {
		t.Errorf("with a tracer the function got %q, want its execution span's context %q", env, want)
	}

	h = newHarnessWith(t, "", bridge.Options{})
	got = envOf(h)
	h.play(6, fresh(`1`), nil)
	if env := <-got; len(env) != 0 {
		t.Errorf("an attempt without trace context gave the function %q", env)
	}

	// A tracestate longer than the runtime accepts (32 members of 256
	// characters are valid W3C) is left out, so the invocation still runs.
	var members []string
	for i := range 32 {
		members = append(members, fmt.Sprintf("k%02d=%s", i, strings.Repeat("v", 256)))
	}
	h = newHarness(t, "")
	h.client = tracedClient(h, restateTP, strings.Join(members, ","))
	got = envOf(h)
	wantTypes(t, h.play(6, fresh(`1`), nil), wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	if env := <-got; !slices.Equal(env, []string{"TRACEPARENT=" + restateTP}) {
		t.Errorf("with a %d-byte tracestate the function got %d values (first %.80q), want the traceparent alone", len(strings.Join(members, ",")), len(env), env)
	}
}

// A function stopped because its attempt suspended did not fail: its span
// says it was suspended, with no error status (each durable wait longer
// than suspend_after counted against span error rates). So does one that
// answers its suspension itself (a Python function unwinding
// fnbridge.Suspended, which the runtime reports as a handler error of type
// fnbridge.Suspended).
func TestSuspendedExecutionSpanIsNoError(t *testing.T) {
	stopped := func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
		_, _ = c.Sleep(context.Background(), time.Hour)
		<-ctx.Done() // stopped by the bridge, as a killed worker is
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	unwound := func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
		_, _ = c.Sleep(context.Background(), time.Hour)
		return nil, handlerErrorStatus(functionruntime.AttemptEndedType, false, "the invocation suspended")
	}
	for _, fn := range []func(context.Context, *stepctx.Client, []byte) ([]byte, error){stopped, unwound} {
		suspendedSpan(t, fn)
	}
}

func suspendedSpan(t *testing.T, fn func(context.Context, *stepctx.Client, []byte) ([]byte, error)) {
	rcv := telemetrytest.NewReceiver(t)
	tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingConfig{Endpoint: rcv.URL() + "/v1/traces", ServiceName: "fnbridge"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newStepsBridgeWith(t, "steps", bridge.Options{Tracer: tr.Tracer}, fn)
	if _, err := runSteps(t, b, &stepctxtest.Journal{HoldSleeps: true}); !errors.Is(err, stepctx.ErrSuspended) {
		t.Fatalf("err = %v, want suspended", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range rcv.Spans() {
		if s.GetName() != "function Svc/fn" {
			continue
		}
		found = true
		if s.GetStatus().GetCode() == tracev1.Status_STATUS_CODE_ERROR || s.Attr("fnbridge.outcome") != "suspended" {
			t.Fatalf("execution span status %v, outcome %q; want no error and outcome suspended", s.GetStatus(), s.Attr("fnbridge.outcome"))
		}
	}
	if !found {
		t.Fatal("no execution span")
	}
}

// A function stopped by Restate's CANCEL did not fail either: the caller
// asked for it. Its span says cancelled, as its attempt's does, with no
// error status (user cancellations counted in span error rates).
func TestCancelledExecutionSpanIsNoError(t *testing.T) {
	rcv := telemetrytest.NewReceiver(t)
	tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingConfig{Endpoint: rcv.URL() + "/v1/traces", ServiceName: "fnbridge"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, "", bridge.Options{Tracer: tr.Tracer})
	h.playCancelled()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]string{}
	for _, s := range rcv.Spans() {
		if s.GetStatus().GetCode() == tracev1.Status_STATUS_CODE_ERROR {
			t.Errorf("span %s has error status %v", s.GetName(), s.GetStatus())
		}
		outcomes[s.GetName()] = s.Attr("fnbridge.outcome")
	}
	if outcomes["function Svc/fn"] != "cancelled" || outcomes["Svc/fn"] != "cancelled" {
		t.Fatalf("span outcomes %v, want the attempt and the execution cancelled", outcomes)
	}
}

// Requests the endpoint answers before any handler runs are counted by
// reason (the README's fnbridge_refused_requests_total), every reason's
// series at zero from the start: an operator alerts on saturation and on
// requests restate-server did not sign, which no attempt outcome shows.
func TestMetricsCountRefusedRequests(t *testing.T) {
	m := telemetry.NewMetrics("test")
	h := newHarnessWith(t, "max_concurrent_invocations: 1\nstart_timeout: 30s\n", bridge.Options{Metrics: m})
	r := metricsOf{t, m}
	for _, reason := range restate.RefusalReasons {
		r.expect("fnbridge_refused_requests_total", 0, "reason", reason)
	}
	ctx := context.Background()
	url := restatetest.InvokeURL(h.url, "Svc", "fn")

	// One stream holds the only slot while it waits for its start; a
	// second is refused over the limit.
	held := restatetest.Open(ctx, h.client, url, 6)
	defer held.Close()
	testtool.Eventually(t, 5*time.Second, "the first stream is admitted", func() (bool, string) {
		return h.b.InFlight() == 1, fmt.Sprint(h.b.InFlight(), " in flight")
	})
	over := restatetest.Open(ctx, h.client, url, 6)
	if resp, err := over.Response(); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second stream: %v %v, want 503", resp, err)
	}
	over.Close()
	r.expect("fnbridge_refused_requests_total", 1, "reason", restate.RefusedConcurrencyLimit)

	// The held stream ends before its StartMessage: it failed before its
	// handler could start.
	if err := held.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := held.Next(); err != nil {
		t.Fatalf("held stream: %v, want its ErrorMessage", err)
	}
	testtool.Eventually(t, 5*time.Second, "the stream that never started is counted", func() (bool, string) {
		v := r.value("fnbridge_refused_requests_total", "reason", restate.RefusedBeforeStart)
		return v == 1, fmt.Sprint(v)
	})
	// A protocol version the endpoint does not speak.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(""))
	req.Header.Set("Content-Type", "application/vnd.restate.invocation.v99")
	if resp, err := h.client.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("v99 stream: %v %v, want 415", resp, err)
	} else {
		resp.Body.Close()
	}
	r.expect("fnbridge_refused_requests_total", 2, "reason", restate.RefusedBeforeStart)
	r.expect("fnbridge_invocations_total", 0, "outcome", "ok")

	// A handler this bridge does not serve (a reload removed it while
	// restate-server still routes to it): 404, counted, and logged with
	// the invocation, so endless retries in Restate show here too.
	req, _ = http.NewRequest(http.MethodPost, restatetest.InvokeURL(h.url, "Svc", "gone"), strings.NewReader(""))
	req.Header.Set("Content-Type", "application/vnd.restate.invocation.v6")
	req.Header.Set("x-restate-invocation-id", "inv_1gone")
	if resp, err := h.client.Do(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("stream for Svc/gone: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	r.expect("fnbridge_refused_requests_total", 1, "reason", restate.RefusedUnknownHandler)
	var logged bool
	for _, rec := range h.logs.withLevel("warn") {
		logged = logged || rec["handler"] == "Svc/gone" && rec["invocation_id"] == "inv_1gone"
	}
	if !logged {
		t.Fatalf("no warning names Svc/gone and its invocation; log: %v", h.logs.withLevel("warn"))
	}

	// Draining: new streams are refused.
	dctx, cancel := context.WithCancel(ctx)
	cancel() // start the drain, do not wait for it
	_ = h.b.Drain(dctx)
	drained := restatetest.Open(ctx, h.client, url, 6)
	if resp, err := drained.Response(); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("stream while draining: %v %v, want 503", resp, err)
	}
	drained.Close()
	r.expect("fnbridge_refused_requests_total", 1, "reason", restate.RefusedDraining)
	r.expect("fnbridge_refused_requests_total", 1, "reason", restate.RefusedConcurrencyLimit)

	// A bridge with identity keys counts what restate-server did not sign.
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	m2 := telemetry.NewMetrics("test")
	h2 := newHarnessWith(t, "identity_keys: ["+identity.EncodeKey(pub)+"]\n", bridge.Options{Metrics: m2})
	for _, path := range []string{"/discover", "/invoke/Svc/fn", "/health"} {
		resp, err := h2.client.Post(h2.url+path, "application/vnd.restate.invocation.v6", strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	metricsOf{t, m2}.expect("fnbridge_refused_requests_total", 2, "reason", restate.RefusedUnauthenticated)
}
