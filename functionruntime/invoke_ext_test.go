package functionruntime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

func TestInvokeReturnsHandlerOutput(t *testing.T) {
	ad := &fakeAdapter{invoke: func(_ context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
		return functionruntime.Result{
			Output:  []byte(`{"got":` + string(inv.Input) + `}`),
			Outputs: map[string]string{"status": "ok"},
		}, nil
	}}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	resp, err := h.invoke(ref, "inv-1", `{"command":"status"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.GetOutput()); got != `{"got":{"command":"status"}}` {
		t.Errorf("output = %s", got)
	}
	if resp.GetInvocationId() != "inv-1" || resp.GetContentType() != "application/json" || resp.GetOutputs()["status"] != "ok" {
		t.Errorf("response = %v", resp)
	}
	if resp.GetRegistration().GetRegistrationId() != ref.GetRegistrationId() {
		t.Errorf("registration = %v, want %v", resp.GetRegistration(), ref)
	}
}

// "invocation_id is optional correlation data, limited to 128 bytes ... When
// it is empty, the Runtime Server generates an opaque ID; the response
// always returns the ID in use."
func TestInvokeInvocationID(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	ad := &fakeAdapter{invoke: func(_ context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
		mu.Lock()
		seen = append(seen, inv.ID)
		mu.Unlock()
		return functionruntime.Result{}, nil
	}}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	tests := []struct {
		name     string
		id       string
		wantCode codes.Code
	}{
		{"supplied ID is used", "01J-trace-abc", codes.OK},
		{"128 bytes is allowed", strings.Repeat("i", 128), codes.OK},
		{"limited to 128 bytes", strings.Repeat("i", 129), codes.InvalidArgument},
		{"control characters are refused", "bad\nid", codes.InvalidArgument},
		{"empty means generated", "", codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := h.invoke(ref, tt.id, "{}")
			if tt.wantCode != codes.OK {
				st := wantCode(t, err, tt.wantCode, functionruntime.ReasonInvalidArgument)
				if !strings.HasPrefix(st.Message(), "invocation_id:") {
					t.Errorf("message %q does not name invocation_id", st.Message())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := resp.GetInvocationId()
			mu.Lock()
			last := seen[len(seen)-1]
			mu.Unlock()
			if got != last {
				t.Errorf("response ID %q, adapter saw %q", got, last)
			}
			if tt.id != "" && got != tt.id {
				t.Errorf("response ID %q, want the supplied %q", got, tt.id)
			}
			if tt.id == "" && len(got) != 26 {
				t.Errorf("generated ID %q is not a ULID", got)
			}
		})
	}
	a, _ := h.invoke(ref, "", "{}")
	b, _ := h.invoke(ref, "", "{}")
	if a.GetInvocationId() == b.GetInvocationId() {
		t.Errorf("two generated IDs are equal: %s", a.GetInvocationId())
	}
}

// "v0.x allows one in-flight invocation per function Run and does not queue
// requests." "ResourceExhausted maps to gateway HTTP 429."
func TestInvokeOneInFlightNoQueue(t *testing.T) {
	g := newGate()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	first := make(chan error, 1)
	go func() {
		_, err := h.invoke(ref, "first", "{}")
		first <- err
	}()
	g.waitEntered(t)
	_, err := h.invoke(ref, "second", "{}")
	st := wantCode(t, err, codes.ResourceExhausted, functionruntime.ReasonRegistrationBusy)
	if !strings.Contains(st.Message(), "first") {
		t.Errorf("busy message %q does not name the in-flight invocation", st.Message())
	}
	if c := functionruntime.Classify(err); c != functionruntime.ClassBusy {
		t.Errorf("Classify = %v, want busy", c)
	}
	g.open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := h.invoke(ref, "third", "{}"); err != nil {
		t.Fatalf("after the in-flight invocation finished: %v", err)
	}
}

// "Zero means the bounded gateway default, never unlimited runtime work";
// larger timeouts are capped.
func TestInvokeTimeoutBounds(t *testing.T) {
	deadlines := make(chan time.Duration, 1)
	ad := &fakeAdapter{invoke: func(ctx context.Context, _ functionruntime.Invocation) (functionruntime.Result, error) {
		d, ok := ctx.Deadline()
		if !ok {
			return functionruntime.Result{}, errors.New("no deadline")
		}
		deadlines <- time.Until(d)
		return functionruntime.Result{}, nil
	}}
	lim := functionruntime.Limits{DefaultTimeout: 40 * time.Second, MaxTimeout: 90 * time.Second}
	h := newHarness(t, ad, lim, nil)
	ref := h.mustReady("run-1", 1)
	tests := []struct {
		name   string
		millis int64
		want   time.Duration
	}{
		{"zero means the bounded default", 0, 40 * time.Second},
		{"a small value is used", 5000, 5 * time.Second},
		{"a larger value is capped", int64(time.Hour / time.Millisecond), 90 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.cli.InvokeFunction(context.Background(), &executorv1.InvokeFunctionRequest{Registration: ref, TimeoutMillis: tt.millis})
			if err != nil {
				t.Fatal(err)
			}
			got := <-deadlines
			if got > tt.want || got < tt.want-5*time.Second {
				t.Errorf("invocation deadline in %v, want about %v", got, tt.want)
			}
		})
	}
	_, err := h.cli.InvokeFunction(context.Background(), &executorv1.InvokeFunctionRequest{Registration: ref, TimeoutMillis: -1})
	wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
}

// "DeadlineExceeded affects only this invocation, not the function Run
// lifecycle."
func TestInvokeTimeoutAffectsOnlyThisInvocation(t *testing.T) {
	var calls sync.Map
	ad := &fakeAdapter{invoke: func(ctx context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
		calls.Store(inv.ID, true)
		if inv.ID == "slow" {
			<-ctx.Done()
			return functionruntime.Result{}, ctx.Err()
		}
		return functionruntime.Result{Output: []byte("fast")}, nil
	}}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	_, err := h.cli.InvokeFunction(context.Background(), &executorv1.InvokeFunctionRequest{Registration: ref, InvocationId: "slow", TimeoutMillis: 30})
	st := wantCode(t, err, codes.DeadlineExceeded, functionruntime.ReasonInvocationTimeout)
	if !strings.Contains(st.Message(), "slow") || !strings.Contains(st.Message(), "30ms") {
		t.Errorf("timeout message %q should name the invocation and its timeout", st.Message())
	}
	if c := functionruntime.Classify(err); c != functionruntime.ClassTimeout {
		t.Errorf("Classify = %v, want timeout", c)
	}
	s, err := h.status(ref)
	if err != nil || s.GetState() != stateReady || s.GetInFlight() != 0 {
		t.Fatalf("after a timeout: %v, %v; want READY with nothing in flight", s, err)
	}
	resp, err := h.invoke(ref, "fast", "{}")
	if err != nil || string(resp.GetOutput()) != "fast" {
		t.Fatalf("next invoke after a timeout: %v, %v", resp, err)
	}
}

// The caller's cancellation ends the invocation (the adapter kills the
// worker) and is reported as Canceled; the registration stays READY.
func TestInvokeCallerCancellation(t *testing.T) {
	g := newGate()
	defer g.open()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: ref})
		errc <- err
	}()
	g.waitEntered(t)
	cancel()
	wantCode(t, <-errc, codes.Canceled, "")
	// The in-process client returns once the server has stopped the
	// invocation: the registration is free at once, so the next
	// invocation is never refused as busy.
	if s, err := h.status(ref); err != nil || s.GetInFlight() != 0 || s.GetState() != stateReady {
		t.Fatalf("right after the cancelled call: %v, %v; want READY with nothing in flight", s, err)
	}
	// A direct server call (as gRPC would make it) reports Canceled too.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		<-g.entered
		cancel2()
	}()
	_, err := h.srv.InvokeFunction(ctx2, &executorv1.InvokeFunctionRequest{Registration: ref})
	wantCode(t, err, codes.Canceled, "")
	// A caller's cancellation is routine (a durable-steps attempt that
	// suspends ends so): logged as such, never as a failed invocation.
	logs := h.logs.String()
	if strings.Contains(logs, `"invocation failed"`) || strings.Count(logs, `"invocation cancelled by the caller"`) != 2 {
		t.Errorf("log after two cancelled calls, want two \"invocation cancelled by the caller\" lines and no failure:\n%s", logs)
	}
}

// Input is bounded: larger input is InvalidArgument (retrying cannot help),
// not the retryable ResourceExhausted.
func TestInvokeInputSizeBound(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{MaxInputBytes: 1000}, nil)
	ref := h.mustReady("run-1", 1)
	if _, err := h.invoke(ref, "", strings.Repeat("a", 1000)); err != nil {
		t.Fatalf("input at the bound: %v", err)
	}
	_, err := h.invoke(ref, "", strings.Repeat("a", 1001))
	st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInputTooLarge)
	if !strings.Contains(st.Message(), "1001") || !strings.Contains(st.Message(), "1000") {
		t.Errorf("message %q should give the size and the bound", st.Message())
	}
	if c := functionruntime.Classify(err); c != functionruntime.ClassInvalid {
		t.Errorf("Classify = %v, want invalid", c)
	}
}

// "outputs follow the key, count, and value bounds used by Run.status.outputs."
func TestInvokeOutputsBounds(t *testing.T) {
	many := map[string]string{}
	for i := 0; i < 33; i++ {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	total := map[string]string{}
	for i := 0; i < 5; i++ {
		total[fmt.Sprintf("k%d", i)] = strings.Repeat("x", 4000)
	}
	tests := []struct {
		name    string
		res     functionruntime.Result
		wantErr string
	}{
		{"valid outputs pass", functionruntime.Result{Outputs: map[string]string{"exit_status": "0", "a.b-c_d": "é"}}, ""},
		{"count bound", functionruntime.Result{Outputs: many}, "33 outputs"},
		{"key syntax", functionruntime.Result{Outputs: map[string]string{"bad key": "v"}}, "must match"},
		{"key starting with a digit", functionruntime.Result{Outputs: map[string]string{"1x": "v"}}, "must match"},
		{"empty key", functionruntime.Result{Outputs: map[string]string{"": "v"}}, "1 to 63 bytes"},
		{"key length", functionruntime.Result{Outputs: map[string]string{strings.Repeat("k", 64): "v"}}, "1 to 63 bytes"},
		{"value length", functionruntime.Result{Outputs: map[string]string{"k": strings.Repeat("v", 4097)}}, "4097 bytes"},
		{"value UTF-8", functionruntime.Result{Outputs: map[string]string{"k": "\xff"}}, "valid UTF-8"},
		{"total size", functionruntime.Result{Outputs: total}, "total"},
		{"output size", functionruntime.Result{Output: make([]byte, 2001)}, "output is 2001 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad := &fakeAdapter{invoke: func(context.Context, functionruntime.Invocation) (functionruntime.Result, error) { return tt.res, nil }}
			h := newHarness(t, ad, functionruntime.Limits{MaxOutputBytes: 2000}, nil)
			ref := h.mustReady("run-1", 1)
			resp, err := h.invoke(ref, "inv", "{}")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.GetOutputs()) != len(tt.res.Outputs) {
					t.Fatalf("outputs = %v", resp.GetOutputs())
				}
				return
			}
			st := wantCode(t, err, codes.Unknown, functionruntime.ReasonOutputsInvalid)
			if !strings.Contains(st.Message(), tt.wantErr) {
				t.Errorf("message %q does not contain %q", st.Message(), tt.wantErr)
			}
			if c := functionruntime.Classify(err); c != functionruntime.ClassHandlerTerminal {
				t.Errorf("Classify = %v, want handler_terminal", c)
			}
		})
	}
}

// Error mapping of adapter results to gRPC status with ErrorInfo, and the
// class the bridge derives from it.
func TestInvokeErrorMapping(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		code      codes.Code
		reason    string
		class     functionruntime.ErrorClass
		metadata  map[string]string
		msgSubstr string
		wantState executorv1.FunctionRegistrationState
		// terminalCode is what TerminalCode reads back (0: none).
		terminalCode uint16
		// terminalMessage is what TerminalMessage reads back ("": the
		// status message, whole).
		terminalMessage string
	}{
		{
			name: "handler error is retryable", err: &functionruntime.HandlerError{Type: "ValueError", Message: "bad input"},
			code: codes.Unknown, reason: functionruntime.ReasonHandlerError, class: functionruntime.ClassHandlerRetryable,
			metadata:  map[string]string{"error_type": "ValueError", "exit_code": "0", "terminal": "false", "invocation_id": "inv"},
			msgSubstr: "ValueError: bad input", wantState: stateReady,
		},
		{
			name: "terminal handler error", err: &functionruntime.HandlerError{Terminal: true, Type: "exit", Message: "no such order", ExitCode: 3},
			code: codes.Unknown, reason: functionruntime.ReasonHandlerTerminalError, class: functionruntime.ClassHandlerTerminal,
			metadata:  map[string]string{"error_type": "exit", "exit_code": "3", "terminal": "true"},
			msgSubstr: "no such order", wantState: stateReady, terminalMessage: "no such order",
		},
		{
			name: "terminal handler error with a code", err: &functionruntime.HandlerError{Terminal: true, Type: "fnbridge.TerminalError", Message: "no such order", Code: 404},
			code: codes.Unknown, reason: functionruntime.ReasonHandlerTerminalError, class: functionruntime.ClassHandlerTerminal,
			metadata:  map[string]string{"terminal": "true", functionruntime.MetadataTerminalCode: "404"},
			msgSubstr: "no such order", wantState: stateReady, terminalCode: 404, terminalMessage: "no such order",
		},
		{
			name: "terminal code out of range is dropped", err: &functionruntime.HandlerError{Terminal: true, Type: "fnbridge.TerminalError", Message: "odd", Code: 70000},
			code: codes.Unknown, reason: functionruntime.ReasonHandlerTerminalError, class: functionruntime.ClassHandlerTerminal,
			metadata:  map[string]string{functionruntime.MetadataTerminalCode: ""},
			msgSubstr: "odd", wantState: stateReady, terminalMessage: "odd",
		},
		{
			name: "a retryable error carries no terminal code", err: &functionruntime.HandlerError{Type: "ValueError", Message: "bad", Code: 404},
			code: codes.Unknown, reason: functionruntime.ReasonHandlerError, class: functionruntime.ClassHandlerRetryable,
			metadata:  map[string]string{functionruntime.MetadataTerminalCode: ""},
			msgSubstr: "bad", wantState: stateReady,
		},
		{
			// An adapter's own check of the result (a bad FNBRIDGE_OUTPUTS
			// line) is the same failure as the server's check: one reason.
			name: "invalid outputs found by the adapter", err: &functionruntime.HandlerError{Terminal: true, Type: functionruntime.InvalidOutputsType, Message: `FNBRIDGE_OUTPUTS line 1: invalid output key "1a"`},
			code: codes.Unknown, reason: functionruntime.ReasonOutputsInvalid, class: functionruntime.ClassHandlerTerminal,
			metadata:  map[string]string{"terminal": "true", "invocation_id": "inv"},
			msgSubstr: `the handler returned, but its result is invalid: FNBRIDGE_OUTPUTS line 1: invalid output key "1a"`, wantState: stateReady,
			terminalMessage: `the handler returned, but its result is invalid: FNBRIDGE_OUTPUTS line 1: invalid output key "1a"`,
		},
		{
			name: "output over the adapter's bound", err: &functionruntime.HandlerError{Terminal: true, Type: functionruntime.OutputTooLargeType, Message: "stdout is 7340032 bytes, more than the 6291456 allowed"},
			code: codes.Unknown, reason: functionruntime.ReasonOutputsInvalid, class: functionruntime.ClassHandlerTerminal,
			msgSubstr: "the handler returned, but its result is invalid: stdout is 7340032 bytes", wantState: stateReady,
			terminalMessage: "the handler returned, but its result is invalid: stdout is 7340032 bytes, more than the 6291456 allowed",
		},
		{
			name: "a return value JSON cannot encode", err: &functionruntime.HandlerError{Terminal: true, Type: functionruntime.UnserializableOutputType, Message: "return value is not JSON-serializable: TypeError: set"},
			code: codes.Unknown, reason: functionruntime.ReasonOutputsInvalid, class: functionruntime.ClassHandlerTerminal,
			msgSubstr: "not JSON-serializable", wantState: stateReady,
			terminalMessage: "the handler returned, but its result is invalid: return value is not JSON-serializable: TypeError: set",
		},
		{
			name: "wrapped handler error", err: fmt.Errorf("python: %w", &functionruntime.HandlerError{Type: "KeyError", Message: "'x'"}),
			code: codes.Unknown, reason: functionruntime.ReasonHandlerError, class: functionruntime.ClassHandlerRetryable,
			metadata: map[string]string{"error_type": "KeyError"}, msgSubstr: "KeyError", wantState: stateReady,
		},
		{
			name: "worker crashed", err: fmt.Errorf("python exited with signal 9: %w", functionruntime.ErrWorkerCrashed),
			code: codes.Internal, reason: functionruntime.ReasonWorkerCrashed, class: functionruntime.ClassCrash,
			msgSubstr: "signal 9", wantState: stateReady,
		},
		{
			name: "restart failed makes the registration FAILED", err: fmt.Errorf("restart python: %w", functionruntime.ErrWorkerFailed),
			code: codes.FailedPrecondition, reason: functionruntime.ReasonRegistrationFailed, class: functionruntime.ClassRegistrationFailed,
			msgSubstr: "restart python", wantState: stateFailed,
		},
		{
			name: "unclassified adapter error", err: errors.New("pipe broke"),
			code: codes.Internal, reason: functionruntime.ReasonAdapterError, class: functionruntime.ClassCrash,
			msgSubstr: "pipe broke", wantState: stateReady,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad := &fakeAdapter{invoke: func(context.Context, functionruntime.Invocation) (functionruntime.Result, error) {
				return functionruntime.Result{}, tt.err
			}}
			h := newHarness(t, ad, functionruntime.Limits{}, nil)
			ref := h.mustReady("run-1", 1)
			_, err := h.invoke(ref, "inv", "{}")
			st := wantCode(t, err, tt.code, tt.reason)
			if !strings.Contains(st.Message(), tt.msgSubstr) || !strings.Contains(st.Message(), "inv") {
				t.Errorf("message %q should contain %q and the invocation ID", st.Message(), tt.msgSubstr)
			}
			md := functionruntime.ErrorInfo(err).GetMetadata()
			for k, v := range tt.metadata {
				if md[k] != v {
					t.Errorf("metadata[%s] = %q, want %q", k, md[k], v)
				}
			}
			if c := functionruntime.Classify(err); c != tt.class {
				t.Errorf("Classify = %v, want %v", c, tt.class)
			}
			if c := functionruntime.TerminalCode(err); c != tt.terminalCode {
				t.Errorf("TerminalCode = %d, want %d", c, tt.terminalCode)
			}
			wantMsg := tt.terminalMessage
			if wantMsg == "" {
				wantMsg = st.Message()
			}
			if m := functionruntime.TerminalMessage(err); m != wantMsg {
				t.Errorf("TerminalMessage = %q, want %q", m, wantMsg)
			}
			// The log line gives the code and the runtime's message apart,
			// not grpc's "rpc error: code = ... desc = ..." text.
			if logs := h.logs.String(); !strings.Contains(logs, `"code":"`+tt.code.String()+`"`) || strings.Contains(logs, "rpc error") {
				t.Errorf("log of the failed invocation, want \"code\":%q and no \"rpc error\":\n%s", tt.code, logs)
			}
			s, serr := h.status(ref)
			if serr != nil || s.GetState() != tt.wantState {
				t.Fatalf("registration after the error: %v, %v; want %v", s.GetState(), serr, tt.wantState)
			}
			if tt.wantState == stateFailed {
				if !strings.Contains(s.GetFatalError(), "restart python") {
					t.Errorf("fatal_error = %q", s.GetFatalError())
				}
				_, err := h.invoke(ref, "", "{}")
				wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationFailed)
			}
		})
	}
}

// A huge handler message cannot blow up the status: it is bounded.
func TestInvokeHandlerMessageIsBounded(t *testing.T) {
	ad := &fakeAdapter{invoke: func(context.Context, functionruntime.Invocation) (functionruntime.Result, error) {
		return functionruntime.Result{}, &functionruntime.HandlerError{Type: "Traceback", Message: strings.Repeat("line\n", 100000)}
	}}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	_, err := h.invoke(ref, "", "{}")
	st := wantCode(t, err, codes.Unknown, functionruntime.ReasonHandlerError)
	if n := len(st.Message()); n > 4096 {
		t.Errorf("status message is %d bytes, want at most 4096", n)
	}
}

// A malformed reference or content type is refused with a message that
// says which bound it broke and by how much, not only that it is wrong.
func TestInvokeMalformedFieldsSayWhy(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	for _, tc := range []struct {
		name string
		req  *executorv1.InvokeFunctionRequest
		want string
	}{
		{"long registration id", &executorv1.InvokeFunctionRequest{Registration: &executorv1.FunctionRegistration{RunUid: "run-1", RegistrationId: strings.Repeat("r", 200)}},
			"registration.registration_id: is 200 bytes; the IDs this server issues are at most 128"},
		{"registration id not UTF-8", &executorv1.InvokeFunctionRequest{Registration: &executorv1.FunctionRegistration{RunUid: "run-1", RegistrationId: "reg_\xff"}},
			"registration.registration_id: is not valid UTF-8"},
		{"long content type", &executorv1.InvokeFunctionRequest{Registration: ref, ContentType: strings.Repeat("c", 300)},
			"content_type: is 300 bytes, at most 256 allowed"},
		{"content type not UTF-8", &executorv1.InvokeFunctionRequest{Registration: ref, ContentType: "text/\xff"},
			"content_type: must be valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.cli.InvokeFunction(context.Background(), tc.req)
			st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
			if !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("message %q, want it to contain %q", st.Message(), tc.want)
			}
		})
	}
}

// "InvokeFunction requires a READY registration"; "FailedPrecondition maps to
// HTTP 503 for draining, stale, or unready registration."
func TestInvokeRequiresReadyRegistration(t *testing.T) {
	g := newGate()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)

	_, err := h.invoke(&executorv1.FunctionRegistration{RunUid: "other-run", RegistrationId: "reg_x"}, "", "{}")
	wantCode(t, err, codes.NotFound, functionruntime.ReasonRegistrationNotFound)
	_, err = h.invoke(&executorv1.FunctionRegistration{RunUid: "run-1"}, "", "{}")
	wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
	_, err = h.invoke(nil, "", "{}")
	wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)

	// Draining: hold an invocation, start a graceful unregister.
	first := make(chan error, 1)
	go func() {
		_, err := h.invoke(ref, "held", "{}")
		first <- err
	}()
	g.waitEntered(t)
	unreg := make(chan error, 1)
	go func() {
		_, err := h.cli.UnregisterFunction(context.Background(), &executorv1.UnregisterFunctionRequest{Registration: ref, DrainTimeoutMillis: 10000})
		unreg <- err
	}()
	proctest.Eventually(t, 10*time.Second, "DRAINING", func() bool {
		_, err := h.status(ref)
		info := functionruntime.ErrorInfo(err)
		return info.GetReason() == functionruntime.ReasonRegistrationDraining
	})
	_, err = h.invoke(ref, "late", "{}")
	wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationDraining)
	if c := functionruntime.Classify(err); c != functionruntime.ClassStale {
		t.Errorf("Classify(draining) = %v, want stale", c)
	}
	g.open()
	if err := <-first; err != nil {
		t.Fatalf("held invocation during a graceful drain: %v", err)
	}
	if err := <-unreg; err != nil {
		t.Fatal(err)
	}
}
