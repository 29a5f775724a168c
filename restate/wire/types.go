package wire

import (
	"fmt"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"google.golang.org/protobuf/proto"
)

// MessageType is the 16-bit type id of a frame.
type MessageType uint16

// Message type ids, from the protocol's authoritative type table.
const (
	StartMessageType                   MessageType = 0x0000
	SuspensionMessageType              MessageType = 0x0001
	ErrorMessageType                   MessageType = 0x0002
	EndMessageType                     MessageType = 0x0003
	CommandAckMessageType              MessageType = 0x0004
	ProposeRunCompletionMessageType    MessageType = 0x0005
	AwaitingOnMessageType              MessageType = 0x0006
	ProposeRunCompletionAckMessageType MessageType = 0x0007

	InputCommandType               MessageType = 0x0400
	OutputCommandType              MessageType = 0x0401
	GetLazyStateCommandType        MessageType = 0x0402
	SetStateCommandType            MessageType = 0x0403
	ClearStateCommandType          MessageType = 0x0404
	ClearAllStateCommandType       MessageType = 0x0405
	GetLazyStateKeysCommandType    MessageType = 0x0406
	GetEagerStateCommandType       MessageType = 0x0407
	GetEagerStateKeysCommandType   MessageType = 0x0408
	GetPromiseCommandType          MessageType = 0x0409
	PeekPromiseCommandType         MessageType = 0x040A
	CompletePromiseCommandType     MessageType = 0x040B
	SleepCommandType               MessageType = 0x040C
	CallCommandType                MessageType = 0x040D
	OneWayCallCommandType          MessageType = 0x040E
	SendSignalCommandType          MessageType = 0x0410
	RunCommandType                 MessageType = 0x0411
	AttachInvocationCommandType    MessageType = 0x0412
	GetInvocationOutputCommandType MessageType = 0x0413
	CompleteAwakeableCommandType   MessageType = 0x0414

	GetLazyStateCompletionNotificationType        MessageType = 0x8002
	GetLazyStateKeysCompletionNotificationType    MessageType = 0x8006
	GetPromiseCompletionNotificationType          MessageType = 0x8009
	PeekPromiseCompletionNotificationType         MessageType = 0x800A
	CompletePromiseCompletionNotificationType     MessageType = 0x800B
	SleepCompletionNotificationType               MessageType = 0x800C
	CallCompletionNotificationType                MessageType = 0x800D
	CallInvocationIdCompletionNotificationType    MessageType = 0x800E
	RunCompletionNotificationType                 MessageType = 0x8011
	AttachInvocationCompletionNotificationType    MessageType = 0x8012
	GetInvocationOutputCompletionNotificationType MessageType = 0x8013
	SignalNotificationType                        MessageType = 0xFBFF
)

// Namespace is the partition of the type id space a type belongs to.
type Namespace uint8

// The four namespaces of the 16-bit type id.
const (
	// Control frames: 0x0000-0x03FF.
	Control Namespace = iota
	// Commands: 0x0400-0x7FFF.
	Command
	// Notifications: 0x8000-0xFBFF.
	Notification
	// Custom commands: 0xFC00-0xFFFF, opaque to the runtime and to us.
	Custom
)

func (n Namespace) String() string {
	switch n {
	case Control:
		return "control"
	case Command:
		return "command"
	case Notification:
		return "notification"
	default:
		return "custom"
	}
}

// Namespace classifies t by range alone, known id or not.
func (t MessageType) Namespace() Namespace {
	switch {
	case t < 0x0400:
		return Control
	case t < 0x8000:
		return Command
	case t < 0xFC00:
		return Notification
	default:
		return Custom
	}
}

// typeInfo is one row of the type table.
type typeInfo struct {
	name string
	new  func() proto.Message
}

