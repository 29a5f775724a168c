package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/fnbridge/fnbridge/bridge/telemetry/telemetrytest"
	"github.com/fnbridge/fnbridge/internal/restateserver"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// traced is what the trace.py and trace.sh functions answer: the trace
// context their invocation got.
type traced struct {
	Traceparent *string `json:"traceparent"` // Python: fnbridge.traceparent()
	Env         string  `json:"env"`         // $TRACEPARENT / os.environ
	Tracestate  string  `json:"tracestate"`
	Child       string  `json:"child"` // Python: what a child process sees
}

// parseTraceparent splits a W3C traceparent into trace id and span id; ok
// is false unless it is version 00, sampled, with ids of the right size.
func parseTraceparent(tp string) (traceID, spanID string, ok bool) {
	f := strings.Split(tp, "-")
	if len(f) != 4 || f[0] != "00" || len(f[1]) != 32 || len(f[2]) != 16 || f[3] != "01" {
		return "", "", false
	}
	return f[1], f[2], true
}

// callTraced calls Service/context through the ingress as a caller in
// trace traceID and returns what the function saw.
func callTraced(t *testing.T, srv *restateserver.Server, service, traceID string) traced {
	t.Helper()
	out := callOK(caseContext(t), t, srv, service, "context", `{}`,
		map[string]string{"traceparent": "00-" + traceID + "-" + callerSpan + "-01"})
	var got traced
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s answered %s: %v", service, out, err)
	}
	return got
}

// traceServices configures trace.py as PREFIXPy/context and trace.sh as
// PREFIXSh/context.
func traceServices(prefix string) string {
	return fmt.Sprintf(`services:
  - name: %[1]sPy
    handlers:
      - {name: context, runtime: python, dir: fn, handler: trace.context}
  - name: %[1]sSh
    handlers:
      - {name: context, runtime: bash, dir: fn, handler: trace.context}
`, prefix)
}

// callerSpan is the span id of the test's caller in every trace.
const callerSpan = "00f067aa0ba902b7"

