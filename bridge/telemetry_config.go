package bridge

import (
	"net"
	"net/url"
	"sort"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/fnbridge/fnbridge/bridge/telemetry"
)

// TracingConfig is the tracing: block: where the bridge exports its spans.
type TracingConfig struct {
	// OTLPEndpoint is the OTLP/HTTP collector, http(s)://host:port with an
	// optional path; empty: no span export (functions still get the trace
	// context Restate sends).
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// ServiceName is the service.name resource of the exported spans;
	// empty: the environment's, else DefaultTracingServiceName.
	ServiceName string `yaml:"service_name"`
	// Headers are sent with every export request (an API key, a tenant).
	Headers map[string]string `yaml:"headers"`
}

// DefaultTracingServiceName is the spans' service.name when neither
// tracing.service_name nor the environment (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) names one.
const DefaultTracingServiceName = telemetry.DefaultServiceName

// otlpTracesPath is the OTLP/HTTP path of trace exports, added to an
// endpoint given without a path (as OTEL_EXPORTER_OTLP_ENDPOINT is).
const otlpTracesPath = "/v1/traces"

// TracesURL is where spans are posted: OTLPEndpoint, plus /v1/traces when
// it names no path. Empty when tracing is off.
func (t TracingConfig) TracesURL() string {
	if t.OTLPEndpoint == "" {
		return ""
	}
	u, err := url.Parse(t.OTLPEndpoint)
	if err != nil {
		return t.OTLPEndpoint // resolve refused it already
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = otlpTracesPath
	}
	return u.String()
}

// samePort says two host:port addresses would bind the same port: equal
// ports on the same host, or on a wildcard host for either.
func samePort(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

// resolveTelemetry checks metrics_listen and tracing and fills defaults.
func (c *Config) resolveTelemetry(bad func(path, format string, args ...any)) {
	if c.MetricsListen != "" {
		if err := checkHostPort(c.MetricsListen); err != nil {
			bad("metrics_listen", "%q is not host:port (e.g. 127.0.0.1:9464): %v", c.MetricsListen, err)
		} else if samePort(c.MetricsListen, c.Listen) {
			// Else one of the two servers fails to bind, named after the
			// other's field.
			bad("metrics_listen", "%q takes the port of listen %q: the metrics need a port of their own (e.g. 127.0.0.1:9464)", c.MetricsListen, c.Listen)
		}
	}
	t := &c.Tracing
	if t.OTLPEndpoint != "" {
		u, err := url.Parse(t.OTLPEndpoint)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			bad("tracing.otlp_endpoint", "%q is not an http:// or https:// URL of an OTLP/HTTP collector (e.g. http://127.0.0.1:4318)", t.OTLPEndpoint)
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			// Redacted: the error is printed, and logged by bridge dev.
			bad("tracing.otlp_endpoint", "%q: want scheme, host, port and path only (credentials go in tracing.headers)", u.Redacted())
		case u.Port() != "" && checkHostPort(u.Host) != nil:
			bad("tracing.otlp_endpoint", "%q: %v", t.OTLPEndpoint, checkHostPort(u.Host))
		}
	}
	names := make([]string, 0, len(t.Headers))
	for k := range t.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		switch {
		case !httpguts.ValidHeaderFieldName(k):
			bad("tracing.headers."+k, "%q is not a valid HTTP header name", k)
		case !httpguts.ValidHeaderFieldValue(t.Headers[k]) || strings.ContainsAny(t.Headers[k], "\r\n"):
			bad("tracing.headers."+k, "the value holds characters an HTTP header cannot carry")
		}
	}
}
