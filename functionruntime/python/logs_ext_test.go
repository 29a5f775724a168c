package python_test

import (
	"strings"
	"testing"
)

// Rule: "print() and logging go to the logs", captured "line by line" into
// the invocation's logger: "every line carries run_uid and invocation_id";
// print never reaches the output.
func TestHandlerOutputGoesToInvocationLogs(t *testing.T) {
	f := newFixture(t, "h.chatty", map[string]string{
		"h.py": "print('loading at import')\n" + handlerPy,
	})
	w := f.start(t)
	res := f.mustInvoke(t, w, "null")
	if string(res.Output) != `"quiet"` {
		t.Fatalf("output = %s: printed text leaked into the output", res.Output)
	}
	// No waiting: Invoke returns only after the invocation's lines were logged.
	for _, msg := range []string{"hello from print", "WARNING:root:hello from logging", "partial line without newline"} {
		recs := f.logs.Records(msg)
		if len(recs) != 1 {
			t.Fatalf("%d records for %q, want 1; handler lines: %q", len(recs), msg, f.logs.Messages())
		}
		r := recs[0]
		if r["message"] != msg || r["run_uid"] != "run-1" || r["invocation_id"] != "inv-1" || r["source"] != "handler" {
			t.Fatalf("record for %q = %v", msg, r)
		}
	}
	recs := f.logs.Records("loading at import")
	if len(recs) != 1 || recs[0]["run_uid"] != "run-1" || recs[0]["invocation_id"] != nil {
		t.Fatalf("import-time line = %v, want the registration logger without invocation_id", recs)
	}
	for _, m := range f.logs.Messages() {
		if strings.Contains(m, "fnbridge-log-sync") {
			t.Fatalf("log sync marker leaked into the logs: %q", m)
		}
	}
}

// Rule: "A handler that prints megabytes to stderr in one line must not
// block or blow memory"; "long lines are split/truncated to a max".
func TestMegabyteLogLineIsTruncated(t *testing.T) {
	f := newFixture(t, "h.bigline", map[string]string{"h.py": handlerPy})
	w := f.start(t)
	const size = 8 << 20
	if res := f.mustInvoke(t, w, "8388608"); string(res.Output) != `"done"` {
		t.Fatalf("output = %s", res.Output)
	}
	recs := f.logs.Records("xxxx")
	if len(recs) != 1 {
		t.Fatalf("%d records for the long line, want 1", len(recs))
	}
	msg, _ := recs[0]["message"].(string)
	if len(msg) != 16<<10 || strings.Trim(msg, "x") != "" {
		t.Fatalf("logged %d bytes, want the first 16 KiB", len(msg))
	}
	if got := recs[0]["truncated_bytes"]; got != float64(size-16<<10) {
		t.Fatalf("truncated_bytes = %v, want %d", got, size-16<<10)
	}
	if recs[0]["invocation_id"] != "inv-1" {
		t.Fatalf("long line not attributed to the invocation: %v", recs[0]["invocation_id"])
	}
}