// TestTracing: restate-server traces (RESTATE_TRACING_ENDPOINT; nothing
// needs to listen there) and sends each attempt's span as traceparent on
// the invoke request. The bridge continues that trace: a Python and a Bash
// function see it as TRACEPARENT (and fnbridge.traceparent()) in the
// caller's trace, per invocation; with tracing.otlp_endpoint the bridge
// exports a span per attempt, under Restate's, and a span per function
// execution, under the attempt, whose id is the function's parent, over
// OTLP/HTTP to a receiver decoding the real protobuf, flushed when the
// bridge stops.
func TestTracing(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{ExtraEnv: []string{"RESTATE_TRACING_ENDPOINT=http://" + testtool.FreeAddr(t)}})

	t.Run("exported: attempt and execution spans continue the caller's trace", func(t *testing.T) {
		t.Parallel()
		rcv := telemetrytest.NewReceiver(t)
		ws := newWorkspace(t, "trace.py", "trace.sh")
		cfg := ws.config(t, fmt.Sprintf(`tracing:
  otlp_endpoint: %s
  service_name: fnbridge-e2e
  headers: {X-Tenant: e2e}
`, rcv.URL())+traceServices("Traced"))
		b := startBridge(t, cfg, testtool.FreeAddr(t))
		srv.Register(t, b.URI(), false)

		traceIDs := map[string]string{"TracedPy": "4bf92f3577b34da6a3ce929d0e0e4736", "TracedSh": "0af7651916cd43dd8448eb211c80319c"}
		seen := map[string]traced{}
		for svc, traceID := range traceIDs {
			got := callTraced(t, srv, svc, traceID)
			tid, _, ok := parseTraceparent(got.Env)
			if !ok || tid != traceID {
				t.Fatalf("%s: the function's TRACEPARENT is %q, want one in the caller's trace %s", svc, got.Env, traceID)
			}
			seen[svc] = got
		}
		py := seen["TracedPy"]
		if py.Traceparent == nil || *py.Traceparent != py.Env || py.Child != py.Env {
			t.Errorf("Python: fnbridge.traceparent() %v, os.environ %q, child %q: want the same value", py.Traceparent, py.Env, py.Child)
		}

		// SIGTERM: the bridge shuts down and flushes its queued spans.
		b.signal(syscall.SIGTERM)
		if e, ok := b.waitExit(30 * time.Second); !ok || e.err != nil {
			t.Fatalf("bridge after SIGTERM: exited %v (%v)", ok, e.err)
		}
		spans := rcv.Spans()
		for svc, traceID := range traceIDs {
			fn := seen[svc]
			_, fnParent, _ := parseTraceparent(fn.Env)
			var attempt, exec *telemetrytest.Span
			for i := range spans {
				s := &spans[i]
				if s.Attr("fnbridge.service") != svc {
					continue
				}
				switch s.GetName() {
				case svc + "/context":
					attempt = s
				case "function " + svc + "/context":
					exec = s
				}
			}
			if attempt == nil || exec == nil {
				t.Fatalf("%s: no attempt and execution span among %d received", svc, len(spans))
			}
			if attempt.TraceIDHex() != traceID || exec.TraceIDHex() != traceID {
				t.Errorf("%s: spans in traces %s and %s, want the caller's %s", svc, attempt.TraceIDHex(), exec.TraceIDHex(), traceID)
			}
			if p := attempt.ParentIDHex(); p == "" || p == callerSpan {
				t.Errorf("%s: the attempt's parent is %q, want Restate's span for the attempt", svc, p)
			}
			if exec.ParentIDHex() != attempt.SpanIDHex() {
				t.Errorf("%s: the execution's parent %s is not the attempt %s", svc, exec.ParentIDHex(), attempt.SpanIDHex())
			}
			if exec.SpanIDHex() != fnParent {
				t.Errorf("%s: the function's TRACEPARENT names span %s, want its execution span %s", svc, fnParent, exec.SpanIDHex())
			}
			if fn.Tracestate != exec.GetTraceState() {
				t.Errorf("%s: the function's TRACESTATE %q, want the span's %q", svc, fn.Tracestate, exec.GetTraceState())
			}
			rows := invocationRows(caseContext(t), t, srv, svc, "id")
			if len(rows) != 1 {
				t.Fatalf("%s: %d invocations, want 1", svc, len(rows))
			}
			for k, v := range map[string]string{"fnbridge.handler": "context", "fnbridge.outcome": "ok",
				"restate.invocation.id": fmt.Sprint(rows[0]["id"]), "fnbridge.durability": "function"} {
				if attempt.Attr(k) != v {
					t.Errorf("%s attempt: %s = %q, want %q", svc, k, attempt.Attr(k), v)
				}
			}
			if attempt.GetKind() != tracev1.Span_SPAN_KIND_SERVER || exec.GetKind() != tracev1.Span_SPAN_KIND_CLIENT {
				t.Errorf("%s: span kinds %v / %v, want server / client", svc, attempt.GetKind(), exec.GetKind())
			}
			if attempt.Resource["service.name"] != "fnbridge-e2e" {
				t.Errorf("%s: resource %v, want service.name fnbridge-e2e", svc, attempt.Resource)
			}
		}
		for _, h := range rcv.Requests() {
			if h.Get("X-Tenant") != "e2e" {
				t.Errorf("an export request lacks the configured header: %v", h)
			}
		}
	})

	t.Run("not exported: the function sees the attempt's trace context, per invocation", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t, "trace.py", "trace.sh")
		cfg := ws.config(t, traceServices("Plain"))
		b := startBridge(t, cfg, testtool.FreeAddr(t))
		srv.Register(t, b.URI(), false)
		// Two invocations of the same warm worker in two traces: each sees
		// its own.
		for _, svc := range []string{"PlainPy", "PlainSh"} {
			for _, traceID := range []string{"11111111111111111111111111111111", "22222222222222222222222222222222"} {
				got := callTraced(t, srv, svc, traceID)
				tid, sid, ok := parseTraceparent(got.Env)
				if !ok || tid != traceID || sid == callerSpan {
					t.Errorf("%s in trace %s: TRACEPARENT %q, want Restate's span of the attempt in that trace", svc, traceID, got.Env)
				}
			}
		}
	})
}
