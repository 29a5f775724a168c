package stepctx

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Journal is the durable side of one invocation attempt: what the bridge
// implements with the invocation's restate.Context and what the Server
// turns requests into. The Server calls it one method at a time per
// attempt, in the order the function made its context calls, so a Journal
// needs no locking of its own for a single attempt.
//
// Every method that journals a command (RunStart, Sleep, Call, Send) must
// return only once the command is in the journal: the Server answers the
// function after the method returns, and a step's closure runs only after
// that answer, unless the replay is over (see "Pipelined steps" in the
// package doc).
//
// Await must return once its ctx ends (the client hung up, or
// Attempt.Close): Close waits for the method in flight to return. The
// other methods do not wait on anything but the journal itself.
//
// Any error returned ends the attempt for the Server: ErrSuspended (tested
// with errors.Is) means the attempt suspended; any other error (journal
// mismatch, stream closed, cancelled context) means it cannot go on. The
// function is told to stop in both cases and no further method is called.
type Journal interface {
	// RunStart journals a run command named name. On replay of a run whose
	// result is recorded it returns that result and a nil Future: the
	// closure must not run. Otherwise it returns a nil Result and the run's
	// Future, to be passed to RunComplete once the closure finished.
	RunStart(ctx context.Context, name string) (*Result, Future, error)
	// RunComplete records the outcome of a run started by RunStart. A
	// value or terminal failure is journaled as the run's result and the
	// method returns once it is durable. A RetryableFailure journals
	// nothing: the Journal fails the attempt so that Restate retries it
	// (and the closure runs again).
	RunComplete(ctx context.Context, run Future, out RunOutcome) error
	// Sleep journals a timer of duration d and returns its Future; it
	// completes with an empty value.
	Sleep(ctx context.Context, d time.Duration) (Future, error)
	// Call journals a request-response call and returns the Future of the
	// callee's result.
	Call(ctx context.Context, req CallRequest) (Future, error)
	// Send journals a one-way call and returns the invocation id of the
	// callee's invocation.
	Send(ctx context.Context, req SendRequest) (string, error)
	// Await waits for futures, all of which this Journal returned during
	// this attempt (possibly awaited before). The returned slice has one
	// entry per future, nil where not complete: with AwaitAll every entry
	// is set, with AwaitAny at least one is. A wait that is not complete
	// within suspendAfter suspends the attempt: Await returns ErrSuspended.
	// A zero suspendAfter leaves the budget to the Journal.
	Await(ctx context.Context, futures []Future, mode AwaitMode, suspendAfter time.Duration) ([]*Result, error)
	// InvocationID is the printable id of the invocation (inv_...).
	InvocationID() string
	// RandomSeed is the seed of the attempt's random numbers. It must be
	// the same on every attempt of the invocation (Restate derives it from
	// the invocation id), so replayed random values are the recorded ones.
	RandomSeed() uint64
	// Replaying reports that the attempt's next command would be matched
	// against a recorded one: the replay is not over. Once it returns
	// false it does so for the rest of the attempt, and every RunStart
	// executes. The Server asks it when the attempt opens (one not
	// replaying is fresh) and after a RunStart that executes.
	Replaying() bool

	// The operations of keyed services and awakeables. The Server calls
	// the state and promise ones only for handlers whose HandlerInfo
	// allows them (WithHandler).

	// GetState reads the state key name; found is false when it has no
	// value. It may wait for the runtime (a lazy read).
	GetState(ctx context.Context, name string) (value []byte, found bool, err error)
	// StateKeys lists the state keys, sorted.
	StateKeys(ctx context.Context) ([]string, error)
	// SetState, ClearState and ClearAllState journal a state write.
	SetState(ctx context.Context, name string, value []byte) error
	ClearState(ctx context.Context, name string) error
	ClearAllState(ctx context.Context) error
	// Awakeable creates an awakeable: its id (the same on every attempt
	// that creates its awakeables in the same order) and its Future.
	Awakeable(ctx context.Context) (id string, f Future, err error)
	// CompleteAwakeable resolves (a value) or rejects (a failure) the
	// awakeable id.
	CompleteAwakeable(ctx context.Context, id string, res Result) error
	// Promise journals the wait for the workflow promise name and returns
	// its Future.
	Promise(ctx context.Context, name string) (Future, error)
	// PeekPromise reads the promise without waiting for it: nil while it
	// is unresolved.
	PeekPromise(ctx context.Context, name string) (*Result, error)
	// CompletePromise resolves or rejects the promise; a promise completed
	// before fails with a *CallFailedError.
	CompletePromise(ctx context.Context, name string, res Result) error
	// CancelInvocation asks Restate to cancel the invocation id.
	CancelInvocation(ctx context.Context, invocationID string) error
}

