package journal_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/journal"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

func signalValue(idx uint32, v string) *servicev1.SignalNotificationMessage {
	return &servicev1.SignalNotificationMessage{SignalId: &servicev1.SignalNotificationMessage_Idx{Idx: idx},
		Result: &servicev1.SignalNotificationMessage_Value{Value: &servicev1.Value{Content: []byte(v)}}}
}

func signalFailure(idx uint32, code uint32, msg string) *servicev1.SignalNotificationMessage {
	return &servicev1.SignalNotificationMessage{SignalId: &servicev1.SignalNotificationMessage_Idx{Idx: idx},
		Result: &servicev1.SignalNotificationMessage_Failure{Failure: &servicev1.Failure{Code: code, Message: msg}}}
}

// Rule (spec, Awakeable identifier): the id surfaced to user code is a
// fixed prefix and "the Base64 URL Safe encoding of StartMessage.id,
// followed by the awakeable's signal index, encoded as a 32-bit big-endian
// unsigned integer"; signal indexes start after the built-in ones, at 17.
// The prefix is sign_1, the form restate-server resolves as a signal for
// protocol v4 and later (the spec's prom_1 is the pre-v4 form).
func TestAwakeableIDs(t *testing.T) {
	m := started(t, 7, input("x"))
	mustInput(t, m)
	for want := uint32(17); want < 20; want++ {
		id, h, err := m.Awakeable()
		if err != nil {
			t.Fatal(err)
		}
		rest, ok := strings.CutPrefix(id, "sign_1")
		if !ok || strings.ContainsAny(rest, "+/=") {
			t.Fatalf("id %q: want sign_1 and unpadded base64url", id)
		}
		raw, err := base64.RawURLEncoding.DecodeString(rest)
		if err != nil || !bytes.Equal(raw[:len(raw)-4], []byte("id")) || binary.BigEndian.Uint32(raw[len(raw)-4:]) != want {
			t.Fatalf("id %q decodes to %q (%v), want StartMessage.id then %d", id, raw, err, want)
		}
		if h != journal.SignalHandle(want) {
			t.Fatalf("handle %v, want signal %d", h, want)
		}
	}
	if out := drain(t, m); len(out) != 0 {
		t.Fatalf("creating awakeables journaled %v; it is not a command", types(out))
	}
	// The example of the spec (after its prefix) is of this form: 24
	// bytes of invocation id and the index.
	id := journal.AwakeableID(bytes.Repeat([]byte{0xfb}, 24), 1)
	if len(id) != len("sign_1")+38 {
		t.Fatalf("id %q: want 38 characters after the prefix for a 24-byte invocation id", id)
	}
}

// Rule (spec, Signals): a signal "addressed by signal index" completes the
// awakeable of that index, with a value or a failure, whether it arrives
// before or after the await; a second delivery of an index carries
// nothing new; unrelated indexes and CANCEL are not its completion.
func TestAwakeableCompletion(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			_, a, _ := m.Awakeable()
			_, b, _ := m.Awakeable()
			if err := feed(t, m, signalFailure(18, 500, "no approval"), signalValue(17, `"yes"`), signalValue(17, `"again"`), signalValue(40, "x")); err != nil {
				t.Fatal(err)
			}
			if st := m.AwaitHandles([]journal.Handle{a, b}, journal.AllCompleted); st != journal.Ready {
				t.Fatalf("await = %v, want ready", st)
			}
			if res, ok := m.CompletedHandle(a); !ok || string(res.Value) != `"yes"` {
				t.Fatalf("awakeable 17 = %+v %v, want the first value", res, ok)
			}
			if res, ok := m.CompletedHandle(b); !ok || res.Failure == nil || res.Failure.Code != 500 || res.Failure.Message != "no approval" {
				t.Fatalf("awakeable 18 = %+v %v, want the rejection", res, ok)
			}
			_, c, _ := m.Awakeable()
			if st := m.AwaitHandles([]journal.Handle{c}, journal.AllCompleted); st != journal.Pending {
				t.Fatalf("await of awakeable 19 = %v, want pending", st)
			}
			if err := feed(t, m, signalValue(19, "later")); err != nil {
				t.Fatal(err)
			}
			if res, _ := m.CompletedHandle(c); string(res.Value) != "later" {
				t.Fatalf("awakeable 19 = %+v", res)
			}
		})
	}
}

