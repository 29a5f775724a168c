package journal_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/journal"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

func TestNewRejectsUnsupportedVersions(t *testing.T) {
	for _, v := range []int{0, 4, 8} {
		if _, err := journal.New(v); err == nil {
			t.Errorf("New(%d) succeeded; only 5..7 are supported", v)
		}
	}
}

// "StartMessage is the first message of every stream."
func TestBootstrapping(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d/first message not Start is PROTOCOL_VIOLATION 571", v), func(t *testing.T) {
			m := newMachine(t, v)
			if err := feed(t, m, input("x")); err == nil {
				t.Fatal("Receive accepted InputCommand before StartMessage")
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.ErrorMessageType)
			if got := errorOf(t, fs[0]).GetCode(); got != 571 {
				t.Fatalf("code %d, want 571", got)
			}
			if !m.Done() {
				t.Fatal("machine not closed after the violation")
			}
		})
		t.Run(fmt.Sprintf("v%d/ready only after known_entries arrived", v), func(t *testing.T) {
			m := newMachine(t, v)
			_ = feed(t, m, &servicev1.StartMessage{KnownEntries: 2}, input("x"))
			if m.Ready() {
				t.Fatal("ready with 1 of 2 known entries")
			}
			_ = feed(t, m, runCmd(1, "a"))
			if !m.Ready() {
				t.Fatal("not ready with 2 of 2 known entries")
			}
		})
		t.Run(fmt.Sprintf("v%d/second StartMessage is 571", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			if err := feed(t, m, &servicev1.StartMessage{}); err == nil {
				t.Fatal("second StartMessage accepted")
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.ErrorMessageType)
			if errorOf(t, fs[0]).GetCode() != 571 {
				t.Fatal("want 571")
			}
		})
		t.Run(fmt.Sprintf("v%d/input closed during replay is 571", v), func(t *testing.T) {
			m := newMachine(t, v)
			_ = feed(t, m, &servicev1.StartMessage{KnownEntries: 3}, input("x"))
			m.InputClosed()
			fs := drain(t, m)
			wantTypes(t, fs, wire.ErrorMessageType)
			if errorOf(t, fs[0]).GetCode() != 571 {
				t.Fatal("want 571")
			}
		})
		t.Run(fmt.Sprintf("v%d/known_entries 0 has no input: 571", v), func(t *testing.T) {
			m := started(t, v)
			if _, err := m.Input(); err == nil {
				t.Fatal("Input succeeded on an empty journal")
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.ErrorMessageType)
		})
		t.Run(fmt.Sprintf("v%d/state map is loaded from StartMessage", v), func(t *testing.T) {
			m := newMachine(t, v)
			_ = feed(t, m, &servicev1.StartMessage{KnownEntries: 1, StateMap: []*servicev1.StartMessage_StateEntry{{Key: []byte("k"), Value: []byte("v")}}}, input("x"))
			mustInput(t, m)
			val, found, lazy, err := m.GetState("k")
			if err != nil || !found || lazy != 0 || string(val) != "v" {
				t.Fatalf("GetState = %q %v %d %v, want eager v", val, found, lazy, err)
			}
		})
	}
}

