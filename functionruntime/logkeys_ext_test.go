package functionruntime_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// A duration in a log line carries its unit in its key (idle_timeout_ms,
// timeout_ms, elapsed_ms, drain_timeout_ms), as a number of milliseconds.
func TestLogDurationsCarryTheirUnit(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-ms", 1)
	if _, err := h.invoke(ref, "inv-ms", "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.unregister(ref, false, 0); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"registering function": "idle_timeout_ms",
		"invocation started":   "timeout_ms",
		"invocation succeeded": "elapsed_ms",
		"unregistering":        "drain_timeout_ms",
	}
	for _, line := range strings.Split(strings.TrimSpace(h.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		for k := range m {
			for _, word := range []string{"timeout", "elapsed", "duration", "deadline"} {
				if strings.Contains(k, word) && !strings.HasSuffix(k, "_ms") {
					t.Errorf("key %q holds a duration without its unit: %s", k, line)
				}
			}
		}
		if key, ok := want[m["message"].(string)]; ok {
			if _, isNumber := m[key].(float64); !isNumber {
				t.Errorf("%q line has %s = %v, want a number of milliseconds: %s", m["message"], key, m[key], line)
			}
			delete(want, m["message"].(string))
		}
	}
	if len(want) > 0 {
		t.Errorf("lines not logged: %v\n%s", want, h.logs.String())
	}
}
