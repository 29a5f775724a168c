package main

import (
	"net"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/bridge/telemetry/telemetrytest"
)

// metrics_listen serves /metrics until stop; a taken address fails at
// start naming the field.
func TestStartTelemetryServesMetricsUntilStopped(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cfg := &bridge.Config{MetricsListen: addr}
	var opts bridge.Options
	stop, err := startTelemetry(cfg, zerolog.Nop(), &opts)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Metrics == nil || opts.Tracer != nil {
		t.Fatalf("options %+v, want metrics and no tracer", opts)
	}
	f, err := telemetrytest.Scrape("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if f["fnbridge_build_info"] == nil {
		t.Errorf("scrape lacks fnbridge_build_info: %v", f)
	}

	_, err = startTelemetry(cfg, zerolog.Nop(), &bridge.Options{})
	if err == nil || !strings.Contains(err.Error(), "metrics_listen "+addr) {
		t.Errorf("second start on %s: %v, want an error naming metrics_listen", addr, err)
	}
	stop()
	if _, err := telemetrytest.Scrape("http://" + addr + "/metrics"); err == nil {
		t.Errorf("/metrics still answers after stop")
	}
}

// Neither key set: nothing is started and stop is still safe to call.
func TestStartTelemetryOff(t *testing.T) {
	var opts bridge.Options
	stop, err := startTelemetry(&bridge.Config{}, zerolog.Nop(), &opts)
	if err != nil || opts.Metrics != nil || opts.Tracer != nil {
		t.Fatalf("startTelemetry with nothing configured: %+v, %v", opts, err)
	}
	stop()
}
