package proc

import (
	"testing"

	"github.com/rs/zerolog"
)

// A handler's line keeps its own level: a leading level word in any case,
// bracketed or followed by ':' or a space, or a JSON line's "level";
// anything else, words that only start like a level included, is info.
func TestHandlerLineLevels(t *testing.T) {
	tests := []struct {
		line, level, message, fields string
	}{
		{"plain text", "info", "plain text", ""},
		{"", "info", "", ""},
		{"ERROR db down", "error", "ERROR db down", ""},
		{"error: no such file", "error", "error: no such file", ""},
		{"Error:no space after the colon", "error", "Error:no space after the colon", ""},
		{"WARNING:root:disk low", "warn", "WARNING:root:disk low", ""},
		{"warn\tafter a tab", "warn", "warn\tafter a tab", ""},
		{"WaRn mixed case", "warn", "WaRn mixed case", ""},
		{"[warning] bracketed", "warn", "[warning] bracketed", ""},
		{"[INFO]no space after the bracket", "info", "[INFO]no space after the bracket", ""},
		{"[DEBUG]: bracketed with a colon", "debug", "[DEBUG]: bracketed with a colon", ""},
		{"TRACE entering f", "trace", "TRACE entering f", ""},
		{"DEBUG", "debug", "DEBUG", ""},
		{"CRITICAL:root:gone", "error", "CRITICAL:root:gone", ""},
		{"fatal: not a git repository", "error", "fatal: not a git repository", ""},
		{"[error", "info", "[error", ""},
		{"errors were found", "info", "errors were found", ""},
		{"warned you", "info", "warned you", ""},
		{"info-only", "info", "info-only", ""},
		{"debugging", "info", "debugging", ""},
		{" ERROR indented", "info", " ERROR indented", ""},
		{"the ERROR is later", "info", "the ERROR is later", ""},
		{"[notice] unknown word", "info", "[notice] unknown word", ""},
		{`{"level":"error","msg":"db down"}`, "error", "db down", ""},
		{`{"level":"WARNING","message":"slow","took_ms":12,"user":"x"}`, "warn", "slow", `{"took_ms":12,"user":"x"}`},
		{`  {"level":"debug","msg":"padded"}  `, "debug", "padded", ""},
		{`{"level":"trace","msg":"m","message":"msg wins"}`, "trace", "m", `{"message":"msg wins"}`},
		{`{"level":"info","event":"no msg: the whole line"}`, "info", `{"level":"info","event":"no msg: the whole line"}`, ""},
		{`{"level":"error","msg":42}`, "error", `{"level":"error","msg":42}`, ""},
		{`{"level":"notice","msg":"an unknown level"}`, "info", `{"level":"notice","msg":"an unknown level"}`, ""},
		{`{"level":3,"msg":"a number"}`, "info", `{"level":3,"msg":"a number"}`, ""},
		{`{"msg":"no level"}`, "info", `{"msg":"no level"}`, ""},
		{`{"level":"error","msg":"cut off`, "info", `{"level":"error","msg":"cut off`, ""},
		{`ERROR {"level":"debug"}`, "error", `ERROR {"level":"debug"}`, ""},
	}
	for _, tt := range tests {
		got := parseHandlerLine([]byte(tt.line))
		want, _ := zerolog.ParseLevel(tt.level)
		if got.level != want || got.message != tt.message || string(got.fields) != tt.fields {
			t.Errorf("%q: level %s, message %q, fields %s; want %s, %q, %s", tt.line, got.level, got.message, got.fields, want, tt.message, tt.fields)
		}
	}
}

// The capture logs each line at its level with its fields, and the
// logger's own level filters a handler's debug lines out.
func TestCaptureLogsLinesAtTheirLevel(t *testing.T) {
	rec, _ := feedAll(t, "ERROR one\n{\"level\":\"warn\",\"msg\":\"two\",\"n\":1}\nDEBUG hidden\nthree\n", 5, 100)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []string
	for _, r := range rec.recs {
		s := r["level"].(string) + " " + r["message"].(string)
		if f, ok := r["fields"].(map[string]any); ok {
			s += " +fields"
			if f["n"] != float64(1) {
				t.Errorf("fields = %v, want n=1", f)
			}
		}
		got = append(got, s)
	}
	want := []string{"error ERROR one", "warn two +fields", "debug DEBUG hidden", "info three"}
	if len(got) != len(want) {
		t.Fatalf("records %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d = %q, want %q", i, got[i], want[i])
		}
	}

	filtered := &recorder{}
	c := newLogCapture(nil, zerolog.New(filtered).Level(zerolog.InfoLevel), 100)
	c.feed([]byte("DEBUG hidden\nTRACE hidden\nshown\n"))
	if got := filtered.messages(); len(got) != 1 || got[0] != "shown" {
		t.Errorf("at info level the capture logged %q, want only \"shown\"", got)
	}
	if got := c.lastLines(3); len(got) != 3 {
		t.Errorf("filtered lines are still remembered for error messages: %q", got)
	}
}
