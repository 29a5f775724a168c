package bash_test

import (
	"strings"
	"testing"
)

// Rule: "stderr goes to logs" line by line; "every line carries run_uid
// and invocation_id".
func TestStderrGoesToInvocationLogs(t *testing.T) {
	f := newFixture(t, "h.chatty", map[string]string{"h.sh": handlerSh})
	w := f.start(t)
	if got := string(f.mustInvoke(t, w, "").Output); got != "out" {
		t.Fatalf("output = %q: stderr leaked into it", got)
	}
	for _, msg := range []string{"to stderr", "partial"} {
		recs := f.logs.Records(msg)
		if len(recs) != 1 || recs[0]["message"] != msg || recs[0]["invocation_id"] != "inv-1" ||
			recs[0]["run_uid"] != "run-1" || recs[0]["source"] != "handler" {
			t.Fatalf("records for %q = %v", msg, recs)
		}
	}
	// Output of the file while it was sourced, stdout included, goes to the
	// registration's logger.
	for _, msg := range []string{"sourcing h.sh", "sourcing h.sh, on stderr"} {
		found := false
		for _, r := range f.logs.Records(msg) {
			if r["message"] == msg && r["run_uid"] == "run-1" && r["invocation_id"] == nil {
				found = true
			}
		}
		if !found {
			t.Fatalf("no registration-level record %q: %q", msg, f.logs.Messages())
		}
	}
	for _, m := range f.logs.Messages() {
		if strings.Contains(m, "fnbridge-log-sync") {
			t.Fatalf("log sync marker leaked: %q", m)
		}
	}
}

// Rule: "A handler that prints megabytes to stderr in one line must not
// block or blow memory".
func TestMegabyteStderrLine(t *testing.T) {
	f := newFixture(t, "h.bigline", map[string]string{"h.sh": handlerSh})
	w := f.start(t)
	const size = 8 << 20
	if got := string(f.mustInvoke(t, w, "8388608").Output); got != "done" {
		t.Fatalf("output = %q", got)
	}
	recs := f.logs.Records("xxxx")
	if len(recs) != 1 {
		t.Fatalf("%d records for the long line, want 1", len(recs))
	}
	if msg, _ := recs[0]["message"].(string); len(msg) != 16<<10 {
		t.Fatalf("logged %d bytes, want 16 KiB", len(msg))
	}
	if got := recs[0]["truncated_bytes"]; got != float64(size-16<<10) {
		t.Fatalf("truncated_bytes = %v, want %d", got, size-16<<10)
	}
}