// "Replaying: ... every interaction with the SDK is served from the
// replayed journal; no new entries are produced."
func TestReplay(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d/replayed completion returns the recorded value without executing", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(1, "invoke"), runDone(1, "result"))
			mustInput(t, m)
			id, execute, err := m.RunStart("invoke")
			if err != nil || execute || id != 1 {
				t.Fatalf("RunStart = %d %v %v, want replayed id 1 without execution", id, execute, err)
			}
			res, st := m.Await(id)
			if st != journal.Ready || string(res.Value) != "result" {
				t.Fatalf("Await = %v %q", st, res.Value)
			}
			if out := drain(t, m); len(out) != 0 {
				t.Fatalf("replay emitted %v", types(out))
			}
			if err := m.Output(journal.Result{Value: res.Value}); err != nil {
				t.Fatal(err)
			}
			wantTypes(t, drain(t, m), wire.OutputCommandType, wire.EndMessageType)
		})
		t.Run(fmt.Sprintf("v%d/notification before its command (interleaved)", v), func(t *testing.T) {
			m := started(t, v, input("x"), runDone(1, "early"), runCmd(1, "invoke"))
			mustInput(t, m)
			id, execute, _ := m.RunStart("invoke")
			res, st := m.Await(id)
			if execute || st != journal.Ready || string(res.Value) != "early" {
				t.Fatalf("execute=%v status=%v value=%q", execute, st, res.Value)
			}
		})
		t.Run(fmt.Sprintf("v%d/replayed failure is returned as failure", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(1, "invoke"), runFailed(1, 422, "bad"))
			mustInput(t, m)
			id, execute, _ := m.RunStart("invoke")
			res, st := m.Await(id)
			if execute || st != journal.Ready || res.Failure == nil || res.Failure.Code != 422 || res.Failure.Message != "bad" {
				t.Fatalf("execute=%v status=%v res=%+v", execute, st, res)
			}
		})
		t.Run(fmt.Sprintf("v%d/replayed RunCommand without completion runs again", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(1, "invoke"))
			mustInput(t, m)
			id, execute, err := m.RunStart("invoke")
			if err != nil || !execute || id != 1 {
				t.Fatalf("RunStart = %d %v %v, want execution of id 1", id, execute, err)
			}
			if out := drain(t, m); len(out) != 0 {
				t.Fatalf("replayed RunCommand was sent again: %v", types(out))
			}
			_ = m.ProposeRun(id, journal.Result{Value: []byte("again")})
			fs := drain(t, m)
			wantTypes(t, fs, wire.ProposeRunCompletionMessageType)
			if p := fs[0].msg.(*servicev1.ProposeRunCompletionMessage); p.GetResultCompletionId() != 1 {
				t.Fatalf("proposal for id %d, want 1", p.GetResultCompletionId())
			}
		})
		t.Run(fmt.Sprintf("v%d/new completion ids continue after replayed ones", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(7, "a"), runDone(7, "r"))
			mustInput(t, m)
			_, _, _ = m.RunStart("a")
			id, execute, _ := m.RunStart("b")
			if !execute || id != 8 {
				t.Fatalf("new run got id %d execute=%v, want 8 true", id, execute)
			}
		})
	}
}

