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

// The journal bound counts what the machine keeps, whichever frame brings
// it over: the StartMessage (state), a replayed entry, a notification
// while processing. The attempt then fails asking for a pause.
func TestLimitJournal(t *testing.T) {
	big := strings.Repeat("x", 600)
	cases := map[string]struct {
		before []proto.Message // fed first, within the bound
		over   proto.Message   // takes it past 1000 bytes
	}{
		"StartMessage state": {over: &servicev1.StartMessage{KnownEntries: 1, StateMap: []*servicev1.StartMessage_StateEntry{
			{Key: []byte("k"), Value: []byte(big + big)}}}},
		"replayed entry": {before: []proto.Message{&servicev1.StartMessage{KnownEntries: 3}, input(big)},
			over: runCmd(1, big)},
		"notification while processing": {before: []proto.Message{&servicev1.StartMessage{KnownEntries: 2}, input(big), runCmd(1, "invoke")},
			over: runDone(1, big)},
	}
	for _, v := range versions {
		for name, c := range cases {
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				m := newMachine(t, v)
				m.LimitJournal(1000)
				if len(c.before) > 0 {
					if err := feed(t, m, c.before...); err != nil {
						t.Fatalf("within the bound: %v", err)
					}
				}
				if m.Done() {
					t.Fatal("closed within the bound")
				}
				if err := feed(t, m, c.over); err == nil {
					t.Fatal("the frame over the bound was accepted")
				}
				fs := drain(t, m)
				wantTypes(t, fs, wire.ErrorMessageType)
				e := errorOf(t, fs[0])
				if e.GetCode() != 571 || !strings.Contains(e.GetMessage(), "exceeds the 1000 bytes") {
					t.Fatalf("ErrorMessage %v, want 571 naming the bound", e)
				}
				if v == 7 && e.GetBehavior() != servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE {
					t.Fatalf("v7: %v, want behavior PAUSE", e)
				}
				if v < 7 && e.NextRetryDelay == nil {
					t.Fatalf("v%d: %v, want a long next_retry_delay", v, e)
				}
			})
		}
	}
	t.Run("no bound by default", func(t *testing.T) {
		m := started(t, 7, input(strings.Repeat("x", 1<<20)))
		if m.Done() {
			t.Fatal("an unbounded machine refused a 1 MiB input")
		}
	})
}

// A message over the runtime's message size limit (a step's value, the
// output) is never sent: restate-server refuses it, and a retry would
// only produce it again. The attempt fails saying so, asking the runtime
// to pause the invocation, and nothing else follows.
func TestMessagesOverTheLimitAreNotSent(t *testing.T) {
	big := strings.Repeat("x", 2048)
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d/run value", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			m.LimitMessages(1024)
			mustInput(t, m)
			id, _, err := m.RunStart("big")
			if err != nil {
				t.Fatal(err)
			}
			_ = m.ProposeRun(id, journal.Result{Value: []byte(big)})
			if _, st := m.Await(id); st != journal.Closed {
				t.Fatalf("Await after the refused proposal = %v, want Closed", st)
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.RunCommandType, wire.ErrorMessageType)
			if e := errorOf(t, fs[1]); !strings.Contains(e.GetMessage(), "ProposeRunCompletion") || !strings.Contains(e.GetMessage(), "over the 1024 bytes a message to the runtime may have") {
				t.Fatalf("ErrorMessage %v, want one naming the message and the limit", e)
			}
		})
		t.Run(fmt.Sprintf("v%d/a named step's value", v), func(t *testing.T) {
			// The step as the user wrote it, not the message type: the
			// README promises a 500 naming the step and its size.
			m := started(t, v, input("x"))
			m.LimitMessages(1024)
			mustInput(t, m)
			id, _, err := m.RunStart("fetch")
			if err != nil {
				t.Fatal(err)
			}
			_ = m.ProposeRunOf(id, journal.Result{Value: []byte(big)}, 1, "fetch")
			fs := drain(t, m)
			wantTypes(t, fs, wire.RunCommandType, wire.ErrorMessageType)
			e := errorOf(t, fs[1])
			if !strings.Contains(e.GetMessage(), `the result of step "fetch" makes a 2053-byte message, over the 1024 bytes a message to the runtime may have`) ||
				e.GetRelatedCommandName() != "fetch" || e.GetRelatedCommandIndex() != 1 {
				t.Fatalf("ErrorMessage %v, want one naming the step, its size and the limit", e)
			}
			// Paused on v7; before it, retried after the 5 minutes the
			// README gives for every permanent failure.
			if v < 7 && e.GetNextRetryDelay() != uint64((5*time.Minute).Milliseconds()) {
				t.Fatalf("next_retry_delay %d ms, want 5 minutes", e.GetNextRetryDelay())
			}
		})
		t.Run(fmt.Sprintf("v%d/output", v), func(t *testing.T) {
			m := started(t, v, input("x"))
			m.LimitMessages(1024)
			mustInput(t, m)
			if err := m.Output(journal.Result{Value: []byte(big)}); err == nil {
				t.Fatal("Output over the limit returned nil")
			}
			fs := drain(t, m)
			wantTypes(t, fs, wire.ErrorMessageType)
			if e := errorOf(t, fs[0]); !strings.Contains(e.GetMessage(), "OutputCommand of") {
				t.Fatalf("ErrorMessage %v", e)
			}
		})
	}
	// Under the limit, nothing changes.
	m := started(t, 6, input("x"))
	m.LimitMessages(1024)
	mustInput(t, m)
	if err := m.Output(journal.Result{Value: []byte("small")}); err != nil {
		t.Fatal(err)
	}
	wantTypes(t, drain(t, m), wire.OutputCommandType, wire.EndMessageType)
}
