package wire_test

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// "Type (16 bits) ... A (1 bit, MSB of the flag block): REQUESTED_ACK ...
// Reserved flags (15 bits) ... Length (32 bits)".
func TestHeaderLayout(t *testing.T) {
	var b [8]byte
	wire.PutHeader(b[:], wire.Header{Type: wire.ProposeRunCompletionMessageType, Flags: wire.FlagRequestedAck, Length: 0x01020304})
	want := []byte{0x00, 0x05, 0x80, 0x00, 0x01, 0x02, 0x03, 0x04}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("header bytes % x, want % x", b, want)
	}
	h := wire.ParseHeader(b[:])
	if h.Type != wire.ProposeRunCompletionMessageType || !h.RequestedAck() || h.Length != 0x01020304 {
		t.Fatalf("parsed %+v", h)
	}
	if wire.ParseHeader([]byte{0xFB, 0xFF, 0x00, 0x00, 0, 0, 0, 0}).RequestedAck() {
		t.Fatal("REQUESTED_ACK read from a zero flag block")
	}
}

func TestHeaderCodecDoesNotAllocate(t *testing.T) {
	var b [8]byte
	allocs := testing.AllocsPerRun(100, func() {
		wire.PutHeader(b[:], wire.Header{Type: wire.RunCommandType, Length: 7})
		_ = wire.ParseHeader(b[:])
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per header encode+decode, want 0", allocs)
	}
}

func TestAppendFrameReusesCapacity(t *testing.T) {
	msg := &servicev1.RunCommandMessage{ResultCompletionId: 1, Name: "invoke"}
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = wire.AppendFrame(buf[:0], wire.RunCommandType, 0, msg)
		if err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per frame into a buffer with room, want 0", allocs)
	}
}

// "The 16-bit type field is partitioned into namespaces".
func TestTypeTable(t *testing.T) {
	cases := []struct {
		t    wire.MessageType
		ns   wire.Namespace
		name string
	}{
		{wire.StartMessageType, wire.Control, "StartMessage"},
		{wire.ProposeRunCompletionAckMessageType, wire.Control, "ProposeRunCompletionAckMessage"},
		{wire.InputCommandType, wire.Command, "InputCommand"},
		{wire.CompleteAwakeableCommandType, wire.Command, "CompleteAwakeableCommand"},
		{wire.RunCompletionNotificationType, wire.Notification, "RunCompletionNotification"},
		{wire.SignalNotificationType, wire.Notification, "SignalNotification"},
		{0xFC00, wire.Custom, "Custom(0xfc00)"},
		{0xFFFF, wire.Custom, "Custom(0xffff)"},
	}
	for _, c := range cases {
		if c.t.Namespace() != c.ns || c.t.String() != c.name || !c.t.Known() {
			t.Errorf("%#04x: namespace %s name %s known %v, want %s %s", uint16(c.t), c.t.Namespace(), c.t, c.t.Known(), c.ns, c.name)
		}
		if c.ns != wire.Custom {
			m := c.t.New()
			if got, ok := wire.TypeOf(m); !ok || got != c.t {
				t.Errorf("%s: factory/TypeOf round trip gave %s", c.t, got)
			}
		}
	}
	if wire.MessageType(0x0123).Known() || wire.MessageType(0x8001).Known() {
		t.Error("unlisted ids reported as known")
	}
}

func TestReaderHandlesPartialReads(t *testing.T) {
	var stream []byte
	stream, _ = wire.AppendMessage(stream, 0, &servicev1.StartMessage{DebugId: "inv", KnownEntries: 1})
	stream, _ = wire.AppendMessage(stream, 0, &servicev1.InputCommandMessage{Value: &servicev1.Value{Content: bytes.Repeat([]byte("x"), 1000)}})
	r := wire.NewReader(iotest.OneByteReader(bytes.NewReader(stream)), 0)
	for _, want := range []wire.MessageType{wire.StartMessageType, wire.InputCommandType} {
		h, p, err := r.Next()
		if err != nil || h.Type != want || int(h.Length) != len(p) {
			t.Fatalf("Next = %v %d %v, want %s", h.Type, len(p), err, want)
		}
		if _, err := wire.Decode(h, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

func TestReaderTruncatedFrame(t *testing.T) {
	stream, _ := wire.AppendMessage(nil, 0, &servicev1.StartMessage{DebugId: "inv"})
	r := wire.NewReader(bytes.NewReader(stream[:len(stream)-1]), 0)
	if _, _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated payload: %v, want io.ErrUnexpectedEOF", err)
	}
	r = wire.NewReader(bytes.NewReader(stream[:3]), 0)
	if _, _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated header: %v, want io.ErrUnexpectedEOF", err)
	}
}

// The size limit is enforced from the header, before the payload is read:
// a reader that would fail on any payload read proves nothing was read.
func TestReaderRejectsOversizeBeforeReading(t *testing.T) {
	hdr := make([]byte, 8)
	wire.PutHeader(hdr, wire.Header{Type: wire.InputCommandType, Length: 1 << 31})
	r := wire.NewReader(io.MultiReader(bytes.NewReader(hdr), iotest.ErrReader(errors.New("payload was read"))), 1024)
	_, p, err := r.Next()
	if !errors.Is(err, wire.ErrMessageTooLarge) || p != nil {
		t.Fatalf("Next = %d bytes, %v; want ErrMessageTooLarge", len(p), err)
	}
}

// A header is only a claim: a client that announces the largest frame the
// limit allows and then sends a few bytes (or nothing) must not make the
// endpoint allocate the announced size.
func TestReaderAllocatesWhatArrivesNotWhatIsAnnounced(t *testing.T) {
	hdr := make([]byte, 8)
	wire.PutHeader(hdr, wire.Header{Type: wire.InputCommandType, Length: wire.DefaultMaxMessageSize})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := wire.NewReader(io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(make([]byte, 10))), 0)
	if _, _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("announced 32 MiB, sent 10 bytes: %v, want io.ErrUnexpectedEOF", err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("a 32 MiB header with 10 bytes behind it allocated %d bytes", got)
	}
}

