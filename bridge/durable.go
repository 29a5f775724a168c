package bridge

import (
	"context"
	"time"

	"github.com/fnbridge/fnbridge/restate"
)

// durableContext is the part of restate.Context a steps-mode handler
// drives: the durable-steps operations of one invocation attempt. The
// handler's assertion ctx.(durableContext) (stepsHandlerFunc) succeeds for
// the endpoint's Context; tests substitute fakes.
type durableContext interface {
	InvocationID() string
	RunStart(name string) (*rsOutcome, rsFuture, error)
	RunStartDone(name string) (*rsOutcome, rsFuture, error)
	RunCompleteContext(ctx context.Context, run rsFuture, out rsOutcome) error
	RunFail(run rsFuture, err *restate.RetryableError) error
	Sleep(d time.Duration) (rsFuture, error)
	Call(req rsCallRequest) (rsFuture, error)
	Send(req rsSendRequest) (invocationID string, err error)
	AwaitContext(ctx context.Context, futures []rsFuture, mode rsAwaitMode, suspendAfter time.Duration) ([]*rsOutcome, error)
	RandomSeed() uint64

	Key() string
	GetState(name string) (value []byte, found bool, err error)
	StateKeys() ([]string, error)
	SetState(name string, value []byte) error
	ClearState(name string) error
	ClearAllState() error
	Awakeable() (id string, f rsFuture, err error)
	CompleteAwakeable(id string, out rsOutcome) error
	Promise(name string) (rsFuture, error)
	PeekPromise(name string) (*rsOutcome, error)
	CompletePromise(name string, out rsOutcome) error
	CancelInvocation(invocationID string) error
}

var _ durableContext = restate.Context(nil)

type (
	rsFuture      = restate.Future
	rsAwaitMode   = restate.AwaitMode
	rsOutcome     = restate.Outcome
	rsCallRequest = restate.CallRequest
	rsSendRequest = restate.SendRequest
)

const (
	rsAwaitAll = restate.AwaitAll
	rsAwaitAny = restate.AwaitAny
)

var (
	errRestateSuspended = restate.ErrSuspended
	errRestateCancelled = restate.ErrCancelled
)
