package bridge

import (
	"errors"
	"time"

	"github.com/fnbridge/fnbridge/restate"
)

// durableContext is the part of restate.Context a steps-mode handler
// drives: the durable-steps operations of one invocation attempt.
//
// Until package restate has that API, the types below stand in for its
// own. Wiring it is this block alone: each type becomes an alias
// (rsFuture = restate.Future, rsOutcome = restate.Outcome, rsAwaitMode =
// restate.AwaitMode, rsCallRequest = restate.CallRequest, rsSendRequest
// = restate.SendRequest), the constants restate.AwaitAll/AwaitAny and
// errRestateSuspended restate.ErrSuspended. The handler's assertion
// ctx.(durableContext) (stepsHandlerFunc) then succeeds; until then it
// fails and a steps-mode invocation pauses with a clear error.
type durableContext interface {
	InvocationID() string
	RunStart(name string) (*rsOutcome, rsFuture, error)
	RunComplete(run rsFuture, out rsOutcome) error
	Sleep(d time.Duration) (rsFuture, error)
	Call(req rsCallRequest) (rsFuture, error)
	Send(req rsSendRequest) (invocationID string, err error)
	Await(futures []rsFuture, mode rsAwaitMode, suspendAfter time.Duration) ([]*rsOutcome, error)
	RandomSeed() uint64
}

type (
	rsFuture    any
	rsAwaitMode int
	rsOutcome   struct {
		Value   []byte
		Failure *restate.TerminalError
	}
	rsCallRequest struct {
		Service, Handler, Key, IdempotencyKey string
		Headers                               map[string]string
		Input                                 []byte
	}
	rsSendRequest struct {
		rsCallRequest
		Delay time.Duration
	}
)

const (
	rsAwaitAll rsAwaitMode = iota
	rsAwaitAny
)

var errRestateSuspended = errors.New("restate: the invocation suspended")