// Rule (spec, Suspension): waiting_signals is a leaf-id set of the await
// point: an await on an awakeable suspends on its signal index, next to
// CANCEL (v5/v6 flat; v7 a Future tree, ALL_COMPLETED of a completion and
// a signal nested under FIRST_COMPLETED with CANCEL).
func TestAwakeableSuspensionPerVersion(t *testing.T) {
	first, all := servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED, servicev1.CombinatorType_COMBINATOR_TYPE_ALL_COMPLETED
	for _, v := range versions {
		for _, c := range []struct {
			name string
			mode journal.Mode
			v7   *servicev1.Future
		}{
			{"any", journal.FirstCompleted, &servicev1.Future{WaitingCompletions: []uint32{1}, WaitingSignals: []uint32{1, 17}, CombinatorType: first}},
			{"all", journal.AllCompleted, &servicev1.Future{WaitingSignals: []uint32{1}, CombinatorType: first,
				NestedFutures: []*servicev1.Future{{WaitingCompletions: []uint32{1}, WaitingSignals: []uint32{17}, CombinatorType: all}}}},
		} {
			t.Run(fmt.Sprintf("v%d/%s", v, c.name), func(t *testing.T) {
				m := started(t, v, input("x"))
				mustInput(t, m)
				sleep, _ := m.Sleep(1)
				_, a, _ := m.Awakeable()
				drain(t, m)
				m.InputClosed()
				if st := m.AwaitHandles([]journal.Handle{journal.CompletionHandle(sleep), a}, c.mode); st != journal.Suspended {
					t.Fatalf("await = %v, want suspended", st)
				}
				s := drain(t, m)[0].msg.(*servicev1.SuspensionMessage)
				want := &servicev1.SuspensionMessage{WaitingCompletions: []uint32{1}, WaitingSignals: []uint32{1, 17}}
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

// A handler that takes the CANCEL (it goes on after a cancelled await,
// as SDKs let a cancelled invocation compensate) sees later awaits
// complete normally, and a later suspension no longer waits on CANCEL,
// which has arrived already.
func TestTakeCancel(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			_, a, _ := m.Awakeable()
			if err := feed(t, m, cancelSignal(), signalValue(17, "v")); err != nil {
				t.Fatal(err)
			}
			if st := m.AwaitHandles([]journal.Handle{a}, journal.AllCompleted); st != journal.Cancelled {
				t.Fatalf("await = %v, want cancelled (CANCEL arrived first)", st)
			}
			m.TakeCancel()
			if st := m.AwaitHandles([]journal.Handle{a}, journal.AllCompleted); st != journal.Ready || !m.Cancelled() {
				t.Fatalf("await after TakeCancel = %v (cancelled %v), want ready", st, m.Cancelled())
			}
			sleep, _ := m.Sleep(1)
			drain(t, m)
			m.InputClosed()
			if st := m.AwaitMany([]uint32{sleep}, journal.AllCompleted); st != journal.Suspended {
				t.Fatalf("await = %v, want suspended", st)
			}
			s := drain(t, m)[0].msg.(*servicev1.SuspensionMessage)
			want := &servicev1.SuspensionMessage{WaitingCompletions: []uint32{sleep}}
			if v == 7 {
				want = &servicev1.SuspensionMessage{AwaitingOn: &servicev1.Future{WaitingCompletions: []uint32{sleep},
					CombinatorType: servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED}}
			}
			if !proto.Equal(s, want) {
				t.Fatalf("suspension %v, want %v (no CANCEL)", s, want)
			}
		})
	}
}

func completeAwakeableCmd(id string, v string) *servicev1.CompleteAwakeableCommandMessage {
	return &servicev1.CompleteAwakeableCommandMessage{AwakeableId: id,
		Result: &servicev1.CompleteAwakeableCommandMessage_Value{Value: &servicev1.Value{Content: []byte(v)}}}
}

func cancelCmd(target string) *servicev1.SendSignalCommandMessage {
	return &servicev1.SendSignalCommandMessage{TargetInvocationId: target,
		SignalId: &servicev1.SendSignalCommandMessage_Idx{Idx: 1}, Result: &servicev1.SendSignalCommandMessage_Void{Void: &servicev1.Void{}}}
}

// Rule (spec, Commands): CompleteAwakeableCommand "resolve[s] a
// previously-created awakeable in another invocation" and SendSignalCommand
// is "also used internally to cancel invocations"; both are non-completable
// (no completion id). The promise commands are completable: each gets a
// completion id its notification carries.
func TestKeyedCommandsProcessing(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			mustInput(t, m)
			if err := m.CompleteAwakeable("sign_1abc", journal.Result{Value: []byte(`{"ok":true}`)}); err != nil {
				t.Fatal(err)
			}
			if err := m.CompleteAwakeable("sign_1def", journal.Result{Failure: &journal.Failure{Code: 500, Message: "no"}}); err != nil {
				t.Fatal(err)
			}
			if err := m.CancelInvocation("inv_1target"); err != nil {
				t.Fatal(err)
			}
			get, _ := m.GetPromise("approval")
			peek, _ := m.PeekPromise("approval")
			done, _ := m.CompletePromise("approval", journal.Result{Value: []byte(`"yes"`)})
			rej, _ := m.CompletePromise("other", journal.Result{Failure: &journal.Failure{Code: 400, Message: "rejected"}})
			if get != 1 || peek != 2 || done != 3 || rej != 4 {
				t.Fatalf("completion ids %d %d %d %d, want 1..4", get, peek, done, rej)
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.CompleteAwakeableCommandType, wire.CompleteAwakeableCommandType, wire.SendSignalCommandType,
				wire.GetPromiseCommandType, wire.PeekPromiseCommandType, wire.CompletePromiseCommandType, wire.CompletePromiseCommandType)
			want := []proto.Message{
				completeAwakeableCmd("sign_1abc", `{"ok":true}`),
				&servicev1.CompleteAwakeableCommandMessage{AwakeableId: "sign_1def",
					Result: &servicev1.CompleteAwakeableCommandMessage_Failure{Failure: &servicev1.Failure{Code: 500, Message: "no"}}},
				cancelCmd("inv_1target"),
				&servicev1.GetPromiseCommandMessage{Key: "approval", ResultCompletionId: 1},
				&servicev1.PeekPromiseCommandMessage{Key: "approval", ResultCompletionId: 2},
				&servicev1.CompletePromiseCommandMessage{Key: "approval", ResultCompletionId: 3,
					Completion: &servicev1.CompletePromiseCommandMessage_CompletionValue{CompletionValue: &servicev1.Value{Content: []byte(`"yes"`)}}},
				&servicev1.CompletePromiseCommandMessage{Key: "other", ResultCompletionId: 4,
					Completion: &servicev1.CompletePromiseCommandMessage_CompletionFailure{CompletionFailure: &servicev1.Failure{Code: 400, Message: "rejected"}}},
			}
			for i, w := range want {
				if !proto.Equal(fs[i].msg.(proto.Message), w) {
					t.Fatalf("command %d = %v, want %v", i, fs[i].msg, w)
				}
			}
			if err := feed(t, m,
				&servicev1.PeekPromiseCompletionNotificationMessage{CompletionId: peek, Result: &servicev1.PeekPromiseCompletionNotificationMessage_Void{Void: &servicev1.Void{}}},
				&servicev1.CompletePromiseCompletionNotificationMessage{CompletionId: done, Result: &servicev1.CompletePromiseCompletionNotificationMessage_Void{Void: &servicev1.Void{}}},
				&servicev1.CompletePromiseCompletionNotificationMessage{CompletionId: rej, Result: &servicev1.CompletePromiseCompletionNotificationMessage_Failure{Failure: &servicev1.Failure{Code: 409, Message: "already completed"}}},
				&servicev1.GetPromiseCompletionNotificationMessage{CompletionId: get, Result: &servicev1.GetPromiseCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: []byte(`"yes"`)}}},
			); err != nil {
				t.Fatal(err)
			}
			if res, st := m.Await(peek); st != journal.Ready || !res.Void {
				t.Fatalf("peek = %+v %v, want void (unresolved)", res, st)
			}
			if res, st := m.Await(done); st != journal.Ready || !res.Void {
				t.Fatalf("complete = %+v %v, want void", res, st)
			}
			if res, st := m.Await(rej); st != journal.Ready || res.Failure == nil || res.Failure.Code != 409 {
				t.Fatalf("second complete = %+v %v, want its failure", res, st)
			}
			if res, st := m.Await(get); st != journal.Ready || string(res.Value) != `"yes"` {
				t.Fatalf("get = %+v %v, want the value", res, st)
			}
		})
	}
}

