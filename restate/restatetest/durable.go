package restatetest

import (
	"strconv"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"google.golang.org/protobuf/proto"
)

// Sleep builds a replayed SleepCommand.
func Sleep(completionID uint32, wakeUpMs uint64) *servicev1.SleepCommandMessage {
	return &servicev1.SleepCommandMessage{ResultCompletionId: completionID, WakeUpTime: wakeUpMs}
}

// SleepDone builds the SleepCompletionNotification of a timer.
func SleepDone(completionID uint32) *servicev1.SleepCompletionNotificationMessage {
	return &servicev1.SleepCompletionNotificationMessage{CompletionId: completionID, Void: &servicev1.Void{}}
}

// Call builds a replayed CallCommand to service/handler with parameter.
func Call(invocationIDCompletion, resultCompletion uint32, service, handler string, parameter []byte) *servicev1.CallCommandMessage {
	return &servicev1.CallCommandMessage{ServiceName: service, HandlerName: handler, Parameter: parameter,
		InvocationIdNotificationIdx: invocationIDCompletion, ResultCompletionId: resultCompletion}
}

// OneWayCall builds a replayed OneWayCallCommand to service/handler.
func OneWayCall(invocationIDCompletion uint32, service, handler string, parameter []byte) *servicev1.OneWayCallCommandMessage {
	return &servicev1.OneWayCallCommandMessage{ServiceName: service, HandlerName: handler, Parameter: parameter,
		InvocationIdNotificationIdx: invocationIDCompletion}
}

// CallValue builds a CallCompletionNotification carrying value.
func CallValue(completionID uint32, value []byte) *servicev1.CallCompletionNotificationMessage {
	return &servicev1.CallCompletionNotificationMessage{CompletionId: completionID,
		Result: &servicev1.CallCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: value}}}
}

// CallFailure builds a CallCompletionNotification carrying a failure.
func CallFailure(completionID uint32, code uint32, message string) *servicev1.CallCompletionNotificationMessage {
	return &servicev1.CallCompletionNotificationMessage{CompletionId: completionID,
		Result: &servicev1.CallCompletionNotificationMessage_Failure{Failure: &servicev1.Failure{Code: code, Message: message}}}
}

// InvocationID builds a CallInvocationIdCompletionNotification.
func InvocationID(completionID uint32, invocationID string) *servicev1.CallInvocationIdCompletionNotificationMessage {
	return &servicev1.CallInvocationIdCompletionNotificationMessage{CompletionId: completionID, InvocationId: invocationID}
}

// Completer answers timers and calls at once, as restate-server would once
// they are due: a SleepCommand with its completion, a CallCommand with the
// callee's invocation id and CallResult(command), a OneWayCallCommand with
// the callee's invocation id. Use its Complete as (part of) Play's inject.
type Completer struct {
	// CallResult is the callee's output; nil answers with its parameter.
	CallResult func(*servicev1.CallCommandMessage) []byte
	// InvocationID names the n-th callee (from 1); nil gives "inv_callee_<n>".
	InvocationID func(n int) string
	calls        int
}

// Complete returns the notifications restate-server sends for f.
func (c *Completer) Complete(f Frame) []proto.Message {
	callee := func() string {
		c.calls++
		if c.InvocationID != nil {
			return c.InvocationID(c.calls)
		}
		return "inv_callee_" + strconv.Itoa(c.calls)
	}
	switch m := f.Message.(type) {
	case *servicev1.SleepCommandMessage:
		return []proto.Message{SleepDone(m.GetResultCompletionId())}
	case *servicev1.CallCommandMessage:
		out := m.GetParameter()
		if c.CallResult != nil {
			out = c.CallResult(m)
		}
		return []proto.Message{InvocationID(m.GetInvocationIdNotificationIdx(), callee()), CallValue(m.GetResultCompletionId(), out)}
	case *servicev1.OneWayCallCommandMessage:
		return []proto.Message{InvocationID(m.GetInvocationIdNotificationIdx(), callee())}
	}
	return nil
}
