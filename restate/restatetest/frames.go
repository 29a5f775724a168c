package restatetest

import (
	"bytes"
	"fmt"
	"io"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// Frame is one decoded protocol frame.
type Frame struct {
	Header wire.Header
	// Message is the generated proto message, or *wire.CustomEntry.
	Message any
}

// Type is the frame's message type.
func (f Frame) Type() wire.MessageType { return f.Header.Type }

func (f Frame) String() string {
	if m, ok := f.Message.(proto.Message); ok {
		return fmt.Sprintf("%s%s{%v}", f.Header.Type, ackMark(f.Header), m)
	}
	return fmt.Sprintf("%s%s", f.Header.Type, ackMark(f.Header))
}

func ackMark(h wire.Header) string {
	if h.RequestedAck() {
		return "[ack]"
	}
	return ""
}

// Out is a frame to send: a message and its header flags.
type Out struct {
	Flags   uint16
	Message proto.Message
}

// Encode concatenates frames for msgs (no flags); each element may also be
// an Out to set flags. It panics on a value that is not a protocol frame,
// which is a bug in the test that built it.
func Encode(msgs ...any) []byte {
	var b []byte
	for _, x := range msgs {
		var err error
		switch m := x.(type) {
		case Out:
			b, err = wire.AppendMessage(b, m.Flags, m.Message)
		case proto.Message:
			b, err = wire.AppendMessage(b, 0, m)
		case *wire.CustomEntry:
			b = append(b, make([]byte, wire.HeaderSize)...)
			wire.PutHeader(b[len(b)-wire.HeaderSize:], wire.Header{Type: m.Type, Length: uint32(len(m.Payload))})
			b = append(b, m.Payload...)
		default:
			err = fmt.Errorf("%T is not a frame", x)
		}
		if err != nil {
			panic(err)
		}
	}
	return b
}

// Decode parses a complete frame stream.
func Decode(stream []byte) ([]Frame, error) {
	r := wire.NewReader(bytes.NewReader(stream), 0)
	var out []Frame
	for {
		h, p, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		m, err := wire.Decode(h, p)
		if err != nil {
			return out, err
		}
		out = append(out, Frame{Header: h, Message: m})
	}
}

// Start builds a StartMessage for invocation id with knownEntries replayed
// entries following it.
func Start(id string, knownEntries uint32) *servicev1.StartMessage {
	return &servicev1.StartMessage{Id: []byte(id), DebugId: id, KnownEntries: knownEntries}
}

// Input builds the InputCommand carrying payload.
func Input(payload []byte) *servicev1.InputCommandMessage {
	return &servicev1.InputCommandMessage{Value: &servicev1.Value{Content: payload}}
}

// Run builds a replayed RunCommand.
func Run(completionID uint32, name string) *servicev1.RunCommandMessage {
	return &servicev1.RunCommandMessage{ResultCompletionId: completionID, Name: name}
}

// RunValue builds a RunCompletionNotification carrying value.
func RunValue(completionID uint32, value []byte) *servicev1.RunCompletionNotificationMessage {
	return &servicev1.RunCompletionNotificationMessage{CompletionId: completionID,
		Result: &servicev1.RunCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: value}}}
}

// RunFailure builds a RunCompletionNotification carrying a failure.
func RunFailure(completionID uint32, code uint32, message string) *servicev1.RunCompletionNotificationMessage {
	return &servicev1.RunCompletionNotificationMessage{CompletionId: completionID,
		Result: &servicev1.RunCompletionNotificationMessage_Failure{Failure: &servicev1.Failure{Code: code, Message: message}}}
}

// Cancel builds the built-in CANCEL signal notification.
func Cancel() *servicev1.SignalNotificationMessage {
	return &servicev1.SignalNotificationMessage{
		SignalId: &servicev1.SignalNotificationMessage_Idx{Idx: uint32(servicev1.BuiltInSignal_BUILT_IN_SIGNAL_CANCEL)},
		Result:   &servicev1.SignalNotificationMessage_Void{Void: &servicev1.Void{}},
	}
}

// Ack builds a ProposeRunCompletionAck.
func Ack(completionID uint32) *servicev1.ProposeRunCompletionAckMessage {
	return &servicev1.ProposeRunCompletionAckMessage{CompletionId: completionID}
}

// Answer returns what restate-server sends back for a run proposal: an ack
// when the proposal requested one, else the run's completion notification.
// ok is false for any other frame.
func Answer(f Frame) (proto.Message, bool) {
	p, isProposal := f.Message.(*servicev1.ProposeRunCompletionMessage)
	if !isProposal {
		return nil, false
	}
	if f.Header.RequestedAck() {
		return Ack(p.GetResultCompletionId()), true
	}
	n := &servicev1.RunCompletionNotificationMessage{CompletionId: p.GetResultCompletionId()}
	switch r := p.GetResult().(type) {
	case *servicev1.ProposeRunCompletionMessage_Value:
		n.Result = &servicev1.RunCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: r.Value}}
	case *servicev1.ProposeRunCompletionMessage_Failure:
		n.Result = &servicev1.RunCompletionNotificationMessage_Failure{Failure: r.Failure}
	}
	return n, true
}

// Terminal reports whether t ends a stream (End, Suspension or Error).
func Terminal(t wire.MessageType) bool {
	return t == wire.EndMessageType || t == wire.SuspensionMessageType || t == wire.ErrorMessageType
}
