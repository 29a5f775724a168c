package journal_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/journal"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

var target = journal.CallTarget{Service: "S", Handler: "h", Key: "k", IdempotencyKey: "i",
	Headers: map[string]string{"b": "2", "a": "1"}, Parameter: []byte("in")}

func sleepDone(id uint32) *servicev1.SleepCompletionNotificationMessage {
	return &servicev1.SleepCompletionNotificationMessage{CompletionId: id, Void: &servicev1.Void{}}
}

func callDone(id uint32, v string) *servicev1.CallCompletionNotificationMessage {
	return &servicev1.CallCompletionNotificationMessage{CompletionId: id, Result: &servicev1.CallCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: []byte(v)}}}
}

func callFailed(id uint32, code uint32, msg string) *servicev1.CallCompletionNotificationMessage {
	return &servicev1.CallCompletionNotificationMessage{CompletionId: id, Result: &servicev1.CallCompletionNotificationMessage_Failure{Failure: &servicev1.Failure{Code: code, Message: msg}}}
}

func invocationIDDone(id uint32, inv string) *servicev1.CallInvocationIdCompletionNotificationMessage {
	return &servicev1.CallInvocationIdCompletionNotificationMessage{CompletionId: id, InvocationId: inv}
}

func sleepCmd(id uint32, wake uint64) *servicev1.SleepCommandMessage {
	return &servicev1.SleepCommandMessage{WakeUpTime: wake, ResultCompletionId: id}
}

func callCmd(invID, resID uint32, t journal.CallTarget) *servicev1.CallCommandMessage {
	return &servicev1.CallCommandMessage{ServiceName: t.Service, HandlerName: t.Handler, Key: t.Key, Parameter: t.Parameter,
		IdempotencyKey: proto.String(t.IdempotencyKey), InvocationIdNotificationIdx: invID, ResultCompletionId: resID}
}

func sendCmd(invID uint32, t journal.CallTarget, at uint64) *servicev1.OneWayCallCommandMessage {
	return &servicev1.OneWayCallCommandMessage{ServiceName: t.Service, HandlerName: t.Handler, Key: t.Key, Parameter: t.Parameter,
		IdempotencyKey: proto.String(t.IdempotencyKey), InvokeTime: at, InvocationIdNotificationIdx: invID}
}