// table maps every known id to its row. Custom ids are not listed: they
// are recognised by range.
var table = map[MessageType]typeInfo{
	StartMessageType:                   {"StartMessage", func() proto.Message { return new(servicev1.StartMessage) }},
	SuspensionMessageType:              {"SuspensionMessage", func() proto.Message { return new(servicev1.SuspensionMessage) }},
	ErrorMessageType:                   {"ErrorMessage", func() proto.Message { return new(servicev1.ErrorMessage) }},
	EndMessageType:                     {"EndMessage", func() proto.Message { return new(servicev1.EndMessage) }},
	CommandAckMessageType:              {"CommandAckMessage", func() proto.Message { return new(servicev1.CommandAckMessage) }},
	ProposeRunCompletionMessageType:    {"ProposeRunCompletionMessage", func() proto.Message { return new(servicev1.ProposeRunCompletionMessage) }},
	AwaitingOnMessageType:              {"AwaitingOnMessage", func() proto.Message { return new(servicev1.AwaitingOnMessage) }},
	ProposeRunCompletionAckMessageType: {"ProposeRunCompletionAckMessage", func() proto.Message { return new(servicev1.ProposeRunCompletionAckMessage) }},

	InputCommandType:               {"InputCommand", func() proto.Message { return new(servicev1.InputCommandMessage) }},
	OutputCommandType:              {"OutputCommand", func() proto.Message { return new(servicev1.OutputCommandMessage) }},
	GetLazyStateCommandType:        {"GetLazyStateCommand", func() proto.Message { return new(servicev1.GetLazyStateCommandMessage) }},
	SetStateCommandType:            {"SetStateCommand", func() proto.Message { return new(servicev1.SetStateCommandMessage) }},
	ClearStateCommandType:          {"ClearStateCommand", func() proto.Message { return new(servicev1.ClearStateCommandMessage) }},
	ClearAllStateCommandType:       {"ClearAllStateCommand", func() proto.Message { return new(servicev1.ClearAllStateCommandMessage) }},
	GetLazyStateKeysCommandType:    {"GetLazyStateKeysCommand", func() proto.Message { return new(servicev1.GetLazyStateKeysCommandMessage) }},
	GetEagerStateCommandType:       {"GetEagerStateCommand", func() proto.Message { return new(servicev1.GetEagerStateCommandMessage) }},
	GetEagerStateKeysCommandType:   {"GetEagerStateKeysCommand", func() proto.Message { return new(servicev1.GetEagerStateKeysCommandMessage) }},
	GetPromiseCommandType:          {"GetPromiseCommand", func() proto.Message { return new(servicev1.GetPromiseCommandMessage) }},
	PeekPromiseCommandType:         {"PeekPromiseCommand", func() proto.Message { return new(servicev1.PeekPromiseCommandMessage) }},
	CompletePromiseCommandType:     {"CompletePromiseCommand", func() proto.Message { return new(servicev1.CompletePromiseCommandMessage) }},
	SleepCommandType:               {"SleepCommand", func() proto.Message { return new(servicev1.SleepCommandMessage) }},
	CallCommandType:                {"CallCommand", func() proto.Message { return new(servicev1.CallCommandMessage) }},
	OneWayCallCommandType:          {"OneWayCallCommand", func() proto.Message { return new(servicev1.OneWayCallCommandMessage) }},
	SendSignalCommandType:          {"SendSignalCommand", func() proto.Message { return new(servicev1.SendSignalCommandMessage) }},
	RunCommandType:                 {"RunCommand", func() proto.Message { return new(servicev1.RunCommandMessage) }},
	AttachInvocationCommandType:    {"AttachInvocationCommand", func() proto.Message { return new(servicev1.AttachInvocationCommandMessage) }},
	GetInvocationOutputCommandType: {"GetInvocationOutputCommand", func() proto.Message { return new(servicev1.GetInvocationOutputCommandMessage) }},
	CompleteAwakeableCommandType:   {"CompleteAwakeableCommand", func() proto.Message { return new(servicev1.CompleteAwakeableCommandMessage) }},

	GetLazyStateCompletionNotificationType:        {"GetLazyStateCompletionNotification", func() proto.Message { return new(servicev1.GetLazyStateCompletionNotificationMessage) }},
	GetLazyStateKeysCompletionNotificationType:    {"GetLazyStateKeysCompletionNotification", func() proto.Message { return new(servicev1.GetLazyStateKeysCompletionNotificationMessage) }},
	GetPromiseCompletionNotificationType:          {"GetPromiseCompletionNotification", func() proto.Message { return new(servicev1.GetPromiseCompletionNotificationMessage) }},
	PeekPromiseCompletionNotificationType:         {"PeekPromiseCompletionNotification", func() proto.Message { return new(servicev1.PeekPromiseCompletionNotificationMessage) }},
	CompletePromiseCompletionNotificationType:     {"CompletePromiseCompletionNotification", func() proto.Message { return new(servicev1.CompletePromiseCompletionNotificationMessage) }},
	SleepCompletionNotificationType:               {"SleepCompletionNotification", func() proto.Message { return new(servicev1.SleepCompletionNotificationMessage) }},
	CallCompletionNotificationType:                {"CallCompletionNotification", func() proto.Message { return new(servicev1.CallCompletionNotificationMessage) }},
	CallInvocationIdCompletionNotificationType:    {"CallInvocationIdCompletionNotification", func() proto.Message { return new(servicev1.CallInvocationIdCompletionNotificationMessage) }},
	RunCompletionNotificationType:                 {"RunCompletionNotification", func() proto.Message { return new(servicev1.RunCompletionNotificationMessage) }},
	AttachInvocationCompletionNotificationType:    {"AttachInvocationCompletionNotification", func() proto.Message { return new(servicev1.AttachInvocationCompletionNotificationMessage) }},
	GetInvocationOutputCompletionNotificationType: {"GetInvocationOutputCompletionNotification", func() proto.Message { return new(servicev1.GetInvocationOutputCompletionNotificationMessage) }},
	SignalNotificationType:                        {"SignalNotification", func() proto.Message { return new(servicev1.SignalNotificationMessage) }},
}

// Known reports whether t is a listed type id or a custom command id.
func (t MessageType) Known() bool {
	if t.Namespace() == Custom {
		return true
	}
	_, ok := table[t]
	return ok
}

