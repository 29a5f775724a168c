package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/bridge/telemetry/telemetrytest"
)

// remoteParent is a span context as Restate sends it in traceparent and
// tracestate.
func remoteParent(t *testing.T) trace.SpanContext {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("restate=abc")
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
}

// Without an endpoint nothing is set up and nothing is owed.
func TestNoEndpointNoTracer(t *testing.T) {
	tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingConfig{})
	if err != nil || tr.Tracer != nil {
		t.Fatalf("NewTracing without endpoint = %v, %v; want no tracer", tr, err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Spans go to the configured OTLP/HTTP endpoint as protobuf, with the
// configured headers and resource, parented on the remote span; Shutdown
// flushes what the batch processor still holds.
func TestSpansAreExportedOverOTLPHTTPOnShutdown(t *testing.T) {
	rcv := telemetrytest.NewReceiver(t)
	tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingConfig{
		Endpoint: rcv.URL() + "/v1/traces", ServiceName: "bridge-eu", Version: "9.9.9",
		Headers: map[string]string{"X-Tenant": "team-a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	parent := remoteParent(t)
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	_, span := tr.Tracer.Start(ctx, "Svc/fn")
	span.End()
	if n := len(rcv.Spans()); n != 0 {
		t.Fatalf("%d spans arrived before the batch was due or flushed", n)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	if len(spans) != 1 {
		t.Fatalf("received %d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.GetName() != "Svc/fn" || s.TraceIDHex() != parent.TraceID().String() || s.ParentIDHex() != parent.SpanID().String() {
		t.Errorf("span %q trace %s parent %s, want Svc/fn in trace %s under %s", s.GetName(), s.TraceIDHex(), s.ParentIDHex(), parent.TraceID(), parent.SpanID())
	}
	if s.Resource["service.name"] != "bridge-eu" || s.Resource["service.version"] != "9.9.9" {
		t.Errorf("resource %v, want service.name bridge-eu and service.version 9.9.9", s.Resource)
	}
	if s.Scope != telemetry.TracerName {
		t.Errorf("scope %q, want %q", s.Scope, telemetry.TracerName)
	}
	if s.GetTraceState() != "restate=abc" {
		t.Errorf("trace state %q, want the parent's", s.GetTraceState())
	}
	for _, h := range rcv.Requests() {
		if h.Get("X-Tenant") != "team-a" {
			t.Errorf("export request headers %v lack X-Tenant: team-a", h)
		}
	}
}

// TraceHeaders writes W3C trace context, the form functions receive.
func TestTraceHeaders(t *testing.T) {
	tp, ts := telemetry.TraceHeaders(trace.ContextWithRemoteSpanContext(context.Background(), remoteParent(t)))
	if tp != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || ts != "restate=abc" {
		t.Errorf("TraceHeaders = %q, %q", tp, ts)
	}
	if tp, ts := telemetry.TraceHeaders(context.Background()); tp != "" || ts != "" {
		t.Errorf("TraceHeaders without a span context = %q, %q; want empty", tp, ts)
	}
}

// service.name: the configuration's, else the environment's (the OTEL_*
// variables apply where the configuration says nothing), else fnbridge.
func TestServiceNameConfigThenEnvironmentThenDefault(t *testing.T) {
	for _, tc := range []struct {
		name, configured, envName, envAttrs, want string
	}{
		{"configured wins", "bridge-eu", "billing", "service.name=attrs", "bridge-eu"},
		{"OTEL_SERVICE_NAME", "", "billing", "deployment.environment=prod", "billing"},
		{"OTEL_RESOURCE_ATTRIBUTES", "", "", "service.name=attrs,deployment.environment=prod", "attrs"},
		{"default", "", "", "deployment.environment=prod", telemetry.DefaultServiceName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_SERVICE_NAME", tc.envName)
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", tc.envAttrs)
			rcv := telemetrytest.NewReceiver(t)
			tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingConfig{Endpoint: rcv.URL() + "/v1/traces", ServiceName: tc.configured})
			if err != nil {
				t.Fatal(err)
			}
			_, span := tr.Tracer.Start(context.Background(), "Svc/fn")
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Spans()
			if len(spans) != 1 {
				t.Fatalf("received %d spans, want 1", len(spans))
			}
			if got := spans[0].Resource["service.name"]; got != tc.want {
				t.Errorf("service.name %q, want %q (resource %v)", got, tc.want, spans[0].Resource)
			}
			if got := spans[0].Resource["deployment.environment"]; tc.envAttrs != "" && tc.name != "configured wins" && got != "prod" {
				t.Errorf("deployment.environment %q, want prod from OTEL_RESOURCE_ATTRIBUTES", got)
			}
		})
	}
}
