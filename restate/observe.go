package restate

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// What the endpoint tells an observer (metrics, tracing) about its attempts.

// traceHeader is the W3C traceparent header in canonical form: read from
// the map directly, so a request without it costs no key conversion.
const traceHeader = "Traceparent"

// attemptContext is the base of an attempt's handler context: the
// request's context carrying the W3C trace context of the invoke request,
// when restate-server sent one (it does when it traces: each attempt has
// its own span), so the handler's spans continue Restate's trace and
// trace.SpanContextFromContext reports Restate's span.
func attemptContext(r *http.Request) context.Context {
	ctx := r.Context()
	if len(r.Header[traceHeader]) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
}

// ReplayedEntries is how many journal entries beyond the input the
// attempt's StartMessage announced: 0 for a first attempt, more when the
// attempt replays recorded work (a retry after a journaled step, a
// resumption after a suspension, an attempt after a crash). It is 0 for a
// Context not made by an Endpoint.
func ReplayedEntries(ctx Context) int {
	c, ok := ctx.(invocationContext)
	if !ok {
		return 0
	}
	// The StartMessage is set before the handler runs and never changes.
	return max(int(c.inv.m.Start().GetKnownEntries())-1, 0)
}

// Replaying reports that the handler's next command would be matched
// against one the journal recorded: the attempt's replay is not over.
// Once false, it stays false for the attempt (every later command is
// new). It is true for a Context not made by an Endpoint, whose journal
// is unknown.
func Replaying(ctx Context) bool {
	c, ok := ctx.(invocationContext)
	if !ok {
		return true
	}
	c.inv.mu.Lock()
	defer c.inv.mu.Unlock()
	return c.inv.m.Replaying()
}

// InflightStreams is the number of invocation streams being served now
// (never more than MaxConcurrentInvocations: a refused stream counts for
// no longer than its refusal).
func (e *Endpoint) InflightStreams() int {
	return int(min(e.active.Load(), int64(e.cfg.MaxConcurrentInvocations)))
}
