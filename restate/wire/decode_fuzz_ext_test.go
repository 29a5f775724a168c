package wire_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// FuzzDecodeMessage drives message decoding directly with any type id and
// payload: Decode never panics, an unknown id is an error, and a payload it
// accepts re-encodes (AppendFrame) into a frame that decodes to an equal
// message, so nothing Decode accepts is lost or altered on the way back.
func FuzzDecodeMessage(f *testing.F) {
	seed := func(m proto.Message) {
		t, _ := wire.TypeOf(m)
		b, _ := proto.Marshal(m)
		f.Add(uint16(t), b)
	}
	seed(&servicev1.StartMessage{Id: []byte("inv"), DebugId: "inv", KnownEntries: 2, PartialState: true,
		StateMap: []*servicev1.StartMessage_StateEntry{{Key: []byte("k"), Value: []byte("v")}}})
	seed(&servicev1.InputCommandMessage{Value: &servicev1.Value{Content: []byte(`{"a":1}`)}})
	seed(&servicev1.RunCommandMessage{ResultCompletionId: 1, Name: "invoke"})
	seed(&servicev1.ProposeRunCompletionMessage{ResultCompletionId: 1, Result: &servicev1.ProposeRunCompletionMessage_Value{Value: []byte("x")}})
	seed(&servicev1.ErrorMessage{Code: 571, Message: "bad"})
	f.Add(uint16(0x0777), []byte{1, 2, 3})
	f.Add(uint16(0xFC01), []byte("custom"))
	f.Add(uint16(0x0000), []byte{0xFF, 0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, typ uint16, payload []byte) {
		h := wire.Header{Type: wire.MessageType(typ), Length: uint32(len(payload))}
		m, err := wire.Decode(h, payload)
		if err != nil {
			return
		}
		if !h.Type.Known() && h.Type.Namespace() != wire.Custom {
			t.Fatalf("unknown type %#04x decoded to %T", typ, m)
		}
		pm, ok := m.(proto.Message)
		if !ok {
			ce, ok := m.(*wire.CustomEntry)
			if !ok || ce.Type != h.Type || string(ce.Payload) != string(payload) {
				t.Fatalf("type %#04x decoded to %#v", typ, m)
			}
			return
		}
		frame, err := wire.AppendFrame(nil, h.Type, 0, pm)
		if err != nil {
			t.Fatalf("re-encoding %T: %v", pm, err)
		}
		h2 := wire.ParseHeader(frame)
		if h2.Type != h.Type || int(h2.Length) != len(frame)-wire.HeaderSize {
			t.Fatalf("re-encoded header %+v for a %d-byte payload", h2, len(frame)-wire.HeaderSize)
		}
		m2, err := wire.Decode(h2, frame[wire.HeaderSize:])
		if err != nil {
			t.Fatalf("re-encoded %T does not decode: %v", pm, err)
		}
		if !proto.Equal(pm, m2.(proto.Message)) {
			t.Fatalf("round trip changed the message:\n%v\n%v", pm, m2)
		}
	})
}