// "Run mechanics": REQUESTED_ACK on v7, full notification on v5/v6.
func TestRunProcessing(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			id, execute, err := m.RunStart("invoke")
			if err != nil || !execute || id != 1 {
				t.Fatalf("RunStart = %d %v %v", id, execute, err)
			}
			_ = m.ProposeRun(id, journal.Result{Value: []byte("out")})
			fs := drain(t, m)
			wantTypes(t, fs, wire.RunCommandType, wire.ProposeRunCompletionMessageType)
			if got := fs[0].msg.(*servicev1.RunCommandMessage); got.GetName() != "invoke" || got.GetResultCompletionId() != 1 {
				t.Fatalf("RunCommand = %v", got)
			}
			if fs[1].h.RequestedAck() != (v == 7) {
				t.Fatalf("REQUESTED_ACK = %v on v%d", fs[1].h.RequestedAck(), v)
			}
			if _, st := m.Await(id); st != journal.Pending {
				t.Fatalf("Await before the answer = %v, want pending", st)
			}
			if v == 7 {
				if err := feed(t, m, &servicev1.ProposeRunCompletionAckMessage{CompletionId: 1}); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := feed(t, m, runDone(1, "out")); err != nil {
					t.Fatal(err)
				}
			}
			res, st := m.Await(id)
			if st != journal.Ready || string(res.Value) != "out" {
				t.Fatalf("Await = %v %q", st, res.Value)
			}
		})
	}
	t.Run("v7 ack for a completion id never proposed is 571", func(t *testing.T) {
		m := started(t, 7, input("x"))
		mustInput(t, m)
		id, _, _ := m.RunStart("a")
		_ = m.ProposeRun(id, journal.Result{Value: []byte("1")})
		drain(t, m)
		if err := feed(t, m, &servicev1.ProposeRunCompletionAckMessage{CompletionId: 99}); err == nil {
			t.Fatal("ack for id 99 accepted")
		}
		fs := drain(t, m)
		wantTypes(t, fs, wire.ErrorMessageType)
		if errorOf(t, fs[0]).GetCode() != 571 {
			t.Fatal("want 571")
		}
	})
	for _, v := range []int{5, 6} {
		t.Run(fmt.Sprintf("v%d has no ProposeRunCompletionAck: 571", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			if err := feed(t, m, &servicev1.ProposeRunCompletionAckMessage{CompletionId: 1}); err == nil {
				t.Fatal("ack accepted")
			}
			wantTypes(t, drain(t, m), wire.ErrorMessageType)
		})
	}
	t.Run("ack during replay is 571", func(t *testing.T) {
		m := newMachine(t, 7)
		if err := feed(t, m, &servicev1.StartMessage{KnownEntries: 3}, input("x"), runCmd(1, "a"), &servicev1.ProposeRunCompletionAckMessage{CompletionId: 1}); err == nil {
			t.Fatal("ack accepted as a replayed entry")
		}
		wantTypes(t, drain(t, m), wire.ErrorMessageType)
	})
	t.Run("notification type that does not match the command is 571", func(t *testing.T) {
		m := started(t, 6, input("x"))
		mustInput(t, m)
		id, _, _ := m.RunStart("a")
		drain(t, m)
		err := feed(t, m, &servicev1.SleepCompletionNotificationMessage{CompletionId: id, Void: &servicev1.Void{}})
		if err == nil {
			t.Fatal("SleepCompletion for a run accepted")
		}
		fs := drain(t, m)
		wantTypes(t, fs, wire.ErrorMessageType)
		if errorOf(t, fs[0]).GetCode() != 571 {
			t.Fatal("want 571")
		}
	})
	t.Run("replayed notification type that does not match the replayed command is 571", func(t *testing.T) {
		m := newMachine(t, 6)
		err := feed(t, m, &servicev1.StartMessage{KnownEntries: 3}, input("x"),
			&servicev1.SleepCompletionNotificationMessage{CompletionId: 1, Void: &servicev1.Void{}}, runCmd(1, "a"))
		if err == nil {
			t.Fatal("mismatching replayed notification accepted")
		}
	})
	t.Run("v7 on replay the RunCompletionNotification fills the ack's position", func(t *testing.T) {
		// Attempt 1 saw the ack; the replay carries the stored completion.
		m := started(t, 7, input("x"), runCmd(1, "a"), runDone(1, "stored"))
		mustInput(t, m)
		id, execute, _ := m.RunStart("a")
		res, st := m.Await(id)
		if execute || st != journal.Ready || string(res.Value) != "stored" {
			t.Fatalf("execute=%v st=%v value=%q", execute, st, res.Value)
		}
	})
}

// ProposeLastRun: the Output follows the proposal in the same output,
// with no answer in between; any other command after it fails the attempt.
func TestProposeLastRun(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d the output follows at once", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			id, _, _ := m.RunStart("invoke")
			if err := m.ProposeLastRun(id, journal.Result{Value: []byte("out")}); err != nil {
				t.Fatal(err)
			}
			if err := m.Output(journal.Result{Value: []byte("out")}); err != nil {
				t.Fatal(err)
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
			if fs[1].h.RequestedAck() != (v == 7) {
				t.Fatalf("REQUESTED_ACK = %v on v%d", fs[1].h.RequestedAck(), v)
			}
		})
		t.Run(fmt.Sprintf("v%d another command after it is a 500", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			id, _, _ := m.RunStart("invoke")
			_ = m.ProposeLastRun(id, journal.Result{Value: []byte("out")})
			if _, _, err := m.RunStart("next"); err == nil {
				t.Fatal("a RunStart after ProposeLastRun was accepted")
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.ErrorMessageType)
			if e := errorOf(t, fs[2]); e.GetCode() != 500 || !strings.Contains(e.GetMessage(), "only the Output may follow") {
				t.Fatalf("ErrorMessage = %v", e)
			}
		})
	}
}

