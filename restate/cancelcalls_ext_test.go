package restate_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// callsThenWaits makes two calls and a one-way call, then waits on the
// second call; the cancellation it takes (DeliverCancel) ends it with 409.
func callsThenWaits(ctx restate.Context, _ []byte) ([]byte, error) {
	if _, err := ctx.Call(restate.CallRequest{Service: "Child", Handler: "a"}); err != nil {
		return nil, err
	}
	second, err := ctx.Call(restate.CallRequest{Service: "Child", Handler: "b"})
	if err != nil {
		return nil, err
	}
	if _, err := ctx.Send(restate.SendRequest{CallRequest: restate.CallRequest{Service: "Child", Handler: "c"}}); err != nil {
		return nil, err
	}
	_, err = ctx.Await([]restate.Future{second}, restate.AwaitAll, 20*time.Second)
	if errors.Is(err, restate.ErrCancelled) {
		return nil, &restate.TerminalError{Code: restate.CodeCancelled, Message: "cancelled"}
	}
	return nil, err
}

func cancelServer(t *testing.T) string {
	t.Helper()
	_, url := serveService(t, restate.BidiStream, restate.Service{Name: "D", Handlers: []restate.Handler{
		{Name: "calls", Fn: callsThenWaits, DeliverCancel: true}}})
	return url
}

// wantCancels checks that fs journal a CANCEL signal to each target, in
// order, and end with the 409 output.
func wantCancels(t *testing.T, fs []restatetest.Frame, targets ...string) {
	t.Helper()
	var got []string
	for _, f := range fs {
		if s, ok := restatetest.Message[*servicev1.SendSignalCommandMessage](f); ok {
			if s.GetIdx() != 1 {
				t.Fatalf("signal %v, want the built-in CANCEL (index 1)", s)
			}
			got = append(got, s.GetTargetInvocationId())
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(targets) {
		t.Fatalf("CANCEL sent to %v, want %v (frames %v)", got, targets, fs)
	}
	for _, f := range fs {
		if o, ok := restatetest.Message[*servicev1.OutputCommandMessage](f); ok {
			if o.GetFailure().GetCode() != uint32(restate.CodeCancelled) {
				t.Fatalf("output %v, want the 409 failure", o)
			}
			return
		}
	}
	t.Fatalf("no OutputCommand in %v", fs)
}

// A handler that takes its cancellation cancels the invocations it called
// (not its one-way calls), as the Restate SDKs do: first it has every
// callee's invocation id, then it journals one CANCEL signal per call.
// Here the runtime sends the CANCEL before the second callee's id.
func TestCancellationCancelsTheCalls(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			url := cancelServer(t)
			calls := 0
			inject := func(f restatetest.Frame) []proto.Message {
				switch m := f.Message.(type) {
				case *servicev1.CallCommandMessage:
					calls++
					if calls == 1 {
						return []proto.Message{restatetest.InvocationID(m.GetInvocationIdNotificationIdx(), "inv_child_a")}
					}
					// The second callee's id comes after the CANCEL.
					return []proto.Message{restatetest.Cancel(), restatetest.InvocationID(m.GetInvocationIdNotificationIdx(), "inv_child_b")}
				case *servicev1.OneWayCallCommandMessage:
					return []proto.Message{restatetest.InvocationID(m.GetInvocationIdNotificationIdx(), "inv_child_c")}
				}
				return nil
			}
			got := playSteps(t, url, v, "calls", []any{restatetest.Start("inv_parent", 1), restatetest.Input(nil)}, inject)
			wantCancels(t, got, "inv_child_a", "inv_child_b")
		})
	}
}

// On replay the same CANCEL signals are matched, not sent again; a
// journal that recorded the CANCEL but not yet the signals (the attempt
// ended while it waited for a callee's id) gets them now.
func TestCancellationOfCallsReplays(t *testing.T) {
	prefix := []any{restatetest.Input(nil),
		&servicev1.CallCommandMessage{ServiceName: "Child", HandlerName: "a", InvocationIdNotificationIdx: 1, ResultCompletionId: 2},
		restatetest.InvocationID(1, "inv_child_a"),
		&servicev1.CallCommandMessage{ServiceName: "Child", HandlerName: "b", InvocationIdNotificationIdx: 3, ResultCompletionId: 4},
		restatetest.OneWayCall(5, "Child", "c", nil), restatetest.InvocationID(5, "inv_child_c"),
		restatetest.Cancel(), restatetest.InvocationID(3, "inv_child_b"),
	}
	signal := func(target string) *servicev1.SendSignalCommandMessage {
		return &servicev1.SendSignalCommandMessage{TargetInvocationId: target,
			SignalId: &servicev1.SendSignalCommandMessage_Idx{Idx: 1},
			Result:   &servicev1.SendSignalCommandMessage_Void{Void: &servicev1.Void{}}}
	}
	for _, v := range versions {
		for name, journal := range map[string][]any{
			"signals recorded": append(append([]any(nil), prefix...), signal("inv_child_a"), signal("inv_child_b")),
			"signals not yet":  prefix,
		} {
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				url := cancelServer(t)
				start := append([]any{restatetest.Start("inv_parent", uint32(len(journal)))}, journal...)
				got := playSteps(t, url, v, "calls", start, nil)
				if name == "signals recorded" {
					wantFrameTypes(t, got, wire.OutputCommandType, wire.EndMessageType)
					return
				}
				wantFrameTypes(t, got, wire.SendSignalCommandType, wire.SendSignalCommandType, wire.OutputCommandType, wire.EndMessageType)
				wantCancels(t, got, "inv_child_a", "inv_child_b")
			})
		}
	}
}

// callThenFails calls Child/a and fails retryably without a wait: a step
// that failed, a worker that crashed.
func callThenFails(ctx restate.Context, _ []byte) ([]byte, error) {
	if _, err := ctx.Call(restate.CallRequest{Service: "Child", Handler: "a"}); err != nil {
		return nil, err
	}
	return nil, &restate.RetryableError{Message: "the step failed"}
}

// A handler that fails after Restate's CANCEL arrived, without a wait that
// took it, ends cancelled (409), and the invocations it called are
// cancelled first, as when a wait takes the CANCEL: it used to end with
// 409 and leave them running.
func TestCancellationCancelsTheCallsOfAFailedHandler(t *testing.T) {
	_, url := serveService(t, restate.BidiStream, restate.Service{Name: "D", Handlers: []restate.Handler{
		{Name: "calls", Fn: callThenFails, DeliverCancel: true}}})
	journal := []any{restatetest.Input(nil),
		&servicev1.CallCommandMessage{ServiceName: "Child", HandlerName: "a", InvocationIdNotificationIdx: 1, ResultCompletionId: 2},
		restatetest.InvocationID(1, "inv_child_a"), restatetest.Cancel(),
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			start := append([]any{restatetest.Start("inv_parent", uint32(len(journal)))}, journal...)
			got := playSteps(t, url, v, "calls", start, nil)
			wantFrameTypes(t, got, wire.SendSignalCommandType, wire.OutputCommandType, wire.EndMessageType)
			wantCancels(t, got, "inv_child_a")
		})
	}
}
