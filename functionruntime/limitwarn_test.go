package functionruntime

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// A handler that sets processes or memory where nothing enforces it (no
// pids cgroup; no memory cgroup, so memory bounds each process alone) is
// warned about once, naming the handler and the field; defaults and
// "unlimited" are left to the info line about the mechanisms.
func TestUnenforcedLimitsAreAWarningOncePerHandler(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	set := DefaultWorkerLimits()
	set.Processes, set.Memory = 32, 128<<20
	// Warnings are once per process: a directory of this run's own keeps
	// -count=N and other tests from having warned already.
	dir := t.TempDir()
	for range 3 {
		warnUnenforced(log, "h.f", dir, set, false, false)
	}
	warnUnenforced(log, "h.g", dir, set, true, false)                    // processes enforced
	warnUnenforced(log, "h.d", dir, DefaultWorkerLimits(), false, false) // defaults
	warnUnenforced(log, "h.u", dir, WorkerLimits{}, false, false)        // unlimited
	warnUnenforced(log, "h.e", dir, set, true, true)                     // all enforced

	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if m["level"] != "warn" {
			t.Errorf("not a warning: %s", line)
		}
		got = append(got, m["handler"].(string)+" "+m["limit"].(string))
		if !strings.Contains(m["message"].(string), m["limit"].(string)) {
			t.Errorf("message does not name the field: %s", line)
		}
	}
	if want := []string{"h.f processes", "h.f memory", "h.g memory"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("warnings %q, want %q\n%s", got, want, buf.String())
	}
}
