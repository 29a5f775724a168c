// Package telemetry holds what fnbridge reports about itself: the
// Prometheus registry with the bridge's metrics (served by `bridge serve`
// on metrics_listen) and the OpenTelemetry tracer provider that exports
// the bridge's spans over OTLP/HTTP (tracing.otlp_endpoint).
//
// It knows nothing of pools, journals or FunctionRuntime: the bridge
// records into bound per-handler handles (Metrics.For) and reports its
// gauges through a Source read at scrape time. Every label value comes from
// the configuration (service, handler) or from a closed set defined here
// (Outcome, RegistrationState), never from request data, so the number of
// series is bounded by the configuration.
//
// Both halves are optional: a nil *Metrics and a nil *HandlerMetrics
// record nothing, and a nil trace.Tracer (Tracing.Tracer when no endpoint
// is configured) means no spans are made.
package telemetry
