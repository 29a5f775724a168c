package journal

import (
	"unicode/utf8"

	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// Hand-written encoders for the frames every successful run-and-return
// invocation emits (RunCommand, a value ProposeRunCompletion, a value
// OutputCommand, EndMessage). They produce exactly the bytes the
// generated code does (fields in number order, proto3 defaults omitted,
// a set oneof always present) without its reflective size pass; other
// frames, and names that are not valid UTF-8 (which the generated code
// rejects), still go through emit.

// beginFrame appends a frame header placeholder and returns where the
// frame starts.
func (m *Machine) beginFrame() int {
	start := len(m.out)
	m.out = append(m.out, 0, 0, 0, 0, 0, 0, 0, 0)
	return start
}

// endFrame fills in the header of the frame that starts at start.
func (m *Machine) endFrame(start int, t wire.MessageType, flags uint16) {
	n := len(m.out) - start - wire.HeaderSize
	wire.PutHeader(m.out[start:], wire.Header{Type: t, Flags: flags, Length: uint32(n)})
	m.checkSize(start, t)
}

// emitRunCommand emits RunCommandMessage{result_completion_id: id, name}.
func (m *Machine) emitRunCommand(id uint32, name string) {
	if !utf8.ValidString(name) {
		m.emitRunCommandProto(id, name)
		return
	}
	start := m.beginFrame()
	b := m.out
	if id != 0 {
		b = protowire.AppendTag(b, 11, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(id))
	}
	if name != "" {
		b = protowire.AppendTag(b, 12, protowire.BytesType)
		b = protowire.AppendString(b, name)
	}
	m.out = b
	m.endFrame(start, wire.RunCommandType, 0)
}

// emitProposeValue emits ProposeRunCompletionMessage{result_completion_id:
// id, value: v}; the oneof value is present even when empty.
func (m *Machine) emitProposeValue(id uint32, flags uint16, v []byte) {
	start := m.beginFrame()
	b := m.out
	if id != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(id))
	}
	b = protowire.AppendTag(b, 14, protowire.BytesType)
	b = protowire.AppendBytes(b, v)
	m.out = b
	m.endFrame(start, wire.ProposeRunCompletionMessageType, flags)
}

// emitOutputValue emits OutputCommandMessage{value: Value{content: v}}.
func (m *Machine) emitOutputValue(v []byte) {
	start := m.beginFrame()
	b := protowire.AppendTag(m.out, 14, protowire.BytesType)
	if len(v) == 0 {
		b = protowire.AppendVarint(b, 0)
	} else {
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(v))))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	m.out = b
	m.endFrame(start, wire.OutputCommandType, 0)
}

// emitEnd emits the empty EndMessage.
func (m *Machine) emitEnd() {
	m.endFrame(m.beginFrame(), wire.EndMessageType, 0)
}
