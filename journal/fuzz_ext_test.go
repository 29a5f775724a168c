package journal_test

import (
	"bytes"
	"testing"

	"github.com/fnbridge/fnbridge/journal"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// FuzzJournal feeds random frame sequences to a machine driven by the
// bridge's handler shape (Input, Run "invoke", Output) and checks that it
// never panics and that every stream it emits is well formed and ends with
// at most one terminal message, which is either End, Suspension, or an
// ErrorMessage with the journal-mismatch or protocol-violation code.
func FuzzJournal(f *testing.F) {
	seed := func(v byte, closeInput bool, msgs ...proto.Message) {
		var b []byte
		for _, m := range msgs {
			b, _ = wire.AppendMessage(b, 0, m)
		}
		f.Add(v, closeInput, b)
	}
	start := func(n uint32) *servicev1.StartMessage {
		return &servicev1.StartMessage{DebugId: "inv", KnownEntries: n}
	}
	seed(6, false, start(1), input("x"), runDone(1, "r"))
	seed(7, false, start(1), input("x"), &servicev1.ProposeRunCompletionAckMessage{CompletionId: 1})
	seed(5, true, start(3), input("x"), runCmd(1, "invoke"), runDone(1, "r"))
	seed(7, true, start(2), input("x"), runCmd(1, "invoke"))
	seed(6, false, start(2), input("x"), cancelSignal())
	seed(6, false, input("x"))
	// Replayed durable-steps commands exercise their decoders.
	seed(7, true, start(4), input("x"), sleepCmd(1, 5), callCmd(2, 3, target), sendCmd(4, target, 9))
	seed(5, false, start(3), input("x"), callCmd(1, 2, target), callDone(2, "v"))
	// Keyed commands and signals (awakeables) exercise theirs.
	seed(6, false, start(4), input("x"), signalValue(17, "v"), signalFailure(18, 500, "no"), cancelSignal())
	seed(7, true, start(5), input("x"), completeAwakeableCmd("sign_1a", "1"), cancelCmd("inv_1"),
		&servicev1.GetPromiseCommandMessage{Key: "p", ResultCompletionId: 1}, &servicev1.SetStateCommandMessage{Key: []byte("k")})
	f.Fuzz(func(t *testing.T, v byte, closeInput bool, data []byte) {
		m, err := journal.New(5 + int(v%3))
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		take := func() { out = append(out, m.TakeOutput(nil)...) }
		r := wire.NewReader(bytes.NewReader(data), 1<<16)
		step := 0
		var runID uint32
		for !m.Done() {
			h, p, err := r.Next()
			if err != nil {
				if closeInput {
					m.InputClosed()
				}
				break
			}
			_ = m.Receive(h, p)
			// Drive the handler whenever the machine lets it progress.
			if m.Ready() && !m.Done() {
				switch step {
				case 0:
					if _, err := m.Input(); err == nil {
						step = 1
					}
				case 1:
					id, execute, err := m.RunStart("invoke")
					if err == nil {
						if execute {
							_ = m.ProposeRun(id, journal.Result{Value: []byte("v")})
						}
						step, runID = 2, id
					}
				case 2:
					res, st := m.Await(runID)
					switch st {
					case journal.Ready:
						_ = m.Output(res)
					case journal.Cancelled:
						_ = m.Output(journal.Result{Failure: &journal.Failure{Code: 409, Message: "cancelled"}})
					}
				}
			}
			take()
		}
		if !m.Done() && m.Ready() && step == 2 {
			if _, st := m.Await(runID); st == journal.Suspended && !m.Done() {
				t.Fatal("suspended but not done")
			}
		}
		take()
		checkStream(t, m, out)
	})
}

func checkStream(t *testing.T, m *journal.Machine, out []byte) {
	t.Helper()
	r := wire.NewReader(bytes.NewReader(out), 0)
	terminals := 0
	var last wire.MessageType
	for {
		h, p, err := r.Next()
		if err != nil {
			break
		}
		if terminals > 0 {
			t.Fatalf("%s emitted after the terminal %s", h.Type, last)
		}
		msg, err := wire.Decode(h, p)
		if err != nil {
			t.Fatalf("emitted undecodable %s: %v", h.Type, err)
		}
		switch h.Type {
		case wire.EndMessageType, wire.SuspensionMessageType:
			terminals++
		case wire.ErrorMessageType:
			terminals++
			if c := msg.(*servicev1.ErrorMessage).GetCode(); c != 570 && c != 571 {
				t.Fatalf("ErrorMessage code %d, want 570 or 571", c)
			}
		}
		last = h.Type
	}
	if m.Done() != (terminals == 1) {
		t.Fatalf("Done=%v but %d terminal messages emitted", m.Done(), terminals)
	}
}