// A handler that runs, sleeps, calls and sends produces each command once,
// with fresh completion ids, and reads each completion whether it arrived
// before or after the await.
func TestDurableCommandsProcessing(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			run, _, err := m.RunStart("r")
			if err != nil {
				t.Fatal(err)
			}
			sleep, err := m.Sleep(1_700_000_000_123)
			if err != nil {
				t.Fatal(err)
			}
			callInv, callRes, err := m.Call(target)
			if err != nil {
				t.Fatal(err)
			}
			sendInv, err := m.OneWayCall(target, 1_700_000_060_000)
			if err != nil {
				t.Fatal(err)
			}
			if ids := []uint32{run, sleep, callInv, callRes, sendInv}; !slices.Equal(ids, []uint32{1, 2, 3, 4, 5}) {
				t.Fatalf("completion ids %v, want 1..5 in issue order", ids)
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.RunCommandType, wire.SleepCommandType, wire.CallCommandType, wire.OneWayCallCommandType)
			if s := fs[1].msg.(*servicev1.SleepCommandMessage); s.GetWakeUpTime() != 1_700_000_000_123 || s.GetResultCompletionId() != 2 {
				t.Fatalf("SleepCommand %v", s)
			}
			c := fs[2].msg.(*servicev1.CallCommandMessage)
			if c.GetServiceName() != "S" || c.GetHandlerName() != "h" || c.GetKey() != "k" || c.GetIdempotencyKey() != "i" ||
				string(c.GetParameter()) != "in" || c.GetInvocationIdNotificationIdx() != 3 || c.GetResultCompletionId() != 4 {
				t.Fatalf("CallCommand %v", c)
			}
			// Headers are sorted: the same command bytes on every attempt.
			if hs := c.GetHeaders(); len(hs) != 2 || hs[0].GetKey() != "a" || hs[1].GetKey() != "b" {
				t.Fatalf("CallCommand headers %v, want a then b", hs)
			}
			o := fs[3].msg.(*servicev1.OneWayCallCommandMessage)
			if o.GetInvokeTime() != 1_700_000_060_000 || o.GetInvocationIdNotificationIdx() != 5 || o.GetServiceName() != "S" {
				t.Fatalf("OneWayCallCommand %v", o)
			}

			// The call's result arrives before it is awaited.
			if err := feed(t, m, callDone(4, "r1"), invocationIDDone(3, "inv_callee")); err != nil {
				t.Fatal(err)
			}
			if st := m.AwaitMany([]uint32{sleep, callRes}, journal.FirstCompleted); st != journal.Ready {
				t.Fatalf("any(sleep, call) = %v, want ready", st)
			}
			if res, ok := m.Completed(callRes); !ok || string(res.Value) != "r1" {
				t.Fatalf("call result %v %v", res, ok)
			}
			if _, ok := m.Completed(sleep); ok {
				t.Fatal("the sleep reported complete before its notification")
			}
			if st := m.AwaitMany([]uint32{sleep, callRes}, journal.AllCompleted); st != journal.Pending {
				t.Fatalf("all(sleep, call) = %v, want pending", st)
			}
			// The sleep's completes after it was awaited.
			if err := feed(t, m, sleepDone(2), invocationIDDone(5, "inv_sent")); err != nil {
				t.Fatal(err)
			}
			if st := m.AwaitMany([]uint32{sleep, callRes}, journal.AllCompleted); st != journal.Ready {
				t.Fatalf("all(sleep, call) = %v, want ready", st)
			}
			if res, st := m.Await(sleep); st != journal.Ready || !res.Void {
				t.Fatalf("sleep = %v %v, want a void result", res, st)
			}
			if res, st := m.Await(sendInv); st != journal.Ready || res.InvocationID != "inv_sent" {
				t.Fatalf("send's invocation id = %v %v", res, st)
			}
			if len(drain(t, m)) != 0 {
				t.Fatal("awaits emitted frames")
			}
		})
	}
}

// A replayed journal serves recorded results; nothing is emitted again
// and new ids come after the recorded ones.
func TestDurableCommandsReplay(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, input("x"),
				runCmd(1, "r"), runDone(1, "ran"),
				sleepCmd(2, 99), sleepDone(2),
				callCmd(3, 4, target), invocationIDDone(3, "inv_callee"), callFailed(4, 404, "no such"),
				sendCmd(5, target, 0), invocationIDDone(5, "inv_sent"))
			mustInput(t, m)
			if id, execute, err := m.RunStart("r"); err != nil || execute || id != 1 {
				t.Fatalf("RunStart = %d %v %v", id, execute, err)
			}
			if id, err := m.Sleep(12345); err != nil || id != 2 {
				t.Fatalf("Sleep = %d %v", id, err)
			}
			inv, res, err := m.Call(target)
			if err != nil || inv != 3 || res != 4 {
				t.Fatalf("Call = %d %d %v", inv, res, err)
			}
			send, err := m.OneWayCall(target, 777)
			if err != nil || send != 5 {
				t.Fatalf("OneWayCall = %d %v", send, err)
			}
			if st := m.AwaitMany([]uint32{1, 2, 4, 5}, journal.AllCompleted); st != journal.Ready {
				t.Fatalf("await all recorded = %v", st)
			}
			if r, _ := m.Completed(4); r.Failure == nil || r.Failure.Code != 404 || r.Failure.Message != "no such" {
				t.Fatalf("call result %+v, want the recorded 404", r)
			}
			if r, _ := m.Completed(5); r.InvocationID != "inv_sent" {
				t.Fatalf("send result %+v", r)
			}
			if len(drain(t, m)) != 0 {
				t.Fatal("replay emitted frames")
			}
			if !m.Replaying() {
				// Past the journal: the next sleep is new and gets id 6.
				if id, err := m.Sleep(1); err != nil || id != 6 {
					t.Fatalf("new Sleep after replay = %d %v, want id 6", id, err)
				}
				wantTypes(t, drain(t, m), wire.SleepCommandType)
			}
		})
	}
}

