package journal_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/fnbridge/fnbridge/journal"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

var versions = []int{5, 6, 7}

// feed sends runtime messages to m, failing the test on encoding errors.
// It returns the last Receive error.
func feed(t *testing.T, m *journal.Machine, msgs ...proto.Message) error {
	t.Helper()
	var last error
	for _, msg := range msgs {
		b, err := wire.AppendMessage(nil, 0, msg)
		if err != nil {
			t.Fatal(err)
		}
		last = m.Receive(wire.ParseHeader(b), b[wire.HeaderSize:])
	}
	return last
}

type frame struct {
	h   wire.Header
	msg any
}

// drain decodes everything m emitted so far.
func drain(t *testing.T, m *journal.Machine) []frame {
	t.Helper()
	out := m.TakeOutput(nil)
	r := wire.NewReader(bytes.NewReader(out), 0)
	var fs []frame
	for {
		h, p, err := r.Next()
		if err == io.EOF {
			return fs
		}
		if err != nil {
			t.Fatalf("machine emitted a malformed stream: %v", err)
		}
		msg, err := wire.Decode(h, p)
		if err != nil {
			t.Fatalf("machine emitted an undecodable %s: %v", h.Type, err)
		}
		fs = append(fs, frame{h, msg})
	}
}

func types(fs []frame) []wire.MessageType {
	out := make([]wire.MessageType, len(fs))
	for i, f := range fs {
		out[i] = f.h.Type
	}
	return out
}

func wantTypes(t *testing.T, fs []frame, want ...wire.MessageType) {
	t.Helper()
	got := types(fs)
	if len(got) != len(want) {
		t.Fatalf("emitted %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("emitted %v, want %v", got, want)
		}
	}
}

func newMachine(t *testing.T, v int) *journal.Machine {
	t.Helper()
	m, err := journal.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// started returns a machine that received Start and the given journal.
func started(t *testing.T, v int, entries ...proto.Message) *journal.Machine {
	t.Helper()
	m := newMachine(t, v)
	all := append([]proto.Message{&servicev1.StartMessage{Id: []byte("id"), DebugId: "inv_1", KnownEntries: uint32(len(entries))}}, entries...)
	if err := feed(t, m, all...); err != nil {
		t.Fatalf("bootstrapping: %v", err)
	}
	if !m.Ready() {
		t.Fatal("machine not ready after Start and all known entries")
	}
	return m
}

func input(p string) *servicev1.InputCommandMessage {
	return &servicev1.InputCommandMessage{Value: &servicev1.Value{Content: []byte(p)}}
}

func runCmd(id uint32, name string) *servicev1.RunCommandMessage {
	return &servicev1.RunCommandMessage{ResultCompletionId: id, Name: name}
}

func runDone(id uint32, v string) *servicev1.RunCompletionNotificationMessage {
	return &servicev1.RunCompletionNotificationMessage{CompletionId: id, Result: &servicev1.RunCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: []byte(v)}}}
}

func runFailed(id uint32, code uint32, msg string) *servicev1.RunCompletionNotificationMessage {
	return &servicev1.RunCompletionNotificationMessage{CompletionId: id, Result: &servicev1.RunCompletionNotificationMessage_Failure{Failure: &servicev1.Failure{Code: code, Message: msg}}}
}

func cancelSignal() *servicev1.SignalNotificationMessage {
	return &servicev1.SignalNotificationMessage{SignalId: &servicev1.SignalNotificationMessage_Idx{Idx: 1}, Result: &servicev1.SignalNotificationMessage_Void{Void: &servicev1.Void{}}}
}

func errorOf(t *testing.T, f frame) *servicev1.ErrorMessage {
	t.Helper()
	e, ok := f.msg.(*servicev1.ErrorMessage)
	if !ok {
		t.Fatalf("frame is %s, want ErrorMessage", f.h.Type)
	}
	return e
}

func mustInput(t *testing.T, m *journal.Machine) {
	t.Helper()
	if _, err := m.Input(); err != nil {
		t.Fatalf("Input: %v", err)
	}
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
