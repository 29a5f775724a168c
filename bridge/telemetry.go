package bridge

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/restate"
)

// The bridge's side of package telemetry: what each hook in the
// invocation path (handlerFunc, stepsHandlerFunc, pool.invoke, pool.lease,
// ensureRegistered) records, and the gauges read at scrape time. Each hook
// is one call, so the invocation path reads as before.

// Span attribute keys. restate.invocation.id is the key Restate's own
// SDKs use; the rest are fnbridge's.
const (
	attrInvocationID    = attribute.Key("restate.invocation.id")
	attrService         = attribute.Key("fnbridge.service")
	attrHandler         = attribute.Key("fnbridge.handler")
	attrDurability      = attribute.Key("fnbridge.durability")
	attrReplayedEntries = attribute.Key("fnbridge.journal.replayed_entries")
	attrOutcome         = attribute.Key("fnbridge.outcome")
	attrRunUID          = attribute.Key("fnbridge.run_uid")
	attrRuntime         = attribute.Key("fnbridge.runtime")
	attrErrorClass      = attribute.Key("fnbridge.error_class")
)

// newPoolTelemetry binds one handler's metrics and the tracer.
func newPoolTelemetry(opts Options, service string, h *HandlerConfig) *poolTelemetry {
	durability := h.Durability
	if durability == "" {
		durability = DurabilityFunction
	}
	return &poolTelemetry{
		m:      opts.Metrics.For(service, h.Name),
		tracer: opts.Tracer,
		target: service + "/" + h.Name,
		attrs: []attribute.KeyValue{attrService.String(service), attrHandler.String(h.Name),
			attrDurability.String(durability)},
		runtime: attrRuntime.String(h.Runtime),
	}
}

// poolTelemetry is one handler's metric handles and tracer. A nil one
// records nothing (pools built by tests).
type poolTelemetry struct {
	m       *telemetry.HandlerMetrics // nil: no metrics
	tracer  trace.Tracer              // nil: no spans
	target  string                    // Service/handler, the span names' subject
	attrs   []attribute.KeyValue      // service, handler, durability
	runtime attribute.KeyValue
}

// attemptTelemetry is one invocation attempt being recorded.
type attemptTelemetry struct {
	pt    *poolTelemetry
	start time.Time
	span  trace.Span // nil without a tracer
}

// startAttempt begins an attempt's record: its span is a child of the
// span Restate sent with the invoke request (a root without one).
func (pt *poolTelemetry) startAttempt(ctx restate.Context) attemptTelemetry {
	if pt == nil {
		return attemptTelemetry{}
	}
	a := attemptTelemetry{pt: pt, start: time.Now()}
	replayed := restate.ReplayedEntries(ctx)
	if replayed > 0 {
		pt.m.JournalReplay()
	}
	if pt.tracer != nil {
		_, a.span = pt.tracer.Start(ctx, pt.target, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(pt.attrs...),
			trace.WithAttributes(attrInvocationID.String(ctx.InvocationID()), attrReplayedEntries.Int(replayed)))
	}
	return a
}

// context returns ctx carrying the attempt's span, so spans started under
// it (the function execution) are its children.
func (a *attemptTelemetry) context(ctx context.Context) context.Context {
	if a.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, a.span)
}

// end records the attempt's outcome and duration and ends its span.
func (a *attemptTelemetry) end(o telemetry.Outcome, err error) {
	if a.pt == nil {
		return
	}
	a.pt.m.Attempt(o, time.Since(a.start))
	if a.span == nil {
		return
	}
	a.span.SetAttributes(attrOutcome.String(o.String()))
	switch o {
	case telemetry.OutcomeTerminalFailure, telemetry.OutcomeRetryableFailure, telemetry.OutcomePaused:
		if err != nil {
			a.span.SetStatus(codes.Error, err.Error())
		} else {
			a.span.SetStatus(codes.Error, o.String())
		}
	}
	a.span.End()
}

// execTelemetry is one InvokeFunction call being recorded.
type execTelemetry struct {
	pt    *poolTelemetry
	start time.Time
	span  trace.Span
}