// Rule (spec, Journal model): replayed commands are matched in order; a
// recorded command is not sent again and its recorded completion is the
// result.
func TestKeyedCommandsReplay(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, input("x"),
				completeAwakeableCmd("sign_1abc", `1`),
				cancelCmd("inv_1target"),
				&servicev1.GetPromiseCommandMessage{Key: "approval", ResultCompletionId: 1},
				&servicev1.GetPromiseCompletionNotificationMessage{CompletionId: 1, Result: &servicev1.GetPromiseCompletionNotificationMessage_Failure{Failure: &servicev1.Failure{Code: 500, Message: "denied"}}},
				&servicev1.SetStateCommandMessage{Key: []byte("count"), Value: &servicev1.Value{Content: []byte("2")}},
				&servicev1.PeekPromiseCommandMessage{Key: "approval", ResultCompletionId: 2},
			)
			mustInput(t, m)
			if err := m.CompleteAwakeable("sign_1abc", journal.Result{Value: []byte("1")}); err != nil {
				t.Fatal(err)
			}
			if err := m.CancelInvocation("inv_1target"); err != nil {
				t.Fatal(err)
			}
			get, err := m.GetPromise("approval")
			if err != nil || get != 1 {
				t.Fatalf("GetPromise = %d %v", get, err)
			}
			if res, st := m.Await(get); st != journal.Ready || res.Failure == nil || res.Failure.Message != "denied" {
				t.Fatalf("replayed get = %+v %v", res, st)
			}
			if err := m.SetState("count", []byte("2")); err != nil {
				t.Fatal(err)
			}
			peek, err := m.PeekPromise("approval")
			if err != nil || peek != 2 {
				t.Fatalf("PeekPromise = %d %v", peek, err)
			}
			if v, found, _, _ := m.GetState("count"); !found || string(v) != "2" {
				t.Fatalf("a replayed set is not in the local view: %q %v", v, found)
			}
			// New commands continue after the replayed ids.
			next, _ := m.CompletePromise("approval", journal.Result{Value: []byte("1")})
			if next != 3 {
				t.Fatalf("new completion id %d, want 3", next)
			}
			wantTypes(t, drain(t, m), wire.GetEagerStateCommandType, wire.CompletePromiseCommandType)
		})
	}
}