// The protocol: "570 JOURNAL_MISMATCH — the SDK cannot replay the journal
// because its contents diverge from what user code expects." The error
// names the recorded command and the issued one.
func TestDurableCommandsMismatch(t *testing.T) {
	other := target
	other.Handler = "h2"
	cases := []struct {
		name    string
		journal proto.Message
		issue   func(m *journal.Machine) error
		want    []string
	}{
		{"sleep replayed, call issued", sleepCmd(1, 5), func(m *journal.Machine) error { _, _, err := m.Call(target); return err },
			[]string{"the journal has SleepCommand", `the handler issued CallCommand to S/h (key "k")`}},
		{"call replayed, sleep issued", callCmd(1, 2, target), func(m *journal.Machine) error { _, err := m.Sleep(5); return err },
			[]string{`the journal has CallCommand to S/h (key "k")`, "the handler issued SleepCommand"}},
		{"call to another handler", callCmd(1, 2, target), func(m *journal.Machine) error { _, _, err := m.Call(other); return err },
			[]string{`CallCommand to S/h (key "k")`, `CallCommand to S/h2 (key "k")`}},
		{"call with another input", callCmd(1, 2, target), func(m *journal.Machine) error {
			changed := target
			changed.Parameter = []byte(`{"n":2}`)
			_, _, err := m.Call(changed)
			return err
		},
			[]string{`the journal has CallCommand to S/h (key "k"), the handler issued CallCommand to S/h (key "k") with another input (the journal's value is ` + fmt.Sprintf("%q", target.Parameter) + `, the handler's "{\"n\":2}")`}},
		{"call with a long input that differs late", callCmd(1, 2, withParam(target, `{"pad":"`+strings.Repeat("x", 80)+`","n":1}`)), func(m *journal.Machine) error {
			_, _, err := m.Call(withParam(target, `{"pad":"`+strings.Repeat("x", 80)+`","n":2}`))
			return err
		},
			[]string{`with another input (the values differ from byte 94: the journal's (96 bytes) has "xxxxxxxxxx\",\"n\":1}" there, the handler's (96 bytes) "xxxxxxxxxx\",\"n\":2}")`}},
		{"send with another idempotency key", sendCmd(1, target, 0), func(m *journal.Machine) error {
			changed := target
			changed.IdempotencyKey = "other"
			_, err := m.OneWayCall(changed, 0)
			return err
		},
			[]string{`with another idempotency key (the journal's ` + fmt.Sprintf("%q", target.IdempotencyKey) + `, the handler's "other")`}},
		{"send replayed, call issued", sendCmd(1, target, 0), func(m *journal.Machine) error { _, _, err := m.Call(target); return err },
			[]string{"the journal has OneWayCallCommand to S/h", "the handler issued CallCommand to S/h"}},
		{"run replayed, sleep issued", runCmd(1, "r"), func(m *journal.Machine) error { _, err := m.Sleep(5); return err },
			[]string{`the journal has RunCommand "r"`, "the handler issued SleepCommand"}},
		{"sleep replayed, run issued", sleepCmd(1, 5), func(m *journal.Machine) error { _, _, err := m.RunStart("r"); return err },
			[]string{"SleepCommand", `RunCommand "r"`}},
	}
	for _, v := range versions {
		for _, c := range cases {
			t.Run(fmt.Sprintf("v%d/%s", v, c.name), func(t *testing.T) {
				m := started(t, v, input("x"), c.journal)
				mustInput(t, m)
				err := c.issue(m)
				je, ok := err.(*journal.Error)
				if !ok || je.Code != journal.CodeJournalMismatch {
					t.Fatalf("err = %v, want a 570 journal mismatch", err)
				}
				fs := drain(t, m)
				wantTypes(t, fs, wire.ErrorMessageType)
				e := errorOf(t, fs[0])
				for _, w := range c.want {
					if !strings.Contains(e.GetMessage(), w) {
						t.Fatalf("ErrorMessage %q does not contain %q", e.GetMessage(), w)
					}
				}
				if e.GetCode() != 570 || e.GetRelatedCommandIndex() != 1 || e.RelatedCommandType == nil {
					t.Fatalf("ErrorMessage %v, want 570 related to command 1 with its type", e)
				}
			})
		}
	}
}

