package journal

import (
	"bytes"
	"strings"
	"testing"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// The hand-written encoders must produce exactly the frames the generated
// code does: restate-server decodes them with its own protobuf library, and
// the golden byte-stream tests pin the generated encoding.

var (
	encIDs    = []uint32{0, 1, 127, 128, 300, 1 << 31, ^uint32(0)}
	encNames  = []string{"", "run", "ünïcødé ✓", strings.Repeat("n", 200)}
	encValues = [][]byte{nil, {}, []byte(`{"n":1}`), bytes.Repeat([]byte{0xff}, 200), bytes.Repeat([]byte("x"), 20000)}
)

func protoFrame(t *testing.T, typ wire.MessageType, flags uint16, m proto.Message) []byte {
	t.Helper()
	b, err := wire.AppendFrame(nil, typ, flags, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHandEncodedRunCommandMatchesGenerated(t *testing.T) {
	for _, id := range encIDs {
		for _, name := range encNames {
			m := &Machine{}
			m.emitRunCommand(id, name)
			want := protoFrame(t, wire.RunCommandType, 0, &servicev1.RunCommandMessage{ResultCompletionId: id, Name: name})
			if !bytes.Equal(m.out, want) {
				t.Errorf("RunCommand(%d, %q):\n got %x\nwant %x", id, name, m.out, want)
			}
		}
	}
}

func TestHandEncodedRunCommandRejectsInvalidUTF8LikeGenerated(t *testing.T) {
	m, err := New(7)
	if err != nil {
		t.Fatal(err)
	}
	m.emitRunCommand(1, "bad\xff")
	if m.Failure() == nil || m.Failure().Code != CodeInternal || m.Terminal() != wire.ErrorMessageType {
		t.Fatalf("a run name that is not UTF-8 must fail the attempt with 500, got failure %v terminal %v", m.Failure(), m.Terminal())
	}
}

func TestHandEncodedProposeValueMatchesGenerated(t *testing.T) {
	for _, id := range encIDs {
		for _, v := range encValues {
			for _, flags := range []uint16{0, wire.FlagRequestedAck} {
				m := &Machine{}
				m.emitProposeValue(id, flags, v)
				pv := v
				if pv == nil {
					pv = []byte{}
				}
				want := protoFrame(t, wire.ProposeRunCompletionMessageType, flags, &servicev1.ProposeRunCompletionMessage{
					ResultCompletionId: id, Result: &servicev1.ProposeRunCompletionMessage_Value{Value: pv}})
				if !bytes.Equal(m.out, want) {
					t.Errorf("ProposeRunCompletion(%d, %d bytes, %#x):\n got %x\nwant %x", id, len(v), flags, m.out, want)
				}
			}
		}
	}
}

func TestHandEncodedOutputAndEndMatchGenerated(t *testing.T) {
	for _, v := range encValues {
		m := &Machine{}
		m.emitOutputValue(v)
		m.emitEnd()
		want := protoFrame(t, wire.OutputCommandType, 0, &servicev1.OutputCommandMessage{
			Result: &servicev1.OutputCommandMessage_Value{Value: &servicev1.Value{Content: v}}})
		want = append(want, protoFrame(t, wire.EndMessageType, 0, &servicev1.EndMessage{})...)
		if !bytes.Equal(m.out, want) {
			t.Errorf("Output(%d bytes)+End:\n got %x\nwant %x", len(v), m.out, want)
		}
	}
}
