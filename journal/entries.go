package journal

import (
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// Result variants a notification may carry.
const (
	rVoid = 1 << iota
	rValue
	rFailure
	rInvocationID
	rStateKeys
)

// allowedResults lists, per completion notification type, the result
// variants the protocol allows.
var allowedResults = map[wire.MessageType]uint8{
	wire.GetLazyStateCompletionNotificationType:        rVoid | rValue,
	wire.GetLazyStateKeysCompletionNotificationType:    rStateKeys,
	wire.GetPromiseCompletionNotificationType:          rValue | rFailure,
	wire.PeekPromiseCompletionNotificationType:         rVoid | rValue | rFailure,
	wire.CompletePromiseCompletionNotificationType:     rVoid | rFailure,
	wire.SleepCompletionNotificationType:               rVoid,
	wire.CallCompletionNotificationType:                rValue | rFailure,
	wire.CallInvocationIdCompletionNotificationType:    rInvocationID,
	wire.RunCompletionNotificationType:                 rValue | rFailure,
	wire.AttachInvocationCompletionNotificationType:    rValue | rFailure,
	wire.GetInvocationOutputCompletionNotificationType: rVoid | rValue | rFailure,
}

func failureTo(f *Failure) *servicev1.Failure {
	return &servicev1.Failure{Code: uint32(f.Code), Message: f.Message}
}

// commandName returns the entry name a command carries (field 12).
func commandName(m proto.Message) string {
	switch c := m.(type) {
	case *servicev1.InputCommandMessage:
		return c.GetName()
	case *servicev1.OutputCommandMessage:
		return c.GetName()
	case *servicev1.GetLazyStateCommandMessage:
		return c.GetName()
	case *servicev1.SetStateCommandMessage:
		return c.GetName()
	case *servicev1.ClearStateCommandMessage:
		return c.GetName()
	case *servicev1.ClearAllStateCommandMessage:
		return c.GetName()
	case *servicev1.GetLazyStateKeysCommandMessage:
		return c.GetName()
	case *servicev1.GetEagerStateCommandMessage:
		return c.GetName()
	case *servicev1.GetEagerStateKeysCommandMessage:
		return c.GetName()
	case *servicev1.GetPromiseCommandMessage:
		return c.GetName()
	case *servicev1.PeekPromiseCommandMessage:
		return c.GetName()
	case *servicev1.CompletePromiseCommandMessage:
		return c.GetName()
	case *servicev1.SleepCommandMessage:
		return c.GetName()
	case *servicev1.CallCommandMessage:
		return c.GetName()
	case *servicev1.OneWayCallCommandMessage:
		return c.GetName()
	case *servicev1.SendSignalCommandMessage:
		return c.GetEntryName()
	case *servicev1.RunCommandMessage:
		return c.GetName()
	case *servicev1.AttachInvocationCommandMessage:
		return c.GetName()
	case *servicev1.GetInvocationOutputCommandMessage:
		return c.GetName()
	case *servicev1.CompleteAwakeableCommandMessage:
		return c.GetName()
	}
	return ""
}

// completionIDs lists the completion ids a command allocates (at most
// two) and the notification type each must be completed by.
func completionIDs(m proto.Message) (ids [2]expectation, n int) {
	one := func(id uint32, t wire.MessageType) ([2]expectation, int) { return [2]expectation{{id, t}}, 1 }
	switch c := m.(type) {
	case *servicev1.GetLazyStateCommandMessage:
		return one(c.GetResultCompletionId(), wire.GetLazyStateCompletionNotificationType)
	case *servicev1.GetLazyStateKeysCommandMessage:
		return one(c.GetResultCompletionId(), wire.GetLazyStateKeysCompletionNotificationType)
	case *servicev1.GetPromiseCommandMessage:
		return one(c.GetResultCompletionId(), wire.GetPromiseCompletionNotificationType)
	case *servicev1.PeekPromiseCommandMessage:
		return one(c.GetResultCompletionId(), wire.PeekPromiseCompletionNotificationType)
	case *servicev1.CompletePromiseCommandMessage:
		return one(c.GetResultCompletionId(), wire.CompletePromiseCompletionNotificationType)
	case *servicev1.SleepCommandMessage:
		return one(c.GetResultCompletionId(), wire.SleepCompletionNotificationType)
	case *servicev1.CallCommandMessage:
		return [2]expectation{
			{c.GetInvocationIdNotificationIdx(), wire.CallInvocationIdCompletionNotificationType},
			{c.GetResultCompletionId(), wire.CallCompletionNotificationType},
		}, 2
	case *servicev1.OneWayCallCommandMessage:
		return one(c.GetInvocationIdNotificationIdx(), wire.CallInvocationIdCompletionNotificationType)
	case *servicev1.RunCommandMessage:
		return one(c.GetResultCompletionId(), wire.RunCompletionNotificationType)
	case *servicev1.AttachInvocationCommandMessage:
		return one(c.GetResultCompletionId(), wire.AttachInvocationCompletionNotificationType)
	case *servicev1.GetInvocationOutputCommandMessage:
		return one(c.GetResultCompletionId(), wire.GetInvocationOutputCompletionNotificationType)
	}
	return ids, 0
}