// A completion id must be completed by its command's notification type.
func TestDurableNotificationTypeChecked(t *testing.T) {
	for _, v := range versions {
		m := started(t, v, input("x"))
		mustInput(t, m)
		id, err := m.Sleep(1)
		if err != nil {
			t.Fatal(err)
		}
		drain(t, m)
		err = feed(t, m, callDone(id, "v"))
		if je, ok := err.(*journal.Error); !ok || je.Code != journal.CodeProtocolViolation {
			t.Fatalf("v%d: CallCompletion for a sleep's id: %v, want 571", v, err)
		}
	}
}

// The protocol: "To suspend, the SDK MUST send a SuspensionMessage
// describing the await point as a tree of future combinators, then close
// the stream." v5/v6 list the pending ids flat; v7 sends a Future that
// CANCEL resumes on its own.
func TestAwaitManySuspensionPerVersion(t *testing.T) {
	first, all := servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED, servicev1.CombinatorType_COMBINATOR_TYPE_ALL_COMPLETED
	cases := []struct {
		name      string
		mode      journal.Mode
		completed bool // completion 1 arrives before the await
		flat      []uint32
		v7        *servicev1.Future
	}{
		{"any of two", journal.FirstCompleted, false, []uint32{1, 3},
			&servicev1.Future{WaitingCompletions: []uint32{1, 3}, WaitingSignals: []uint32{1}, CombinatorType: first}},
		{"all of two", journal.AllCompleted, false, []uint32{1, 3},
			&servicev1.Future{WaitingSignals: []uint32{1}, CombinatorType: first,
				NestedFutures: []*servicev1.Future{{WaitingCompletions: []uint32{1, 3}, CombinatorType: all}}}},
		{"all of two, one complete", journal.AllCompleted, true, []uint32{3},
			&servicev1.Future{WaitingCompletions: []uint32{3}, WaitingSignals: []uint32{1}, CombinatorType: first}},
	}
	for _, v := range versions {
		for _, c := range cases {
			t.Run(fmt.Sprintf("v%d/%s", v, c.name), func(t *testing.T) {
				m := started(t, v, input("x"))
				mustInput(t, m)
				sleep, _ := m.Sleep(1)
				_, call, _ := m.Call(target)
				if sleep != 1 || call != 3 {
					t.Fatalf("sleep id %d, call result id %d; want 1 and 3", sleep, call)
				}
				ids := []uint32{sleep, call}
				if c.completed {
					if err := feed(t, m, sleepDone(1)); err != nil {
						t.Fatal(err)
					}
				}
				drain(t, m)
				if st := m.AwaitMany(ids, c.mode); st != journal.Pending {
					t.Fatalf("before input closed: %v", st)
				}
				m.InputClosed()
				if st := m.AwaitMany(ids, c.mode); st != journal.Suspended || !m.Done() {
					t.Fatalf("after input closed: %v (done %v), want suspended", st, m.Done())
				}
				fs := drain(t, m)
				wantTypes(t, fs, wire.SuspensionMessageType)
				s := fs[0].msg.(*servicev1.SuspensionMessage)
				want := &servicev1.SuspensionMessage{WaitingCompletions: c.flat, WaitingSignals: []uint32{1}}
				if v == 7 {
					want = &servicev1.SuspensionMessage{AwaitingOn: c.v7}
				}
				if !proto.Equal(s, want) {
					t.Fatalf("suspension %v, want %v", s, want)
				}
			})
		}
	}
}

