//go:build linux

package proc

import "testing"

// The counters a limit hit is told by, in the event files' formats: v2
// memory.events and pids.events, v1 memory.oom_control and pids.events.
func TestEventCounter(t *testing.T) {
	for _, tc := range []struct {
		file, key string
		want      int64
	}{
		{"low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\noom_group_kill 0\n", "oom_kill", 1},
		{"max 7\n", "max", 7},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 4\n", "oom_kill", 4},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 5", "oom_kill", 5}, // no final newline
		{"max 0\n", "oom_kill", 0},
		{"", "max", 0},
	} {
		if got := eventCounter([]byte(tc.file), tc.key); got != tc.want {
			t.Errorf("eventCounter(%q, %s) = %d, want %d", tc.file, tc.key, got, tc.want)
		}
	}
}
