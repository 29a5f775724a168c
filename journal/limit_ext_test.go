package journal_test

import (
	"fmt"
	"strings"
	"testing"

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
