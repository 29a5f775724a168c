package restate_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// seen is what a handler observed of its attempt.
type seen struct {
	span      trace.SpanContext
	replayed  int
	replaying bool
	runErr    error
	cause     error
}

// observeOnce serves one request/response attempt (the whole journal in
// the body) of a handler that records what it sees, with the given
// invoke request headers.
func observeOnce(t *testing.T, headers map[string]string, journal ...any) (seen, []restatetest.Frame) {
	t.Helper()
	var s seen
	ep := restate.NewEndpoint(restate.Config{ProtocolMode: restate.RequestResponse})
	err := ep.Bind(restate.Service{Name: "Svc", Handlers: []restate.Handler{{Name: "fn", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
		s.span = trace.SpanContextFromContext(ctx)
		s.replayed, s.replaying = restate.ReplayedEntries(ctx), restate.Replaying(ctx)
		out, err := ctx.Run("invoke", func(context.Context) ([]byte, error) { return in, nil })
		s.runErr, s.cause = err, context.Cause(ctx)
		return out, err
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/invoke/Svc/fn", bytes.NewReader(restatetest.Encode(journal...)))
	req.Header.Set("Content-Type", restatetest.ContentType(6))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	ep.ServeHTTP(rec, req)
	frames, err := restatetest.Decode(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return s, frames
}

// restate-server, when it traces, sends each attempt's span as W3C trace
// context on the invoke request (not in the journal): the handler's
// context carries it, as a remote parent, with its tracestate.
func TestHandlerContextCarriesTheInvokeRequestsTraceContext(t *testing.T) {
	s, _ := observeOnce(t, map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  "restate=1",
	}, restatetest.Start("inv_traced", 1), restatetest.Input([]byte(`1`)))
	if !s.span.IsValid() || !s.span.IsRemote() || !s.span.IsSampled() {
		t.Fatalf("span context %+v, want the sampled remote parent of the request", s.span)
	}
	if s.span.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.span.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span context %s/%s, want the traceparent's ids", s.span.TraceID(), s.span.SpanID())
	}
	if s.span.TraceState().String() != "restate=1" {
		t.Errorf("trace state %q, want restate=1", s.span.TraceState())
	}

	s, _ = observeOnce(t, nil, restatetest.Start("inv_plain", 1), restatetest.Input([]byte(`1`)))
	if s.span.IsValid() {
		t.Errorf("a request without traceparent gave the handler span context %+v", s.span)
	}
	s, _ = observeOnce(t, map[string]string{"traceparent": "not-a-traceparent"}, restatetest.Start("inv_bad", 1), restatetest.Input([]byte(`1`)))
	if s.span.IsValid() {
		t.Errorf("a malformed traceparent gave the handler span context %+v", s.span)
	}
}

// ReplayedEntries counts what the StartMessage announced beyond the input
// (Replaying: a command is to be replayed);
// Run's wait for a completion that can only come in a later attempt (the
// request/response mode) ends the handler's context with ErrSuspended, as
// restate.Context promises, so the handler can tell a suspension from a
// failure.
func TestReplayedEntriesAndSuspensionCause(t *testing.T) {
	s, frames := observeOnce(t, nil, restatetest.Start("inv_first", 1), restatetest.Input([]byte(`1`)))
	if s.replayed != 0 || s.replaying {
		t.Errorf("a first attempt replayed %d entries (replaying %v), want 0 (not replaying)", s.replayed, s.replaying)
	}
	if last := frames[len(frames)-1]; last.Type() != wire.SuspensionMessageType {
		t.Fatalf("frames %v, want the attempt to suspend on the run's completion", frames)
	}
	if !errors.Is(s.runErr, restate.ErrAttemptEnded) || !errors.Is(s.cause, restate.ErrSuspended) {
		t.Errorf("Run = %v with context cause %v, want ErrAttemptEnded and cause ErrSuspended", s.runErr, s.cause)
	}

	s, frames = observeOnce(t, nil, restatetest.Start("inv_again", 3), restatetest.Input([]byte(`1`)),
		restatetest.Run(1, "invoke"), restatetest.RunValue(1, []byte(`"recorded"`)))
	if s.replayed != 2 || !s.replaying {
		t.Errorf("an attempt with a recorded run replayed %d entries (replaying %v), want 2 (run command and its completion; replaying)", s.replayed, s.replaying)
	}
	if s.runErr != nil || s.cause != nil {
		t.Errorf("replayed Run = %v, cause %v; want the recorded value and a live context", s.runErr, s.cause)
	}
	if last := frames[len(frames)-1]; last.Type() != wire.EndMessageType {
		t.Errorf("frames %v, want Output and End", frames)
	}
}

// InflightStreams counts the streams being served.
func TestInflightStreams(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	ep := restate.NewEndpoint(restate.Config{})
	err := ep.Bind(restate.Service{Name: "Svc", Handlers: []restate.Handler{{Name: "fn", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
		close(started)
		<-release
		return in, nil
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := ep.InflightStreams(); n != 0 {
		t.Fatalf("%d streams in flight before any request", n)
	}
	st := restatetest.ServeStream(ep, "/invoke/Svc/fn", 6)
	if err := st.Send(restatetest.Start("inv_1", 1), restatetest.Input([]byte(`1`))); err != nil {
		t.Fatal(err)
	}
	<-started
	if n := ep.InflightStreams(); n != 1 {
		t.Errorf("%d streams in flight while one handler runs, want 1", n)
	}
	close(release)
	_ = st.CloseSend()
	<-st.Done()
	if n := ep.InflightStreams(); n != 0 {
		t.Errorf("%d streams in flight after the stream ended, want 0", n)
	}
}