// "An invocation may suspend when it is awaiting one or more notifications
// that have not arrived yet."
func TestSuspension(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			m.InputClosed() // request/response: the runtime already sent everything
			mustInput(t, m)
			id, _, _ := m.RunStart("invoke")
			_ = m.ProposeRun(id, journal.Result{Value: []byte("v")})
			if _, st := m.Await(id); st != journal.Suspended {
				t.Fatalf("Await = %v, want suspended", st)
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.SuspensionMessageType)
			s := fs[2].msg.(*servicev1.SuspensionMessage)
			if v == 7 {
				f := s.GetAwaitingOn()
				if len(s.GetWaitingCompletions()) != 0 || f == nil ||
					!equalU32(f.GetWaitingCompletions(), []uint32{1}) || !equalU32(f.GetWaitingSignals(), []uint32{1}) ||
					f.GetCombinatorType() != servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED {
					t.Fatalf("v7 suspension = %v, want Future{FIRST_COMPLETED, completions [1], signals [CANCEL]}", s)
				}
			} else {
				if s.GetAwaitingOn() != nil || !equalU32(s.GetWaitingCompletions(), []uint32{1}) || !equalU32(s.GetWaitingSignals(), []uint32{1}) {
					t.Fatalf("v%d suspension = %v, want flat lists completions [1], signals [CANCEL]", v, s)
				}
			}
			if m.Terminal() != wire.SuspensionMessageType {
				t.Fatal("terminal not recorded")
			}
			if err := m.Output(journal.Result{}); err != journal.ErrClosed {
				t.Fatalf("Output after suspension = %v, want ErrClosed (exactly one terminal message)", err)
			}
		})
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// CANCEL built-in signal.
func TestCancel(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d/cancel while awaiting", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			id, _, _ := m.RunStart("a")
			_ = m.ProposeRun(id, journal.Result{Value: []byte("v")})
			_ = feed(t, m, cancelSignal())
			if !m.Cancelled() {
				t.Fatal("Cancelled() false after CANCEL")
			}
			if _, st := m.Await(id); st != journal.Cancelled {
				t.Fatalf("Await = %v, want cancelled", st)
			}
		})
		t.Run(fmt.Sprintf("v%d/completion recorded before the cancel wins on replay", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(1, "a"), runDone(1, "r"), cancelSignal())
			mustInput(t, m)
			id, _, _ := m.RunStart("a")
			if res, st := m.Await(id); st != journal.Ready || string(res.Value) != "r" {
				t.Fatalf("Await = %v, want the completion that arrived first", st)
			}
		})
		t.Run(fmt.Sprintf("v%d/cancel recorded before the completion wins on replay", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(1, "a"), cancelSignal(), runDone(1, "r"))
			mustInput(t, m)
			id, _, _ := m.RunStart("a")
			if _, st := m.Await(id); st != journal.Cancelled {
				t.Fatalf("Await = %v, want cancelled", st)
			}
		})
	}
}

