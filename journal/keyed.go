package journal

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// Signals, awakeables, workflow promises and cancelling other
// invocations: the journal operations of keyed services and awakeables.

// firstAwakeableSignal is the signal index of an invocation's first
// awakeable: 1 to 16 are the runtime's built-in signals (BuiltInSignal).
const firstAwakeableSignal = 17

// AwakeableIDPrefix starts every awakeable id. The specification's text
// names prom_1, but that is the id of journals before protocol v4, which
// restate-server completes as an entry of the old journal; for protocols
// v4 and later (all this endpoint speaks) it resolves only sign_1 ids as
// the signal they name, as SDKs of these versions do.
const AwakeableIDPrefix = "sign_1"

// AwakeableID is the id of the awakeable with signal index idx of the
// invocation whose StartMessage.id is invocationID: the prefix and the
// unpadded base64url of the id followed by idx as a 32-bit big-endian
// integer.
func AwakeableID(invocationID []byte, idx uint32) string {
	b := binary.BigEndian.AppendUint32(append([]byte(nil), invocationID...), idx)
	return AwakeableIDPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// Awakeable creates the invocation's next awakeable: its id, to hand to
// whoever completes it, and the Handle of the signal that completes it.
// It journals nothing: the signal index is the count of awakeables
// created before, so each attempt that replays the same code gets the same
// ids.
func (m *Machine) Awakeable() (id string, h Handle, err error) {
	switch m.phase {
	case closed:
		return "", 0, ErrClosed
	case processing:
	default:
		return "", 0, errNotReady
	}
	idx := m.nextSignal
	m.nextSignal++
	return AwakeableID(m.start.GetId(), idx), SignalHandle(idx), nil
}

// CompleteAwakeable resolves (res.Value) or rejects (res.Failure) the
// awakeable id of any invocation with a CompleteAwakeableCommand. A
// replayed one must name the same awakeable.
func (m *Machine) CompleteAwakeable(id string, res Result) error {
	i, c, err := m.nextCommand()
	if err != nil {
		return err
	}
	issued := fmt.Sprintf("%s of awakeable %q", wire.CompleteAwakeableCommandType, id)
	if c != nil {
		msg, ok := c.msg.(*servicev1.CompleteAwakeableCommandMessage)
		if !ok || msg.GetAwakeableId() != id {
			return m.mismatchIssued(i, c, issued)
		}
		if d := resultDiff(msg.GetValue(), msg.GetFailure(), res); d != "" {
			return m.mismatchIssued(i, c, issued+" with another result ("+d+")")
		}
		return nil
	}
	msg := &servicev1.CompleteAwakeableCommandMessage{AwakeableId: id}
	if res.Failure != nil {
		msg.Result = &servicev1.CompleteAwakeableCommandMessage_Failure{Failure: failureTo(res.Failure)}
	} else {
		msg.Result = &servicev1.CompleteAwakeableCommandMessage_Value{Value: &servicev1.Value{Content: res.Value}}
	}
	m.emit(wire.CompleteAwakeableCommandType, 0, msg)
	return nil
}

// CancelInvocation sends the built-in CANCEL signal to the invocation
// target (SendSignalCommand, signal index 1, void). A replayed one must
// target the same invocation.
func (m *Machine) CancelInvocation(target string) error {
	i, c, err := m.nextCommand()
	if err != nil {
		return err
	}
	issued := fmt.Sprintf("%s CANCEL to %s", wire.SendSignalCommandType, target)
	if c != nil {
		msg, ok := c.msg.(*servicev1.SendSignalCommandMessage)
		if !ok || msg.GetTargetInvocationId() != target || msg.GetIdx() != cancelSignal {
			return m.mismatchIssued(i, c, issued)
		}
		return nil
	}
	m.emit(wire.SendSignalCommandType, 0, &servicev1.SendSignalCommandMessage{TargetInvocationId: target,
		SignalId: &servicev1.SendSignalCommandMessage_Idx{Idx: cancelSignal},
		Result:   &servicev1.SendSignalCommandMessage_Void{Void: &servicev1.Void{}}})
	return nil
}

// promiseCommand is one of the three workflow promise commands.
type promiseCommand struct {
	typ, notif wire.MessageType
	verb       string
}

var (
	getPromise      = promiseCommand{wire.GetPromiseCommandType, wire.GetPromiseCompletionNotificationType, "awaited"}
	peekPromise     = promiseCommand{wire.PeekPromiseCommandType, wire.PeekPromiseCompletionNotificationType, "peeked at"}
	completePromise = promiseCommand{wire.CompletePromiseCommandType, wire.CompletePromiseCompletionNotificationType, "completed"}
)

// promise issues (or replays) promise command pc on the promise named
// name; build makes the new command for completion id, and same (when
// set) tells why a replayed command differs from it ("" when it does not).
func (m *Machine) promise(pc promiseCommand, name string, build func(id uint32) proto.Message, same func(any) string) (uint32, error) {
	i, c, err := m.nextCommand()
	if err != nil {
		return 0, err
	}
	if c != nil {
		key, id, ok := "", uint32(0), false
		switch msg := c.msg.(type) {
		case *servicev1.GetPromiseCommandMessage:
			key, id, ok = msg.GetKey(), msg.GetResultCompletionId(), c.typ == pc.typ
		case *servicev1.PeekPromiseCommandMessage:
			key, id, ok = msg.GetKey(), msg.GetResultCompletionId(), c.typ == pc.typ
		case *servicev1.CompletePromiseCommandMessage:
			key, id, ok = msg.GetKey(), msg.GetResultCompletionId(), c.typ == pc.typ
		}
		if !ok || key != name {
			return 0, m.mismatchIssued(i, c, fmt.Sprintf("%s of promise %q (the handler %s it)", pc.typ, name, pc.verb))
		}
		if same != nil {
			if d := same(c.msg); d != "" {
				return 0, m.mismatchIssued(i, c, fmt.Sprintf("%s of promise %q with another result (%s)", pc.typ, name, d))
			}
		}
		m.bump(id)
		return id, nil
	}
	id, err := m.newCompletion(i, pc.typ, pc.notif)
	if err != nil {
		return 0, err
	}
	m.emit(pc.typ, 0, build(id))
	return id, nil
}

// GetPromise awaits the workflow promise name: GetPromiseCommand, whose
// completion (value or failure) arrives once the promise is resolved or
// rejected. It returns the completion id to await.
func (m *Machine) GetPromise(name string) (uint32, error) {
	return m.promise(getPromise, name, func(id uint32) proto.Message {
		return &servicev1.GetPromiseCommandMessage{Key: name, ResultCompletionId: id}
	}, nil)
}

// PeekPromise reads the workflow promise name without waiting for it:
// PeekPromiseCommand, completed with void while it is unresolved, or its
// value or failure.
func (m *Machine) PeekPromise(name string) (uint32, error) {
	return m.promise(peekPromise, name, func(id uint32) proto.Message {
		return &servicev1.PeekPromiseCommandMessage{Key: name, ResultCompletionId: id}
	}, nil)
}

// CompletePromise resolves (res.Value) or rejects (res.Failure) the
// workflow promise name: CompletePromiseCommand, completed with void, or a
// failure when the promise was completed already.
func (m *Machine) CompletePromise(name string, res Result) (uint32, error) {
	return m.promise(completePromise, name, func(id uint32) proto.Message {
		msg := &servicev1.CompletePromiseCommandMessage{Key: name, ResultCompletionId: id}
		if res.Failure != nil {
			msg.Completion = &servicev1.CompletePromiseCommandMessage_CompletionFailure{CompletionFailure: failureTo(res.Failure)}
		} else {
			msg.Completion = &servicev1.CompletePromiseCommandMessage_CompletionValue{CompletionValue: &servicev1.Value{Content: res.Value}}
		}
		return msg
	}, func(recorded any) string {
		cm := recorded.(*servicev1.CompletePromiseCommandMessage)
		return resultDiff(cm.GetCompletionValue(), cm.GetCompletionFailure(), res)
	})
}

// resultDiff says how a journaled value or failure differs from res, ""
// when it does not: a replayed completion must complete the same way, as
// the SDKs check.
func resultDiff(v *servicev1.Value, f *servicev1.Failure, res Result) string {
	switch {
	case f != nil && res.Failure == nil:
		return "the journal rejected it, the handler resolved it"
	case f == nil && res.Failure != nil:
		return "the journal resolved it, the handler rejected it"
	case f != nil:
		if f.GetCode() != uint32(res.Failure.Code) || f.GetMessage() != res.Failure.Message {
			return fmt.Sprintf("the journal's failure is %d %q, the handler's %d %q", f.GetCode(), f.GetMessage(), res.Failure.Code, res.Failure.Message)
		}
		return ""
	case !bytes.Equal(v.GetContent(), res.Value):
		return valueDiff(v.GetContent(), res.Value)
	}
	return ""
}

// valueDiff describes two different values briefly. Past 64 bytes it
// quotes both around the first byte that differs, so two long values that
// share their start do not read the same.
func valueDiff(journaled, issued []byte) string {
	if len(journaled) <= 64 && len(issued) <= 64 {
		return fmt.Sprintf("the journal's value is %s, the handler's %s", brief(journaled), brief(issued))
	}
	at := 0
	for at < len(journaled) && at < len(issued) && journaled[at] == issued[at] {
		at++
	}
	from := max(at-16, 0)
	window := func(b []byte) string {
		return fmt.Sprintf("%q", b[min(from, len(b)):min(from+64, len(b))])
	}
	return fmt.Sprintf("the values differ from byte %d: the journal's (%d bytes) has %s there, the handler's (%d bytes) %s",
		at, len(journaled), window(journaled), len(issued), window(issued))
}

// brief quotes a value, cut at 64 bytes.
func brief(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%q... (%d bytes)", b[:64], len(b))
	}
	return fmt.Sprintf("%q", b)
}
