package restate

import (
	"context"
	"time"

	"github.com/fnbridge/fnbridge/restate/discovery"
)

// HandlerFunc implements one Restate handler. input is the invocation's
// payload; the returned bytes are its output. Return a *TerminalError to
// end the invocation with a failure, a *RetryableError (or any other
// error) to fail the attempt and let Restate retry it.
type HandlerFunc func(ctx Context, input []byte) ([]byte, error)

// Context is what a HandlerFunc gets for one invocation attempt.
type Context interface {
	// Context is done when the runtime cancels the invocation (CANCEL
	// signal; context.Cause is ErrCancelled), when the attempt suspends
	// (context.Cause is ErrSuspended) or when the attempt's stream ends.
	// Ended without CANCEL, the attempt journals nothing more: whatever Run
	// or the handler returns afterwards is neither proposed nor output.
	context.Context
	// InvocationID is the printable invocation id (inv_...).
	InvocationID() string
	// Key is the virtual object or workflow key; empty for services.
	Key() string
	// Headers are the headers the invocation was sent with.
	Headers() map[string]string
	// Run executes fn at most once per successful journal record: if the
	// journal already holds the run's result, Run returns it (value, or a
	// *TerminalError) without calling fn. Otherwise fn runs, its result is
	// proposed to the runtime and Run returns once it is durable. A
	// non-terminal error from fn fails the attempt (nothing is recorded,
	// so fn runs again on the retry) and Run returns ErrAttemptEnded, as it
	// does when the invocation must suspend. Runs must be issued in the
	// same order, with the same names, on every attempt.
	Run(name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error)
	// RunReady is Run with a readiness step for a run that must first
	// wait for something, such as a free worker. When the run executes
	// (never on replay of a recorded run), ready runs after its
	// RunCommand is journaled, and RunReady flushes the command only
	// once ready returns, so the runtime sees the step in flight when it
	// can start rather than while it waits; if ready returns
	// nil, fn runs next (always), after the flush. An error from ready is
	// handled as fn's would be, and fn is not called. ready nil is Run.
	RunReady(name string, ready func(ctx context.Context) error, fn func(ctx context.Context) ([]byte, error)) ([]byte, error)
	// RunLast is RunReady for a handler that returns right after the run,
	// with an output that follows from the run's result alone. When the
	// run executes, RunLast returns the result it proposes at once rather
	// than once it is durable, so the proposal and the Output the
	// handler's return produces reach the runtime together: no round trip
	// to the acknowledgement, and in REQUEST_RESPONSE no suspension and
	// second request. The journal is Run's: the runtime journals a
	// stream's messages in order, so the Output never lands without the
	// run's completion before it, and a retry after a failure in between
	// replays the recorded run. After an executed RunLast the handler
	// must return; any other journal operation fails the attempt. With
	// Config.AfterRunJournaled set, RunLast waits as RunReady does.
	RunLast(name string, ready func(ctx context.Context) error, fn func(ctx context.Context) ([]byte, error)) ([]byte, error)

	// The durable-steps operations: the parts of Run as separate calls,
	// timers, calls to other handlers, and waiting for several results.
	// They are not safe for concurrent use; the caller issues one at a
	// time. ErrSuspended, ErrCancelled and ErrAttemptEnded end the attempt:
	// the handler should return.

	// RunStart journals a RunCommand named name and flushes it to the
	// runtime before returning. On replay of a recorded run it returns
	// (outcome, nil, nil): the closure must not run. Otherwise it returns
	// (nil, run, nil): execute, then call RunComplete.
	RunStart(name string) (*Outcome, Future, error)
	// RunStartDone is RunStart for a closure that has already run (its
	// outcome is at hand): the RunCommand goes out with the RunComplete
	// that follows, in one write, rather than on its own first.
	RunStartDone(name string) (*Outcome, Future, error)
	// RunComplete proposes the run's result (value or terminal failure)
	// and returns once it is durable (ack on v7, notification on v5/v6).
	// A retryable closure failure is not passed here: see RunFail.
	RunComplete(run Future, out Outcome) error
	// RunCompleteContext is RunComplete that stops waiting when ctx ends
	// first, returning ctx's error; the attempt should then end.
	RunCompleteContext(ctx context.Context, run Future, out Outcome) error
	// RunFail records that the run's closure failed retryably (err): the
	// handler then returns a *RetryableError, and the attempt's
	// ErrorMessage names the run as its related command (index, type and
	// name, as restate invocations describe shows). Nothing is journaled,
	// so Restate retries the run; the rules for the handler's return
	// (a CANCEL it did not take ends it cancelled) apply as for any other.
	RunFail(run Future, err *RetryableError) error
	// Sleep journals a timer (SleepCommand, wake_up_time = now + d).
	Sleep(d time.Duration) (Future, error)
	// Call journals a call (CallCommand); the Future is the call's result.
	Call(req CallRequest) (Future, error)
	// Send journals a one-way call (OneWayCallCommand) and returns the
	// callee's invocation id once the runtime reported it.
	Send(req SendRequest) (invocationID string, err error)
	// Await waits until all (AwaitAll) or at least one (AwaitAny) of
	// futures completed and returns one *Outcome per future (nil where not
	// complete; for AwaitAny, set for the one whose completion arrived
	// first only, so a replay answers as the recorded attempt did). A wait not complete within suspendAfter, or at once when
	// the runtime closed its input (REQUEST_RESPONSE), suspends the attempt
	// and returns ErrSuspended. The CANCEL signal while waiting makes it
	// return ErrCancelled.
	Await(futures []Future, mode AwaitMode, suspendAfter time.Duration) ([]*Outcome, error)
	// AwaitContext is Await that also gives up when ctx ends first,
	// returning ctx's error: nothing is journaled, and the futures can be
	// awaited again.
	AwaitContext(ctx context.Context, futures []Future, mode AwaitMode, suspendAfter time.Duration) ([]*Outcome, error)
	// RandomSeed is StartMessage.random_seed or, when the runtime sent
	// none, derived from the invocation id: identical on every attempt.
	RandomSeed() uint64

	// State of a virtual object or workflow (see keyed.go): eager reads
	// from StartMessage, lazy ones when it is partial; writes update the
	// local view, so later reads of the attempt see them.
	GetState(name string) (value []byte, found bool, err error)
	StateKeys() ([]string, error)
	SetState(name string, value []byte) error
	ClearState(name string) error
	ClearAllState() error
	// Awakeable creates an awakeable: its id and the Future of its result.
	Awakeable() (id string, f Future, err error)
	// CompleteAwakeable resolves (Value) or rejects (Failure) an awakeable.
	CompleteAwakeable(id string, out Outcome) error
	// Promise is the Future of a workflow promise; PeekPromise reads it
	// without waiting (nil while unresolved); CompletePromise resolves or
	// rejects it (a *TerminalError when it was completed before).
	Promise(name string) (Future, error)
	PeekPromise(name string) (*Outcome, error)
	CompletePromise(name string, out Outcome) error
	// CancelInvocation sends Restate's CANCEL signal to another invocation.
	CancelInvocation(invocationID string) error
	// EndsCancelled reports whether the handler (one with DeliverCancel)
	// returning err now ends the invocation cancelled (409) instead of
	// failing the attempt with err: err is retryable, Restate's CANCEL has
	// arrived, and no wait took it. The answer is settled by the call, so
	// that what the handler logs is what its return does: a CANCEL that
	// arrives later leaves the attempt to fail, and the retry ends
	// cancelled.
	EndsCancelled(err error) bool
}

