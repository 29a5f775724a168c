package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/internal/version"
)

// telemetryShutdownTimeout bounds the final span export and the metrics
// server's shutdown: an unreachable collector must not hold the exit.
const telemetryShutdownTimeout = 5 * time.Second

// startTelemetry sets up what the configuration asks for: the metrics
// registry served on metrics_listen and the OTLP span export. It fills
// opts.Metrics and opts.Tracer; stop, owed by the caller once the bridge
// is closed, flushes the spans still queued and stops the metrics server.
func startTelemetry(cfg *bridge.Config, log zerolog.Logger, opts *bridge.Options) (stop func(), err error) {
	var stops []func(context.Context) error
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), telemetryShutdownTimeout)
		defer cancel()
		for i := len(stops) - 1; i >= 0; i-- {
			if err := stops[i](ctx); err != nil {
				log.Warn().Err(err).Msg("stopping telemetry")
			}
		}
	}
	if cfg.MetricsListen != "" {
		m := telemetry.NewMetrics(version.Version)
		lis, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return nil, fmt.Errorf("metrics_listen %s: %w", cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.HTTPHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("metrics server stopped")
			}
		}()
		stops = append(stops, srv.Shutdown)
		opts.Metrics = m
		if !bridge.IsLoopback(cfg.MetricsListen) {
			log.Warn().Str("metrics_listen", lis.Addr().String()).Msg("metrics_listen is on an address other machines can reach: /metrics is read-only and unauthenticated (service and handler names, counts, timings)")
		}
		log.Info().Str("metrics_listen", lis.Addr().String()).Msg("serving Prometheus metrics on /metrics")
	}
	if url := cfg.Tracing.TracesURL(); url != "" {
		// The SDK reports export failures through the global handler;
		// they belong in the bridge's log, not on bare stderr.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn().Err(err).Msg("tracing")
		}))
		tr, err := telemetry.NewTracing(context.Background(), telemetry.TracingConfig{
			Endpoint: url, ServiceName: cfg.Tracing.ServiceName, Headers: cfg.Tracing.Headers, Version: version.Version,
		})
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, tr.Shutdown)
		opts.Tracer = tr.Tracer
		log.Info().Str("otlp_endpoint", url).Str("service_name", cfg.Tracing.ServiceName).Msg("exporting spans over OTLP/HTTP")
	}
	return stop, nil
}