// startExecution begins the record of one function execution on slot s.
// The returned context carries its span and, as the invocation's
// environment (TRACEPARENT, TRACESTATE), the trace context the function
// continues: the execution span's, or without a tracer the one Restate
// sent with the attempt.
func (pt *poolTelemetry) startExecution(ctx context.Context, s *slot) (context.Context, execTelemetry) {
	if pt == nil {
		return ctx, execTelemetry{}
	}
	e := execTelemetry{pt: pt, start: time.Now()}
	if pt.tracer != nil {
		ctx, e.span = pt.tracer.Start(ctx, "function "+pt.target, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(pt.attrs...), trace.WithAttributes(pt.runtime, attrRunUID.String(s.runUID)))
	}
	if tp, ts := telemetry.TraceHeaders(ctx); tp != "" {
		ctx = functionruntime.WithInvocationEnv(ctx, functionruntime.EnvTraceparent, tp)
		// A caller's tracestate can exceed what the runtime accepts (it
		// would refuse the invocation as invalid): the trace goes on
		// without it rather than the invocation failing.
		if ts != "" && len(ts) <= functionruntime.MaxInvocationEnvValue {
			ctx = functionruntime.WithInvocationEnv(ctx, functionruntime.EnvTracestate, ts)
		}
	}
	return ctx, e
}

// end records the call's result: its duration when it reached the
// function, a crash or a busy refusal, and ends its span. ctx is the
// call's: a function stopped because its attempt suspended did not fail,
// and its span says it was suspended instead of carrying an error.
func (e execTelemetry) end(ctx context.Context, err error) {
	if e.pt == nil {
		return
	}
	class := functionruntime.Classify(err)
	switch class {
	case functionruntime.ClassBusy:
		e.pt.m.ResourceExhausted()
	case functionruntime.ClassCrash:
		e.pt.m.WorkerCrashed()
	}
	if reachedFunction(class) {
		e.pt.m.FunctionRan(time.Since(e.start))
	}
	if e.span == nil {
		return
	}
	switch cause := context.Cause(ctx); {
	case err != nil && ctx.Err() != nil && (errors.Is(cause, stepctx.ErrSuspended) || errors.Is(cause, restate.ErrSuspended)),
		err != nil && ctx.Err() == nil && functionruntime.ErrorInfo(err).GetMetadata()["error_type"] == functionruntime.AttemptEndedType:
		// Stopped with its suspended attempt, or (a Python function, which
		// runSteps leaves to unwind only when it suspended) answered so
		// itself before anything stopped it.
		e.span.SetAttributes(attrOutcome.String(telemetry.OutcomeSuspended.String()))
	case err != nil && ctx.Err() != nil && errors.Is(cause, restate.ErrCancelled):
		// Restate's CANCEL stopped it: the invocation's outcome, asked
		// for, not a failure of the function (its attempt span says
		// cancelled too).
		e.span.SetAttributes(attrOutcome.String(telemetry.OutcomeCancelled.String()))
	case err != nil:
		e.span.SetAttributes(attrErrorClass.String(class.String()))
		// The runtime's message, without grpc's "rpc error: code = ..."
		// wrapper: the class attribute says what kind of failure it was.
		e.span.SetStatus(codes.Error, status.Convert(err).Message())
	}
	e.span.End()
}

// reachedFunction reports whether an InvokeFunction call with this result
// ran the function at all: refusals before dispatch did not.
func reachedFunction(c functionruntime.ErrorClass) bool {
	switch c {
	case functionruntime.ClassBusy, functionruntime.ClassStale, functionruntime.ClassUnimplemented,
		functionruntime.ClassInvalid, functionruntime.ClassUnavailable:
		return false
	}
	return true
}

// leaseWaited records the wait for a free registration begun at start.
func (pt *poolTelemetry) leaseWaited(start time.Time, timedOut bool) {
	if pt != nil {
		pt.m.LeaseWaited(time.Since(start), timedOut)
	}
}

// workerStarted records a registration that became READY.
func (pt *poolTelemetry) workerStarted(start time.Time) {
	if pt != nil {
		pt.m.WorkerStarted(time.Since(start))
	}
}

// release gives the handler's metrics back once the pool is closed: the
// handler's series go when no other pool serves it.
func (pt *poolTelemetry) release() {
	if pt != nil {
		pt.m.Release()
	}
}

// workerStartFailed records a registration that became FAILED, or that
// could not be made at all (the handler's source missing, the runtime
// refusing it as invalid).
func (pt *poolTelemetry) workerStartFailed() {
	if pt != nil {
		pt.m.WorkerStartFailed()
	}
}