// RetryPolicy is the runtime-side retry policy of a handler.
type RetryPolicy = discovery.RetryPolicy

// ServiceType is a service's type in the manifest.
type ServiceType = discovery.ServiceType

// HandlerType is a handler's type in a virtual object or workflow.
type HandlerType = discovery.HandlerType

// Service and handler types (see package discovery).
const (
	ServiceTypeService       = discovery.ServiceTypeService
	ServiceTypeVirtualObject = discovery.ServiceTypeVirtualObject
	ServiceTypeWorkflow      = discovery.ServiceTypeWorkflow
	HandlerTypeExclusive     = discovery.HandlerTypeExclusive
	HandlerTypeShared        = discovery.HandlerTypeShared
	HandlerTypeWorkflow      = discovery.HandlerTypeWorkflow
)

// Service is a named group of handlers, served as a Restate SERVICE,
// VIRTUAL_OBJECT or WORKFLOW.
type Service struct {
	// Name must match ^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9._-]*$.
	Name string
	// Type is empty (SERVICE), ServiceTypeVirtualObject or
	// ServiceTypeWorkflow; keyed invocations carry Context.Key.
	Type          ServiceType
	Documentation string
	Metadata      map[string]string
	// LazyState asks the runtime to send no eager state (manifest v3+
	// enableLazyState): every state read is a GetLazyState round trip.
	LazyState bool
	Handlers  []Handler
}