// Suspend is also the caller's choice (its wait budget ran out).
func TestSuspendOnBudget(t *testing.T) {
	m := started(t, 6, input("x"))
	mustInput(t, m)
	id, _ := m.Sleep(1)
	drain(t, m)
	m.Suspend([]uint32{id, id}, journal.FirstCompleted)
	fs := drain(t, m)
	wantTypes(t, fs, wire.SuspensionMessageType)
	if s := fs[0].msg.(*servicev1.SuspensionMessage); !slices.Equal(s.GetWaitingCompletions(), []uint32{id}) {
		t.Fatalf("suspension %v, want the pending id once", s)
	}
	if _, err := m.Sleep(2); err != journal.ErrClosed {
		t.Fatalf("Sleep after suspension: %v, want ErrClosed", err)
	}
}

// CANCEL wins over an await it arrived before, in arrival order, so a
// replay decides the same way.
func TestAwaitManyCancelOrder(t *testing.T) {
	cases := []struct {
		name  string
		mode  journal.Mode
		feeds []proto.Message
		want  journal.Status
	}{
		{"any: completion then cancel", journal.FirstCompleted, []proto.Message{sleepDone(1), cancelSignal()}, journal.Ready},
		{"any: cancel then completion", journal.FirstCompleted, []proto.Message{cancelSignal(), sleepDone(1)}, journal.Cancelled},
		{"all: one, cancel, other", journal.AllCompleted, []proto.Message{sleepDone(1), cancelSignal(), sleepDone(2)}, journal.Cancelled},
		{"all: both then cancel", journal.AllCompleted, []proto.Message{sleepDone(2), sleepDone(1), cancelSignal()}, journal.Ready},
		{"all: cancel while pending", journal.AllCompleted, []proto.Message{sleepDone(1), cancelSignal()}, journal.Cancelled},
	}
	for _, v := range versions {
		for _, c := range cases {
			t.Run(fmt.Sprintf("v%d/%s", v, c.name), func(t *testing.T) {
				m := started(t, v, input("x"))
				mustInput(t, m)
				_, _ = m.Sleep(1)
				_, _ = m.Sleep(2)
				if err := feed(t, m, c.feeds...); err != nil {
					t.Fatal(err)
				}
				if st := m.AwaitMany([]uint32{1, 2}, c.mode); st != c.want {
					t.Fatalf("AwaitMany = %v, want %v", st, c.want)
				}
			})
		}
	}
}

// A wait during replay that the journal cannot satisfy, with commands
// recorded after it, is a journal mismatch (570): the attempt that
// recorded the journal went on past that wait, so what let it go on is
// recorded before those commands. Suspending instead would hide a changed
// handler, for ever when what it waits for never comes.
func TestAwaitDuringReplayTheJournalCannotSatisfy(t *testing.T) {
	recorded := []proto.Message{input("x"), sleepCmd(1, 5), sleepCmd(2, 5), sleepDone(2), runCmd(3, "after"), runDone(3, "v")}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, recorded...)
			mustInput(t, m)
			_, _ = m.Sleep(5)
			_, _ = m.Sleep(5)
			if st := m.AwaitMany([]uint32{2}, journal.AllCompleted); st != journal.Ready {
				t.Fatalf("await of the recorded timer = %v, want Ready", st)
			}
			if st := m.AwaitMany([]uint32{1}, journal.AllCompleted); st != journal.Closed {
				t.Fatalf("await of the unrecorded timer = %v, want Closed by a mismatch", st)
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.ErrorMessageType)
			e := errorOf(t, fs[0])
			if e.GetCode() != 570 || e.GetRelatedCommandIndex() != 3 || !strings.Contains(e.GetMessage(), "waits (all completed) for completion 1") ||
				!strings.Contains(e.GetMessage(), `continues with RunCommand "after"`) {
				t.Fatalf("ErrorMessage %v, want a 570 about the wait, related to command 3", e)
			}
		})
	}
}

// withParam is t with the input p.
func withParam(t journal.CallTarget, p string) journal.CallTarget {
	t.Parameter = []byte(p)
	return t
}
