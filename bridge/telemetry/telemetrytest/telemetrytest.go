// Package telemetrytest checks what package telemetry exposes, for tests
// in and out of process: it reads Prometheus metrics (gathered from a
// registry, or scraped from a /metrics URL and parsed) and receives
// exported spans on a real OTLP/HTTP endpoint that decodes each
// ExportTraceServiceRequest protobuf.
package telemetrytest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	collectortracev1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Families are metric families by name, as one scrape returned them.
type Families map[string]*dto.MetricFamily

// Gather collects g's metrics, failing the test on an error.
func Gather(t testing.TB, g prometheus.Gatherer) Families {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := Families{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// scrapeClient bounds one scrape.
var scrapeClient = &http.Client{Timeout: 5 * time.Second}

// Scrape GETs url (a /metrics endpoint) and parses the Prometheus text
// exposition it answers.
func Scrape(url string) (Families, error) {
	resp, err := scrapeClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("GET %s: content type %q, want the text exposition format", url, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return Families(mfs), nil
}

// Value is the value of the series of family name whose labels include
// the given name/value pairs: a counter's or gauge's value, a histogram's
// sample count. ok is false when no series matches; more than one match is
// an error in the caller's selection and reads as not found.
func (f Families) Value(name string, labels ...string) (v float64, ok bool) {
	m := f.series(name, labels)
	if m == nil {
		return 0, false
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// Labels lists the label sets of family name's series, each as
// "k=v,k=v" in label order, sorted: for messages and cardinality checks.
func (f Families) Labels(name string) []string {
	mf := f[name]
	if mf == nil {
		return nil
	}
	var out []string
	for _, m := range mf.GetMetric() {
		var parts []string
		for _, lp := range m.GetLabel() {
			parts = append(parts, lp.GetName()+"="+lp.GetValue())
		}
		out = append(out, strings.Join(parts, ","))
	}
	sort.Strings(out)
	return out
}

func (f Families) series(name string, labels []string) *dto.Metric {
	mf := f[name]
	if mf == nil || len(labels)%2 != 0 {
		return nil
	}
	var found *dto.Metric
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		if found != nil {
			return nil
		}
		found = m
	}
	return found
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i < len(labels); i += 2 {
		match := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				match = true
				break
			}
		}
		if !match {
			return false
		}
	}
	return true
}

// Span is one received span with what it was exported with.
type Span struct {
	*tracev1.Span
	// Resource is the resource's attributes, as strings.
	Resource map[string]string
	// Scope is the instrumentation scope's name.
	Scope string
}

// TraceIDHex is the trace id as W3C trace context writes it.
func (s Span) TraceIDHex() string { return hex.EncodeToString(s.GetTraceId()) }

// SpanIDHex is the span id as W3C trace context writes it.
func (s Span) SpanIDHex() string { return hex.EncodeToString(s.GetSpanId()) }

// ParentIDHex is the parent span id as W3C trace context writes it, ""
// for a root span.
func (s Span) ParentIDHex() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attr is the span attribute key as a string ("" when absent).
func (s Span) Attr(key string) string { return attrs(s.GetAttributes())[key] }

func attrs(kvs []*commonv1.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonv1.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		case *commonv1.AnyValue_IntValue:
			out[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonv1.AnyValue_BoolValue:
			out[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonv1.AnyValue_DoubleValue:
			out[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

// Receiver is an OTLP/HTTP trace receiver on a loopback httptest server:
// POST /v1/traces with a protobuf ExportTraceServiceRequest (gzip or
// not), answered like a collector. It keeps every span and the headers of
// every export request.
type Receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []Span
	requests []http.Header
	errs     []string
}

// NewReceiver starts a receiver, closed at the test's cleanup. A request
// it cannot decode fails the test then.
func NewReceiver(t testing.TB) *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.srv.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range r.errs {
			t.Errorf("OTLP receiver: %s", e)
		}
	})
	return r
}

// URL is the receiver's base URL (http://127.0.0.1:PORT); exports go to
// URL()+"/v1/traces".
func (r *Receiver) URL() string { return r.srv.URL }

func (r *Receiver) fail(w http.ResponseWriter, code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.errs = append(r.errs, msg)
	r.mu.Unlock()
	http.Error(w, msg, code)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.fail(w, http.StatusNotFound, "%s %s: want POST /v1/traces", req.Method, req.URL.Path)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		r.fail(w, http.StatusUnsupportedMediaType, "content type %q, want application/x-protobuf", ct)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.fail(w, http.StatusBadRequest, "gzip: %v", err)
			return
		}
		defer zr.Close()
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		r.fail(w, http.StatusBadRequest, "reading the body: %v", err)
		return
	}
	var msg collectortracev1.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		r.fail(w, http.StatusBadRequest, "decoding ExportTraceServiceRequest: %v", err)
		return
	}
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				got = append(got, Span{Span: sp, Resource: res, Scope: ss.GetScope().GetName()})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.requests = append(r.requests, req.Header.Clone())
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortracev1.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests returns the headers of every export request so far.
func (r *Receiver) Requests() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.requests...)
}
