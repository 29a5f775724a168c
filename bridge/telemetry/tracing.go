package telemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the bridge's instrumentation scope in exported spans.
const TracerName = "github.com/fnbridge/fnbridge/bridge"

// TracingConfig configures the span export.
type TracingConfig struct {
	// Endpoint is the OTLP/HTTP traces URL, path included
	// (http://127.0.0.1:4318/v1/traces). Empty: no export.
	Endpoint string
	// ServiceName is the service.name resource attribute. Empty: the
	// environment's (OTEL_SERVICE_NAME, or service.name in
	// OTEL_RESOURCE_ATTRIBUTES), else DefaultServiceName.
	ServiceName string
	// Headers are added to every export request (an API key, a tenant).
	Headers map[string]string
	// Version is the service.version resource attribute.
	Version string
}

// DefaultServiceName is the spans' service.name when neither the
// configuration nor the environment names one.
const DefaultServiceName = "fnbridge"

const serviceNameKey = "service.name"

// Tracing is the tracer provider the bridge's spans go to.
type Tracing struct {
	provider *sdktrace.TracerProvider
	// Tracer makes the bridge's spans; nil when nothing is exported.
	Tracer trace.Tracer
}

// NewTracing sets up the OTLP/HTTP exporter (protobuf encoding) behind a
// batch span processor. With an empty Endpoint it returns a Tracing whose
// Tracer is nil. Creating the exporter sends nothing: an unreachable
// collector shows as export errors later, never as a start failure.
//
// The sampler is the SDK default, parent based: the bridge follows the
// sampled flag of the trace context Restate sends, and samples an attempt
// that came without one. The standard OTEL_* variables of the SDK (for
// example OTEL_BSP_SCHEDULE_DELAY, OTEL_TRACES_SAMPLER,
// OTEL_RESOURCE_ATTRIBUTES) apply where this configuration says nothing.
func NewTracing(ctx context.Context, cfg TracingConfig) (*Tracing, error) {
	if cfg.Endpoint == "" {
		return &Tracing{}, nil
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(cfg.Endpoint)}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing.otlp_endpoint %s: %w", cfg.Endpoint, err)
	}
	var attrs []attribute.KeyValue
	if cfg.ServiceName != "" {
		attrs = append(attrs, attribute.String(serviceNameKey, cfg.ServiceName))
	}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	// Configured attributes come last so they win over the environment's.
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithAttributes(attrs...))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, errors.Join(fmt.Errorf("tracing: resource: %w", err), exp.Shutdown(ctx))
	}
	if _, named := res.Set().Value(serviceNameKey); !named {
		res, err = resource.Merge(res, resource.NewSchemaless(attribute.String(serviceNameKey, DefaultServiceName)))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("tracing: resource: %w", err), exp.Shutdown(ctx))
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{provider: tp, Tracer: tp.Tracer(TracerName)}, nil
}

// Shutdown exports the spans still queued and stops the exporter, bounded
// by ctx. A Tracing without export has nothing to do.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// traceContext is the W3C Trace Context propagator: the only format
// Restate sends and the one functions receive.
var traceContext propagation.TraceContext

// TraceHeaders returns the W3C traceparent and tracestate header values of
// the span context in ctx; both are empty when ctx has no valid one.
func TraceHeaders(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}
