package bridge_test

import (
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
)

// metrics_listen and tracing are off when left out; a collector named
// without a path gets the OTLP/HTTP traces path, one with a path is used
// as written.
func TestTelemetryConfigDefaultsAndTracesURL(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, validConfig))
	if err != nil {
		t.Fatal(err)
	}
	// service_name stays empty: the environment may name the service, and
	// the exporter falls back to DefaultTracingServiceName only then.
	if cfg.MetricsListen != "" || cfg.Tracing.TracesURL() != "" || cfg.Tracing.ServiceName != "" {
		t.Errorf("defaults: metrics_listen %q, traces URL %q, service_name %q; want off, off, unset",
			cfg.MetricsListen, cfg.Tracing.TracesURL(), cfg.Tracing.ServiceName)
	}
	for endpoint, want := range map[string]string{
		"http://127.0.0.1:4318":              "http://127.0.0.1:4318/v1/traces",
		"http://127.0.0.1:4318/":             "http://127.0.0.1:4318/v1/traces",
		"https://otel.example:443/custom/tr": "https://otel.example:443/custom/tr",
	} {
		cfg, err := bridge.LoadConfig(writeConfig(t, "metrics_listen: 127.0.0.1:9464\ntracing:\n  otlp_endpoint: "+endpoint+
			"\n  service_name: bridge-eu\n  headers: {Authorization: Bearer x}\n"+validConfig))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Tracing.TracesURL(); got != want {
			t.Errorf("otlp_endpoint %s: traces URL %s, want %s", endpoint, got, want)
		}
		if cfg.MetricsListen != "127.0.0.1:9464" || cfg.Tracing.ServiceName != "bridge-eu" || cfg.Tracing.Headers["Authorization"] != "Bearer x" {
			t.Errorf("parsed %q %+v", cfg.MetricsListen, cfg.Tracing)
		}
	}
}

// Each bad value is refused at load, naming its field and what is wanted.
func TestTelemetryConfigRejectsBadValuesNamingTheField(t *testing.T) {
	cases := []struct{ head, field, says string }{
		{"metrics_listen: 9464\n", "metrics_listen", "not host:port"},
		{"tracing: {otlp_endpoint: 127.0.0.1:4318}\n", "tracing.otlp_endpoint", "http:// or https://"},
		{"tracing: {otlp_endpoint: 'grpc://collector:4317'}\n", "tracing.otlp_endpoint", "http:// or https://"},
		{"tracing: {otlp_endpoint: 'http://user:pw@collector:4318'}\n", "tracing.otlp_endpoint", "tracing.headers"},
		{"tracing: {otlp_endpoint: 'http://collector:4318', headers: {'bad name': x}}\n", "tracing.headers.bad name", "not a valid HTTP header name"},
		{"tracing: {otlp_endpoint: 'http://collector:4318', headers: {X-Key: \"a\\nb\"}}\n", "tracing.headers.X-Key", "cannot carry"},
	}
	for _, c := range cases {
		_, err := bridge.LoadConfig(writeConfig(t, c.head+validConfig))
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: err = %v, want one naming %s and saying %q", c.head, err, c.field, c.says)
		}
	}
}