// Frames larger than the first buffer still arrive whole through short
// reads, and the grown buffer serves the frames after them.
func TestReaderLargeFramesThroughShortReads(t *testing.T) {
	var stream []byte
	var want [][]byte
	for _, n := range []int{3 << 20, 100, 5 << 20, 70 << 10} {
		content := bytes.Repeat([]byte{byte(n)}, n)
		want = append(want, content)
		stream, _ = wire.AppendMessage(stream, 0, &servicev1.InputCommandMessage{Value: &servicev1.Value{Content: content}})
	}
	r := wire.NewReader(iotest.HalfReader(bytes.NewReader(stream)), 0)
	for i, content := range want {
		h, p, err := r.Next()
		if err != nil || int(h.Length) != len(p) {
			t.Fatalf("frame %d: %d bytes, %v", i, len(p), err)
		}
		m, err := wire.Decode(h, p)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.(*servicev1.InputCommandMessage).GetValue().GetContent(); !bytes.Equal(got, content) {
			t.Fatalf("frame %d: content of %d bytes differs from the %d sent", i, len(got), len(content))
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

func TestDecodeCustomAndUnknown(t *testing.T) {
	m, err := wire.Decode(wire.Header{Type: 0xFC07, Length: 2}, []byte{1, 2})
	ce, ok := m.(*wire.CustomEntry)
	if err != nil || !ok || ce.Type != 0xFC07 || !bytes.Equal(ce.Payload, []byte{1, 2}) {
		t.Fatalf("custom: %v %v", m, err)
	}
	if _, err := wire.Decode(wire.Header{Type: 0x0123}, nil); err == nil {
		t.Fatal("unknown id decoded")
	}
	if _, err := wire.Decode(wire.Header{Type: wire.StartMessageType}, []byte{0xFF}); err == nil {
		t.Fatal("malformed payload decoded")
	}
}

// countingReader counts the Reads that reach the source.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// Small frames come through the read-ahead buffer: a stream whose frames
// arrive together (restate-server's StartMessage, input and the journal
// it replays) costs one Read of the source, not two per frame, since each
// Read of an HTTP/2 request body wakes the connection's goroutine.
func TestReaderReadsSmallFramesInOneRead(t *testing.T) {
	var stream []byte
	stream, _ = wire.AppendMessage(stream, 0, &servicev1.StartMessage{DebugId: "inv", KnownEntries: 2})
	stream, _ = wire.AppendMessage(stream, 0, &servicev1.InputCommandMessage{Value: &servicev1.Value{Content: []byte(`{"n":1}`)}})
	stream, _ = wire.AppendMessage(stream, 0, &servicev1.RunCommandMessage{Name: "invoke", ResultCompletionId: 1})
	src := &countingReader{r: bytes.NewReader(stream)}
	r := wire.NewReader(src, 0)
	for _, want := range []wire.MessageType{wire.StartMessageType, wire.InputCommandType, wire.RunCommandType} {
		h, p, err := r.Next()
		if err != nil || h.Type != want {
			t.Fatalf("Next = %v %v, want %s", h.Type, err, want)
		}
		if _, err := wire.Decode(h, p); err != nil {
			t.Fatal(err)
		}
	}
	if src.reads != 1 {
		t.Errorf("%d Reads of the source for three small frames, want 1", src.reads)
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

// A source that returns its last bytes together with an error: the frames
// in those bytes are delivered first, then the error, once.
func TestReaderDeliversBufferedFramesBeforeTheReadError(t *testing.T) {
	stream, _ := wire.AppendMessage(nil, 0, &servicev1.StartMessage{DebugId: "inv"})
	broken := errors.New("stream reset")
	r := wire.NewReader(iotest.DataErrReader(io.MultiReader(bytes.NewReader(stream), iotest.ErrReader(broken))), 0)
	if h, _, err := r.Next(); err != nil || h.Type != wire.StartMessageType {
		t.Fatalf("first frame: %v %v", h.Type, err)
	}
	if _, _, err := r.Next(); !errors.Is(err, broken) {
		t.Fatalf("after the frame: %v, want the source's error", err)
	}
}

// Reset drops what was read ahead from the old source: a frame of the
// previous stream never surfaces on the next one.
func TestReaderResetDropsReadAhead(t *testing.T) {
	var stream []byte
	stream, _ = wire.AppendMessage(stream, 0, &servicev1.StartMessage{DebugId: "old"})
	stream, _ = wire.AppendMessage(stream, 0, &servicev1.StartMessage{DebugId: "old, unread"})
	r := wire.NewReader(bytes.NewReader(stream), 0)
	if _, _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	next, _ := wire.AppendMessage(nil, 0, &servicev1.StartMessage{DebugId: "new"})
	r.Reset(bytes.NewReader(next))
	h, p, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.Decode(h, p)
	if err != nil {
		t.Fatal(err)
	}
	if id := m.(*servicev1.StartMessage).GetDebugId(); id != "new" {
		t.Fatalf("after Reset read %q, want the new stream's frame", id)
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}