// "JOURNAL_MISMATCH — the SDK cannot replay the journal because its
// contents diverge from what user code expects."
func TestJournalMismatch(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d/different run name", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(1, "invoke"), runDone(1, "r"))
			mustInput(t, m)
			if _, _, err := m.RunStart("other"); err == nil {
				t.Fatal("RunStart accepted a different name")
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.ErrorMessageType)
			e := errorOf(t, fs[0])
			if e.GetCode() != 570 || e.GetRelatedCommandIndex() != 1 || e.GetRelatedCommandName() != "invoke" || e.GetRelatedCommandType() != uint32(wire.RunCommandType) {
				t.Fatalf("ErrorMessage = %v, want 570 about command 1 RunCommand \"invoke\"", e)
			}
		})
		t.Run(fmt.Sprintf("v%d/different command type", v), func(t *testing.T) {
			m := started(t, v, input("x"), &servicev1.SetStateCommandMessage{Key: []byte("k")})
			mustInput(t, m)
			if _, _, err := m.RunStart("invoke"); err == nil {
				t.Fatal("RunStart accepted a SetStateCommand")
			}
			e := errorOf(t, drain(t, m)[0])
			if e.GetCode() != 570 || e.GetRelatedCommandType() != uint32(wire.SetStateCommandType) {
				t.Fatalf("ErrorMessage = %v", e)
			}
		})
		t.Run(fmt.Sprintf("v%d/journal longer than the handler", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(1, "a"), runDone(1, "r"), &servicev1.OutputCommandMessage{}, runCmd(2, "b"))
			mustInput(t, m)
			_, _, _ = m.RunStart("a")
			if err := m.Output(journal.Result{}); err == nil {
				t.Fatal("Output accepted with a replayed command left over")
			}
			if e := errorOf(t, drain(t, m)[0]); e.GetCode() != 570 {
				t.Fatalf("code %d, want 570", e.GetCode())
			}
		})
		t.Run(fmt.Sprintf("v%d/uncompleted run followed by more journal", v), func(t *testing.T) {
			m := started(t, v, input("x"), runCmd(1, "a"), runCmd(2, "b"))
			mustInput(t, m)
			if _, _, err := m.RunStart("a"); err == nil {
				t.Fatal("uncompleted run with later commands accepted")
			}
			if e := errorOf(t, drain(t, m)[0]); e.GetCode() != 570 {
				t.Fatalf("code %d, want 570", e.GetCode())
			}
		})
	}
}

func TestOutput(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d/failure output", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			_ = m.Output(journal.Result{Failure: &journal.Failure{Code: 422, Message: "no"}})
			fs := drain(t, m)
			wantTypes(t, fs, wire.OutputCommandType, wire.EndMessageType)
			f := fs[0].msg.(*servicev1.OutputCommandMessage).GetFailure()
			if f.GetCode() != 422 || f.GetMessage() != "no" {
				t.Fatalf("failure = %v", f)
			}
		})
		t.Run(fmt.Sprintf("v%d/replayed output is not sent again", v), func(t *testing.T) {
			m := started(t, v, input("x"), &servicev1.OutputCommandMessage{Result: &servicev1.OutputCommandMessage_Value{Value: &servicev1.Value{Content: []byte("o")}}})
			mustInput(t, m)
			_ = m.Output(journal.Result{Value: []byte("o")})
			wantTypes(t, drain(t, m), wire.EndMessageType)
		})
		t.Run(fmt.Sprintf("v%d/messages after the stream ended emit nothing", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			_ = m.Output(journal.Result{})
			drain(t, m)
			if err := feed(t, m, runDone(1, "late")); err == nil {
				t.Fatal("frame after End accepted silently")
			}
			m.Fail(&journal.Error{Code: 500, RelatedIndex: -1})
			if out := drain(t, m); len(out) != 0 {
				t.Fatalf("emitted %v after End; a stream has exactly one terminal message", types(out))
			}
		})
	}
}