// Rule (spec, 570 JOURNAL_MISMATCH): "the SDK cannot replay the journal
// because its contents diverge from what user code expects"; the error
// names what the journal has and what the handler issued.
func TestKeyedCommandsMismatch(t *testing.T) {
	cases := []struct {
		name     string
		recorded proto.Message
		issue    func(m *journal.Machine) error
		want     []string
	}{
		{"another awakeable", completeAwakeableCmd("sign_1abc", "1"),
			func(m *journal.Machine) error {
				return m.CompleteAwakeable("sign_1xyz", journal.Result{Value: []byte("1")})
			},
			[]string{`CompleteAwakeableCommand of awakeable "sign_1abc"`, `CompleteAwakeableCommand of awakeable "sign_1xyz"`}},
		{"cancel of another invocation", cancelCmd("inv_a"),
			func(m *journal.Machine) error { return m.CancelInvocation("inv_b") },
			[]string{"SendSignalCommand to inv_a", "SendSignalCommand CANCEL to inv_b"}},
		{"another promise", &servicev1.GetPromiseCommandMessage{Key: "a", ResultCompletionId: 1},
			func(m *journal.Machine) error { _, err := m.GetPromise("b"); return err },
			[]string{`GetPromiseCommand of promise "a"`, `GetPromiseCommand of promise "b"`}},
		{"peek instead of get", &servicev1.GetPromiseCommandMessage{Key: "a", ResultCompletionId: 1},
			func(m *journal.Machine) error { _, err := m.PeekPromise("a"); return err },
			[]string{`GetPromiseCommand of promise "a"`, `PeekPromiseCommand of promise "a" (the handler peeked at it)`}},
		{"state write instead of a promise", &servicev1.CompletePromiseCommandMessage{Key: "a", ResultCompletionId: 1},
			func(m *journal.Machine) error { return m.SetState("a", nil) },
			[]string{`CompletePromiseCommand of promise "a"`, `SetStateCommand of state key "a"`}},
		{"set of another key", &servicev1.SetStateCommandMessage{Key: []byte("a")},
			func(m *journal.Machine) error { return m.SetState("b", nil) },
			[]string{`SetStateCommand of state key "a"`, `SetStateCommand of state key "b"`}},
		// The SDKs compare a replayed command's payload too.
		{"set of another value", &servicev1.SetStateCommandMessage{Key: []byte("a"), Value: &servicev1.Value{Content: []byte("1")}},
			func(m *journal.Machine) error { return m.SetState("a", []byte("2")) },
			[]string{`SetStateCommand of state key "a" with another value (the journal's value is "1", the handler's "2")`}},
		{"awakeable resolved with another value", completeAwakeableCmd("sign_1abc", "1"),
			func(m *journal.Machine) error {
				return m.CompleteAwakeable("sign_1abc", journal.Result{Value: []byte("2")})
			},
			[]string{`with another result (the journal's value is "1", the handler's "2")`}},
		{"awakeable rejected, resolved before", completeAwakeableCmd("sign_1abc", "1"),
			func(m *journal.Machine) error {
				return m.CompleteAwakeable("sign_1abc", journal.Result{Failure: &journal.Failure{Code: 500, Message: "no"}})
			},
			[]string{"the journal resolved it, the handler rejected it"}},
		{"promise resolved with another value", &servicev1.CompletePromiseCommandMessage{Key: "p", ResultCompletionId: 1,
			Completion: &servicev1.CompletePromiseCommandMessage_CompletionValue{CompletionValue: &servicev1.Value{Content: []byte("1")}}},
			func(m *journal.Machine) error {
				_, err := m.CompletePromise("p", journal.Result{Value: []byte("2")})
				return err
			},
			[]string{`CompletePromiseCommand of promise "p" with another result (the journal's value is "1", the handler's "2")`}},
		{"promise rejected, resolved before", &servicev1.CompletePromiseCommandMessage{Key: "p", ResultCompletionId: 1,
			Completion: &servicev1.CompletePromiseCommandMessage_CompletionValue{CompletionValue: &servicev1.Value{Content: []byte("1")}}},
			func(m *journal.Machine) error {
				_, err := m.CompletePromise("p", journal.Result{Failure: &journal.Failure{Code: 409, Message: "no"}})
				return err
			},
			[]string{"the journal resolved it, the handler rejected it"}},
		{"read instead of clear", &servicev1.ClearStateCommandMessage{Key: []byte("a")},
			func(m *journal.Machine) error { _, _, _, err := m.GetState("a"); return err },
			[]string{`ClearStateCommand of state key "a"`, `a read of state key "a"`}},
	}
	for _, v := range versions {
		for _, c := range cases {
			t.Run(fmt.Sprintf("v%d/%s", v, c.name), func(t *testing.T) {
				m := started(t, v, input("x"), c.recorded)
				mustInput(t, m)
				if err := c.issue(m); err == nil {
					t.Fatal("the diverging command was accepted")
				}
				e := errorOf(t, drain(t, m)[0])
				if e.GetCode() != 570 || e.GetRelatedCommandIndex() != 1 {
					t.Fatalf("error %v, want 570 at command 1", e)
				}
				for _, w := range c.want {
					if !strings.Contains(e.GetMessage(), w) {
						t.Fatalf("message %q does not name %q", e.GetMessage(), w)
					}
				}
			})
		}
	}
}

// Rule (spec, Notification shape): each completion type allows only its
// result variants: a CompletePromise completion carrying a value is a
// protocol violation (571).
func TestPromiseNotificationVariantsChecked(t *testing.T) {
	m := started(t, 6, input("x"))
	mustInput(t, m)
	id, _ := m.CompletePromise("p", journal.Result{Value: []byte("1")})
	drain(t, m)
	bad := &servicev1.CompletePromiseCompletionNotificationMessage{CompletionId: id}
	b, _ := proto.Marshal(bad)
	// Field 5 (a value), which CompletePromiseCompletionNotification reserves.
	b = append(b, 0x2a, 0x03, 0x0a, 0x01, 'x')
	h := wire.Header{Type: wire.CompletePromiseCompletionNotificationType, Length: uint32(len(b))}
	if err := m.Receive(h, b); err == nil {
		t.Fatal("a value completing CompletePromise was accepted")
	}
	if e := errorOf(t, drain(t, m)[0]); e.GetCode() != 571 {
		t.Fatalf("error %v, want 571", e)
	}
}
