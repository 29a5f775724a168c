package journal_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/journal"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// longJournal is Input and n runs, each followed by its completion except
// the last ten, whose completions arrive after all of them in reverse
// order (the protocol: notifications need not follow their command).
func longJournal(n int) []proto.Message {
	entries := []proto.Message{input("x")}
	var late []proto.Message
	for k := 1; k <= n; k++ {
		id := uint32(k)
		entries = append(entries, runCmd(id, fmt.Sprintf("s%d", k)))
		done := runDone(id, fmt.Sprintf("v%d", k))
		if k > n-10 {
			late = append([]proto.Message{done}, late...)
			continue
		}
		entries = append(entries, done)
	}
	return append(entries, late...)
}

// A journal far longer than a handful of entries replays like a short one:
// every recorded step returns its own value without executing, and the
// next step is new.
func TestLongJournalReplays(t *testing.T) {
	const n = 3000
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			m := started(t, v, longJournal(n)...)
			mustInput(t, m)
			for k := 1; k <= n; k++ {
				id, execute, err := m.RunStart(fmt.Sprintf("s%d", k))
				if err != nil || execute || id != uint32(k) {
					t.Fatalf("RunStart(s%d) = %d %v %v, want its recorded completion %d", k, id, execute, err, k)
				}
				res, st := m.Await(id)
				if st != journal.Ready || string(res.Value) != fmt.Sprintf("v%d", k) {
					t.Fatalf("Await(s%d) = %q %v, want v%d", k, res.Value, st, k)
				}
			}
			id, execute, err := m.RunStart("new")
			if err != nil || !execute || id != n+1 {
				t.Fatalf("RunStart(new) = %d %v %v, want a new run with id %d", id, execute, err, n+1)
			}
			wantTypes(t, drain(t, m), wire.RunCommandType)
		})
	}
}

// The journal's checks hold deep into a long journal, past the length at
// which entries are found through an index: a second delivery of a
// completion changes nothing, and a reused completion id or a notification
// of the wrong type is a protocol violation (571).
func TestLongJournalChecks(t *testing.T) {
	const n = 100
	t.Run("duplicate delivery keeps the first", func(t *testing.T) {
		m := started(t, 6, longJournal(n)...)
		if err := feed(t, m, runDone(n-50, "again")); err != nil {
			t.Fatal(err)
		}
		mustInput(t, m)
		for k := 1; k <= n-50; k++ {
			_, _, _ = m.RunStart(fmt.Sprintf("s%d", k))
		}
		if res, ok := m.Completed(n - 50); !ok || string(res.Value) != fmt.Sprintf("v%d", n-50) {
			t.Fatalf("Completed(%d) = %q %v, want the first delivery", n-50, res.Value, ok)
		}
	})
	violations := []struct {
		name  string
		extra proto.Message
		want  string
	}{
		{"reused completion id", runCmd(n-40, "again"), fmt.Sprintf("completion id %d of command %d (RunCommand) is already used", n-40, n+1)},
		{"wrong notification type", &servicev1.SleepCompletionNotificationMessage{CompletionId: n - 30, Void: &servicev1.Void{}}, fmt.Sprintf("completion id %d expects RunCompletionNotification", n-30)},
	}
	for _, c := range violations {
		t.Run(c.name, func(t *testing.T) {
			m := newMachine(t, 6)
			entries := append(longJournal(n), c.extra)
			all := append([]proto.Message{&servicev1.StartMessage{Id: []byte("id"), DebugId: "inv_1", KnownEntries: uint32(len(entries))}}, entries...)
			err := feed(t, m, all...)
			je, ok := err.(*journal.Error)
			if !ok || je.Code != journal.CodeProtocolViolation || !strings.Contains(je.Message, c.want) {
				t.Fatalf("err = %v, want a 571 saying %q", err, c.want)
			}
		})
	}
}

// BenchmarkReplayLongJournal receives and replays journals of n steps;
// the time per step stays flat as n grows.
func BenchmarkReplayLongJournal(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		entries := longJournal(n)
		frames := make([][]byte, 0, len(entries)+1)
		for _, msg := range append([]proto.Message{&servicev1.StartMessage{Id: []byte("id"), DebugId: "inv_1", KnownEntries: uint32(len(entries))}}, entries...) {
			f, err := wire.AppendMessage(nil, 0, msg)
			if err != nil {
				b.Fatal(err)
			}
			frames = append(frames, f)
		}
		b.Run(fmt.Sprintf("steps=%d", n), func(b *testing.B) {
			for b.Loop() {
				m, _ := journal.New(6)
				for _, f := range frames {
					if err := m.Receive(wire.ParseHeader(f), f[wire.HeaderSize:]); err != nil {
						b.Fatal(err)
					}
				}
				_, _ = m.Input()
				for k := 1; k <= n; k++ {
					id, _, _ := m.RunStart(fmt.Sprintf("s%d", k))
					if _, st := m.Await(id); st != journal.Ready {
						b.Fatal(st)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/step")
		})
	}
}
