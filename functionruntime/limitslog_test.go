package functionruntime

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// Processes that outlived a stopped bridge and were killed at start are
// a warning of their own, not a clause inside the info line describing the
// limits, where an operator filtering on warnings would never see them.
func TestStaleWorkersKilledAreAWarning(t *testing.T) {
	var buf bytes.Buffer
	killed := []string{"pid 4343 (sleep) in /cg/fnbridge-77-1"}
	logWorkerLimits(zerolog.New(&buf), "rlimits", true, killed)
	logWorkerLimits(zerolog.New(&buf), "rlimits", true, nil)
	var warns []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if m["level"] == "warn" {
			warns = append(warns, m)
		} else if strings.Contains(line, "4343") {
			t.Errorf("the killed process is in a %v line: %s", m["level"], line)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0]["message"].(string), "killed") {
		t.Fatalf("warnings %v, want one naming what was killed", warns)
	}
	if got, _ := warns[0]["killed"].([]any); len(got) != 1 || got[0] != killed[0] {
		t.Errorf("warning names %v, want %v", got, killed)
	}
}