// publish makes s's state visible to the scrape (fnbridge_registrations).
// Only the slot's holder calls it, when it leases the slot (busy) or hands
// it back to the pool.
func (s *slot) publish(busy bool) {
	st := telemetry.RegistrationUnregistered
	switch {
	case busy:
		st = telemetry.RegistrationBusy
	case s.regID != "":
		st = telemetry.RegistrationIdle
	case s.fatal != "":
		st = telemetry.RegistrationFailed
	}
	s.state.Store(uint32(st))
}

// attemptOutcome is how an attempt ended (telemetry.Outcome documents
// each). err is what the handler returns to the endpoint; executed says
// whether the function ran in this attempt (a durability: function
// attempt answered from the journal did not); causes are the errors
// behind err (the run closure's, the steps attempt's), which say what
// restate's ErrAttemptEnded hides: a suspension or a pause.
func attemptOutcome(ctx context.Context, executed bool, err error, causes ...error) telemetry.Outcome {
	if err == nil {
		if executed {
			return telemetry.OutcomeOK
		}
		return telemetry.OutcomeReplayed
	}
	if errors.Is(err, restate.ErrCancelled) || errors.Is(context.Cause(ctx), restate.ErrCancelled) {
		return telemetry.OutcomeCancelled
	}
	var te *restate.TerminalError
	if errors.As(err, &te) {
		if !executed {
			return telemetry.OutcomeReplayed
		}
		return telemetry.OutcomeTerminalFailure
	}
	if errors.Is(context.Cause(ctx), restate.ErrSuspended) {
		return telemetry.OutcomeSuspended
	}
	for _, c := range causes {
		var re *restate.RetryableError
		var af *restate.AttemptFailedError
		switch {
		case errors.Is(c, stepctx.ErrSuspended), errors.Is(c, restate.ErrSuspended):
			return telemetry.OutcomeSuspended
		case errors.As(c, &re) && re.Pause, errors.As(c, &af) && af.Pause:
			return telemetry.OutcomePaused
		}
	}
	var re *restate.RetryableError
	if errors.As(err, &re) && re.Pause {
		return telemetry.OutcomePaused
	}
	return telemetry.OutcomeRetryableFailure
}

// bridgeSource reports a bridge's gauges to the scrape.
type bridgeSource struct{ b *Bridge }

func (s bridgeSource) Registrations() []telemetry.RegistrationCount {
	keys := s.b.poolKeys()
	out := make([]telemetry.RegistrationCount, 0, len(keys))
	for _, k := range keys {
		out = append(out, slotCounts(s.b.pools[k], false))
	}
	return out
}

func (s bridgeSource) InflightStreams() int { return s.b.endpoint.InflightStreams() }

// slotCounts counts p's slots by published state; heldOnly counts only
// those holding a registration or a lease (idle, busy).
func slotCounts(p *pool, heldOnly bool) telemetry.RegistrationCount {
	rc := telemetry.RegistrationCount{Service: p.service, Handler: p.h.Name}
	for _, sl := range p.slots {
		st := telemetry.RegistrationState(sl.state.Load())
		if st < telemetry.NumRegistrationStates && (!heldOnly || st == telemetry.RegistrationIdle || st == telemetry.RegistrationBusy) {
			rc.Slots[st]++
		}
	}
	return rc
}

// replacedSource reports what a bridge a reload replaced still has
// (Live.retire): its endpoint's streams, and the registrations and leases
// of its pools the successor did not take over, each pool until it has
// closed. The successor reports the pools it took over, and the slots that
// hold nothing are the new version's slots' to report (a removed handler
// has none), so nothing counts twice.
type replacedSource struct {
	b     *Bridge
	mu    sync.Mutex
	pools []*pool // retiring, not closed yet
}

// closed stops reporting p.
func (s *replacedSource) closed(p *pool) {
	s.mu.Lock()
	s.pools = slices.DeleteFunc(s.pools, func(q *pool) bool { return q == p })
	s.mu.Unlock()
}

func (s *replacedSource) Registrations() []telemetry.RegistrationCount {
	s.mu.Lock()
	pools := slices.Clone(s.pools)
	s.mu.Unlock()
	out := make([]telemetry.RegistrationCount, 0, len(pools))
	for _, p := range pools {
		out = append(out, slotCounts(p, true))
	}
	return out
}

func (s *replacedSource) InflightStreams() int { return s.b.endpoint.InflightStreams() }