// String names t, e.g. "RunCommand", "Custom(0xfc01)" or "Unknown(0x0123)".
func (t MessageType) String() string {
	if info, ok := table[t]; ok {
		return info.name
	}
	if t.Namespace() == Custom {
		return fmt.Sprintf("Custom(%#04x)", uint16(t))
	}
	return fmt.Sprintf("Unknown(%#04x)", uint16(t))
}

// New returns an empty proto message for t, or nil for custom and unknown
// ids (custom commands are opaque: see CustomEntry).
func (t MessageType) New() proto.Message {
	if info, ok := table[t]; ok {
		return info.new()
	}
	return nil
}

// CustomEntry is a decoded custom command (0xFC00-0xFFFF): the runtime
// persists and replays it without interpreting the payload, and so do we.
type CustomEntry struct {
	Type    MessageType
	Payload []byte
}

// TypeOf returns the type id of a generated protocol message, and false for
// a message that has no frame of its own (e.g. Failure).
func TypeOf(m proto.Message) (MessageType, bool) {
	switch m.(type) {
	case *servicev1.StartMessage:
		return StartMessageType, true
	case *servicev1.SuspensionMessage:
		return SuspensionMessageType, true
	case *servicev1.ErrorMessage:
		return ErrorMessageType, true
	case *servicev1.EndMessage:
		return EndMessageType, true
	case *servicev1.CommandAckMessage:
		return CommandAckMessageType, true
	case *servicev1.ProposeRunCompletionMessage:
		return ProposeRunCompletionMessageType, true
	case *servicev1.AwaitingOnMessage:
		return AwaitingOnMessageType, true
	case *servicev1.ProposeRunCompletionAckMessage:
		return ProposeRunCompletionAckMessageType, true
	case *servicev1.InputCommandMessage:
		return InputCommandType, true
	case *servicev1.OutputCommandMessage:
		return OutputCommandType, true
	case *servicev1.GetLazyStateCommandMessage:
		return GetLazyStateCommandType, true
	case *servicev1.SetStateCommandMessage:
		return SetStateCommandType, true
	case *servicev1.ClearStateCommandMessage:
		return ClearStateCommandType, true
	case *servicev1.ClearAllStateCommandMessage:
		return ClearAllStateCommandType, true
	case *servicev1.GetLazyStateKeysCommandMessage:
		return GetLazyStateKeysCommandType, true
	case *servicev1.GetEagerStateCommandMessage:
		return GetEagerStateCommandType, true
	case *servicev1.GetEagerStateKeysCommandMessage:
		return GetEagerStateKeysCommandType, true
	case *servicev1.GetPromiseCommandMessage:
		return GetPromiseCommandType, true
	case *servicev1.PeekPromiseCommandMessage:
		return PeekPromiseCommandType, true
	case *servicev1.CompletePromiseCommandMessage:
		return CompletePromiseCommandType, true
	case *servicev1.SleepCommandMessage:
		return SleepCommandType, true
	case *servicev1.CallCommandMessage:
		return CallCommandType, true
	case *servicev1.OneWayCallCommandMessage:
		return OneWayCallCommandType, true
	case *servicev1.SendSignalCommandMessage:
		return SendSignalCommandType, true
	case *servicev1.RunCommandMessage:
		return RunCommandType, true
	case *servicev1.AttachInvocationCommandMessage:
		return AttachInvocationCommandType, true
	case *servicev1.GetInvocationOutputCommandMessage:
		return GetInvocationOutputCommandType, true
	case *servicev1.CompleteAwakeableCommandMessage:
		return CompleteAwakeableCommandType, true
	case *servicev1.GetLazyStateCompletionNotificationMessage:
		return GetLazyStateCompletionNotificationType, true
	case *servicev1.GetLazyStateKeysCompletionNotificationMessage:
		return GetLazyStateKeysCompletionNotificationType, true
	case *servicev1.GetPromiseCompletionNotificationMessage:
		return GetPromiseCompletionNotificationType, true
	case *servicev1.PeekPromiseCompletionNotificationMessage:
		return PeekPromiseCompletionNotificationType, true
	case *servicev1.CompletePromiseCompletionNotificationMessage:
		return CompletePromiseCompletionNotificationType, true
	case *servicev1.SleepCompletionNotificationMessage:
		return SleepCompletionNotificationType, true
	case *servicev1.CallCompletionNotificationMessage:
		return CallCompletionNotificationType, true
	case *servicev1.CallInvocationIdCompletionNotificationMessage:
		return CallInvocationIdCompletionNotificationType, true
	case *servicev1.RunCompletionNotificationMessage:
		return RunCompletionNotificationType, true
	case *servicev1.AttachInvocationCompletionNotificationMessage:
		return AttachInvocationCompletionNotificationType, true
	case *servicev1.GetInvocationOutputCompletionNotificationMessage:
		return GetInvocationOutputCompletionNotificationType, true
	case *servicev1.SignalNotificationMessage:
		return SignalNotificationType, true
	}
	return 0, false
}