// "ErrorMessage carries an HTTP-style code, a human-readable message, and
// optional related_command_index, related_command_name, and
// related_command_type" plus next_retry_delay and should_pause (v7).
func TestErrorMessageFieldsPerVersion(t *testing.T) {
	cases := []struct {
		name      string
		err       journal.Error
		v         int
		wantDelay *uint64
		wantPause bool
	}{
		{"retry after v6", journal.Error{Code: 503, RetryAfter: 2 * time.Second, RelatedIndex: -1}, 6, ptr(uint64(2000)), false},
		{"retry after v7", journal.Error{Code: 503, RetryAfter: 2 * time.Second, RelatedIndex: -1}, 7, ptr(uint64(2000)), false},
		{"pause v7 uses behavior PAUSE", journal.Error{Code: 500, Pause: true, RelatedIndex: -1}, 7, nil, true},
		{"pause v6 falls back to a long delay", journal.Error{Code: 500, Pause: true, RelatedIndex: -1}, 6, ptr(uint64(journal.PauseFallbackDelay.Milliseconds())), false},
		{"pause v5 falls back to a long delay", journal.Error{Code: 500, Pause: true, RelatedIndex: -1}, 5, ptr(uint64(journal.PauseFallbackDelay.Milliseconds())), false},
		{"pause v6 with a delay of its own asks for that delay", journal.Error{Code: 500, Pause: true, RetryAfter: 5 * time.Minute, RelatedIndex: -1}, 6, ptr(uint64((5 * time.Minute).Milliseconds())), false},
		{"plain v5", journal.Error{Code: 500, RelatedIndex: -1}, 5, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := started(t, c.v, input("x"))
			e := c.err
			e.Message = "boom"
			m.Fail(&e)
			msg := errorOf(t, drain(t, m)[0])
			if msg.GetCode() != uint32(c.err.Code) || msg.GetMessage() != "boom" {
				t.Fatalf("code/message = %d %q", msg.GetCode(), msg.GetMessage())
			}
			if (msg.NextRetryDelay == nil) != (c.wantDelay == nil) || (c.wantDelay != nil && *msg.NextRetryDelay != *c.wantDelay) {
				t.Fatalf("next_retry_delay = %v, want %v", msg.NextRetryDelay, c.wantDelay)
			}
			if got := msg.GetBehavior() == servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE; got != c.wantPause {
				t.Fatalf("behavior PAUSE = %v, want %v", got, c.wantPause)
			}
			if msg.RelatedCommandIndex != nil {
				t.Fatal("related command set without one")
			}
		})
	}
	t.Run("related command", func(t *testing.T) {
		m := started(t, 7, input("x"))
		m.Fail(&journal.Error{Code: 500, Message: "run failed", RelatedIndex: 1, RelatedName: "invoke", RelatedType: wire.RunCommandType})
		msg := errorOf(t, drain(t, m)[0])
		if msg.GetRelatedCommandIndex() != 1 || msg.GetRelatedCommandName() != "invoke" || msg.GetRelatedCommandType() != 0x0411 {
			t.Fatalf("related = %v", msg)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// "Eager state": served locally from state_map unless partial.
func TestEagerState(t *testing.T) {
	start := func(t *testing.T, partial bool, entries ...proto.Message) *journal.Machine {
		m := newMachine(t, 7)
		all := append([]proto.Message{&servicev1.StartMessage{KnownEntries: uint32(1 + len(entries)), PartialState: partial,
			StateMap: []*servicev1.StartMessage_StateEntry{{Key: []byte("a"), Value: []byte("1")}}}, input("x")}, entries...)
		if err := feed(t, m, all...); err != nil {
			t.Fatal(err)
		}
		mustInput(t, m)
		return m
	}
	t.Run("known key is eager with value", func(t *testing.T) {
		m := start(t, true)
		v, found, lazy, _ := m.GetState("a")
		if !found || lazy != 0 || string(v) != "1" {
			t.Fatalf("got %q %v %d", v, found, lazy)
		}
		fs := drain(t, m)
		wantTypes(t, fs, wire.GetEagerStateCommandType)
		if string(fs[0].msg.(*servicev1.GetEagerStateCommandMessage).GetValue().GetContent()) != "1" {
			t.Fatal("value not inlined")
		}
	})
	t.Run("missing key, complete state: eager void", func(t *testing.T) {
		m := start(t, false)
		_, found, lazy, _ := m.GetState("zz")
		if found || lazy != 0 {
			t.Fatalf("found=%v lazy=%d", found, lazy)
		}
		fs := drain(t, m)
		wantTypes(t, fs, wire.GetEagerStateCommandType)
		if fs[0].msg.(*servicev1.GetEagerStateCommandMessage).GetVoid() == nil {
			t.Fatal("want void result")
		}
	})
	t.Run("missing key, partial state: lazy and awaited", func(t *testing.T) {
		m := start(t, true)
		_, _, lazy, _ := m.GetState("zz")
		if lazy == 0 {
			t.Fatal("want a lazy read")
		}
		wantTypes(t, drain(t, m), wire.GetLazyStateCommandType)
		_ = feed(t, m, &servicev1.GetLazyStateCompletionNotificationMessage{CompletionId: lazy, Result: &servicev1.GetLazyStateCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: []byte("far")}}})
		if res, st := m.Await(lazy); st != journal.Ready || string(res.Value) != "far" {
			t.Fatalf("Await = %v %q", st, res.Value)
		}
	})
	t.Run("set, clear and clear-all update the local view", func(t *testing.T) {
		m := start(t, true)
		_ = m.SetState("b", []byte("2"))
		if v, found, _, _ := m.GetState("b"); !found || string(v) != "2" {
			t.Fatal("set not visible")
		}
		_ = m.ClearState("a")
		if _, found, lazy, _ := m.GetState("a"); found || lazy != 0 {
			t.Fatalf("cleared key: found=%v lazy=%d, want eager not-found even with partial state", found, lazy)
		}
		_ = m.ClearAllState()
		if _, found, lazy, _ := m.GetState("b"); found || lazy != 0 {
			t.Fatalf("after ClearAll: found=%v lazy=%d, want eager not-found", found, lazy)
		}
		keys, lazy, _ := m.GetStateKeys()
		if lazy != 0 || len(keys) != 0 {
			t.Fatalf("keys after ClearAll = %q lazy=%d", keys, lazy)
		}
		wantTypes(t, drain(t, m), wire.SetStateCommandType, wire.GetEagerStateCommandType, wire.ClearStateCommandType,
			wire.GetEagerStateCommandType, wire.ClearAllStateCommandType, wire.GetEagerStateCommandType, wire.GetEagerStateKeysCommandType)
	})
	t.Run("replayed eager read returns the recorded value", func(t *testing.T) {
		m := start(t, false, &servicev1.GetEagerStateCommandMessage{Key: []byte("a"), Result: &servicev1.GetEagerStateCommandMessage_Value{Value: &servicev1.Value{Content: []byte("recorded")}}})
		v, found, _, err := m.GetState("a")
		if err != nil || !found || string(v) != "recorded" {
			t.Fatalf("got %q %v %v", v, found, err)
		}
		if out := drain(t, m); len(out) != 0 {
			t.Fatal("replayed read re-emitted")
		}
	})
	t.Run("replayed read of another key is 570", func(t *testing.T) {
		m := start(t, false, &servicev1.GetEagerStateCommandMessage{Key: []byte("a"), Result: &servicev1.GetEagerStateCommandMessage_Void{Void: &servicev1.Void{}}})
		if _, _, _, err := m.GetState("b"); err == nil {
			t.Fatal("read of another key accepted")
		}
		if e := errorOf(t, drain(t, m)[0]); e.GetCode() != 570 {
			t.Fatal("want 570")
		}
	})
}

func TestCustomEntriesReplayAsOpaqueCommands(t *testing.T) {
	m := newMachine(t, 6)
	b, _ := wire.AppendMessage(nil, 0, &servicev1.StartMessage{KnownEntries: 2})
	b, _ = wire.AppendMessage(b, 0, input("x"))
	b = append(b, 0xFC, 0x01, 0, 0, 0, 0, 0, 2, 'h', 'i')
	r := wire.NewReader(bytesReader(b), 0)
	for {
		h, p, err := r.Next()
		if err != nil {
			break
		}
		if err := m.Receive(h, p); err != nil {
			t.Fatalf("custom entry rejected: %v", err)
		}
	}
	mustInput(t, m)
	if _, _, err := m.RunStart("a"); err == nil {
		t.Fatal("run matched against a custom entry")
	}
	if e := errorOf(t, drain(t, m)[0]); e.GetCode() != 570 || e.GetRelatedCommandType() != 0xFC01 {
		t.Fatalf("ErrorMessage = %v", e)
	}
}