// DoneRunStarter is a Journal that can start a run whose closure has
// already run: a framed client pipelining its steps (see "Pipelined
// steps") whose run/complete arrived with its run/start. RunStartDone is
// RunStart whose command need not reach Restate on its own, before the
// completion, since nothing is in flight to show: it goes with the
// completion, one write instead of two.
type DoneRunStarter interface {
	RunStartDone(ctx context.Context, name string) (*Result, Future, error)
}

// CallFailedError is how a Journal (or the Server) fails one context call
// terminally without ending the attempt: the call was refused before
// anything was journaled, or the invocation's cancellation interrupted its
// wait (code 409). The function gets it as a terminal failure (Python
// fnbridge.TerminalError; the fnbridge command exits 100) and may go on;
// the Client returns it as the call's error.
type CallFailedError struct {
	Failure Failure
}

func (e *CallFailedError) Error() string {
	return fmt.Sprintf("%s (code %d)", e.Failure.Message, orInternal(e.Failure.Code))
}

// Cancelled is the CallFailedError of a wait the invocation's cancellation
// interrupted.
func Cancelled() *CallFailedError {
	return &CallFailedError{Failure: Failure{Code: 409, Message: "cancelled"}}
}

// HandlerInfo describes the handler an attempt runs, for what the Server
// refuses before journaling: state outside virtual objects and workflows,
// state writes from shared handlers, promises outside workflows. The zero
// value is a handler of a plain service.
type HandlerInfo struct {
	// Name is "Service/handler", for messages.
	Name string
	// Keyed: a virtual object's or workflow's handler, which has state.
	Keyed bool
	// Workflow: a workflow's handler, which has promises.
	Workflow bool
	// Shared: a shared handler (shared: true in a virtual object, every
	// workflow handler but run): it reads state but cannot write it.
	Shared bool
	// Services are the services of this deployment by name, with their
	// type as the configuration spells it (service, virtual_object,
	// workflow): a call or send to one of them is refused when its key
	// does not fit (none for a keyed one, one for a plain one). Restate
	// would take the empty key for a missing one. Other services are
	// Restate's to check.
	Services map[string]string
	// Handlers are the handler names of each service in Services: a call
	// or send to a handler one of them lacks is refused (Restate would
	// fail the invocation and retry it until it paused, the function never
	// told). A service without an entry here is not checked.
	Handlers map[string][]string
}

// Future is a Journal's handle on a pending result (a run, timer or
// call). It is opaque to the Server, which only passes it back to the
// Journal that returned it.
type Future any

// ErrSuspended is returned by a Journal when the attempt must suspend: a
// wait did not complete within its budget, the suspension is (being) sent,
// and no more code of the attempt may run.
var ErrSuspended = errors.New("the invocation suspended")

// AwaitMode says what completes an Await.
type AwaitMode int

const (
	// AwaitAll waits for every future.
	AwaitAll AwaitMode = iota
	// AwaitAny waits for at least one future.
	AwaitAny
)

func (m AwaitMode) String() string {
	if m == AwaitAny {
		return "any"
	}
	return "all"
}

// Result is the result of a run, timer or call: a value or a terminal
// failure.
type Result struct {
	// Value is the raw bytes of the result (JSON for a Python step, the
	// exact stdout for a Bash step); empty for a timer.
	Value []byte
	// Failure, when set, is a terminal failure and Value is ignored.
	Failure *Failure
}

// Failure is a terminal failure: it is journaled and never retried.
type Failure struct {
	// Code is an HTTP-like status code; 0 reads as 500.
	Code uint16
	// Message is shown to the caller.
	Message string
}

// RunOutcome is how a run's closure ended.
type RunOutcome struct {
	// Result is journaled unless Retryable is set.
	Result Result
	// Retryable, when set, means the closure failed with a retryable
	// error: nothing is journaled and the attempt fails.
	Retryable *RetryableFailure
}

// RetryableFailure describes a closure failure that Restate retries.
type RetryableFailure struct {
	// Step is the step's name, set by the Server.
	Step    string
	Message string
}

// CallRequest is a call to another handler.
type CallRequest struct {
	Service string
	Handler string
	// Key is the virtual object or workflow key; empty for a service.
	Key            string
	IdempotencyKey string
	Headers        map[string]string
	// Input is the raw request body; may be empty.
	Input []byte
}

// SendRequest is a one-way call, optionally delayed.
type SendRequest struct {
	CallRequest
	// Delay postpones the callee's invocation; zero sends at once.
	Delay time.Duration
}