// Handler is one handler of a Service. Zero durations and a nil
// RetryPolicy leave the runtime's defaults in place.
type Handler struct {
	// Name must match ^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9_]*$.
	Name string
	// Fn is required.
	Fn HandlerFunc
	// Type is the handler's type in a virtual object (exclusive, the
	// default, or shared) or workflow (HandlerTypeWorkflow for the
	// workflow itself, or shared); empty in a plain service.
	Type          HandlerType
	Documentation string
	Metadata      map[string]string
	// Content types announced to the ingress (defaults */* and
	// application/json).
	InputContentType, OutputContentType string
	// Runtime settings announced in the manifest (manifest v3+); zero
	// leaves each to the runtime. WorkflowCompletionRetention is for the
	// WORKFLOW handler of a workflow only.
	InactivityTimeout, AbortTimeout, JournalRetention, IdempotencyRetention time.Duration
	WorkflowCompletionRetention                                             time.Duration
	// IngressPrivate (manifest v3+) hides the handler from the ingress:
	// only other services can call it.
	IngressPrivate bool
	// RetryPolicy is announced in the manifest (v4+).
	RetryPolicy *RetryPolicy
	// DeliverCancel makes Restate's CANCEL signal a failure the handler
	// sees instead of the end of the attempt: the handler's context is not
	// cancelled, and the first wait the CANCEL beats (Await, or the wait
	// inside Run, RunComplete, Send, a lazy state read or a promise
	// operation) returns ErrCancelled, once; later operations work as
	// before (compensations), and what the handler returns is the
	// invocation's output. Without it the CANCEL ends the attempt and the
	// invocation with 409 whatever the handler does.
	DeliverCancel bool
}

// truePtr is a pointer to true for true, nil (unset) for false.
func truePtr(b bool) *bool {
	if !b {
		return nil
	}
	return &b
}

func durationPtr(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// manifestService describes s for the discovery manifest.
func manifestService(s Service) discovery.Service {
	out := discovery.Service{
		Name:          s.Name,
		Type:          s.Type,
		Documentation: s.Documentation,
		Metadata:      s.Metadata,
		Handlers:      make([]discovery.Handler, 0, len(s.Handlers)),
	}
	if out.Type == "" {
		out.Type = discovery.ServiceTypeService
	}
	if s.LazyState {
		lazy := true
		out.EnableLazyState = &lazy
	}
	for _, h := range s.Handlers {
		out.Handlers = append(out.Handlers, discovery.Handler{
			Name:                 h.Name,
			Type:                 h.Type,
			Documentation:        h.Documentation,
			Metadata:             h.Metadata,
			InputContentType:     h.InputContentType,
			OutputContentType:    h.OutputContentType,
			InactivityTimeout:    durationPtr(h.InactivityTimeout),
			AbortTimeout:         durationPtr(h.AbortTimeout),
			JournalRetention:     durationPtr(h.JournalRetention),
			IdempotencyRetention: durationPtr(h.IdempotencyRetention),
			RetryPolicy:          h.RetryPolicy,

			WorkflowCompletionRetention: durationPtr(h.WorkflowCompletionRetention),
			IngressPrivate:              truePtr(h.IngressPrivate),
		})
	}
	return out
}
