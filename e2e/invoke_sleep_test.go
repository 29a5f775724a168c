package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// napSh is the Bash twin of testdata/steps_sleep.py: a step, a durable
// sleep of 3 s, a step; each step appends "<tag> <phase>"
// to sleep.log when it executes.
const napSh = `nap() {
  local before after
  before=$(fnbridge run before -- bash -c 'echo "sh before" >>sleep.log; date +%s%N') || exit
  fnbridge sleep 3 || exit
  after=$(fnbridge run after -- bash -c 'echo "sh after" >>sleep.log; date +%s%N') || exit
  printf '{"tag":"sh","slept":%s}\n' "$(( (after - before) / 1000000 ))e-3"
}
true
`

// TestInvokeSleepSuspends: under `bridge invoke`, a durable sleep longer
// than suspend_after suspends the attempt as it does under Restate: the
// attempt ends, and once the sleep is over a new attempt replays the
// journal. The handler's timeout (2 s) bounds each attempt's code, never
// the 3 s wait, and the step before the sleep executes once.
func TestInvokeSleepSuspends(t *testing.T) {
	requireInterpreters(t)
	ws := newWorkspace(t, "steps_sleep.py")
	writeFile(t, filepath.Join(ws.fn, "nap.sh"), napSh)
	cfg := ws.config(t, `services:
  - name: Local
    handlers:
      - {name: py, runtime: python, dir: fn, handler: steps_sleep.nap, durability: steps, timeout: 2s, suspend_after: 300ms}
      - {name: sh, runtime: bash, dir: fn, handler: nap.nap, durability: steps, timeout: 2s, suspend_after: 300ms}
`)
	for _, tag := range []string{"py", "sh"} {
		t.Run(tag, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			stdout, stderr, code := runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Local/"+tag, `{"tag":"`+tag+`","seconds":3}`)
			took := time.Since(start)
			if code != 0 {
				t.Fatalf("bridge invoke Local/%s: exit %d after %s\n%s", tag, code, took.Round(time.Millisecond), lastLine(stderr))
			}
			var res struct {
				Tag   string  `json:"tag"`
				Slept float64 `json:"slept"`
			}
			if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Tag != tag {
				t.Fatalf("bridge invoke Local/%s printed %q (%v)", tag, stdout, err)
			}
			if took < 3*time.Second || res.Slept < 3 {
				t.Errorf("%s: took %s, the steps %.3fs apart; want the 3 s sleep waited", tag, took, res.Slept)
			}
			var before, after int
			for _, l := range ws.lines(t, "sleep.log") {
				switch l {
				case tag + " before":
					before++
				case tag + " after":
					after++
				}
			}
			if before != 1 || after != 1 {
				t.Errorf("%s: step before executed %d times, after %d; want each once (replayed, not executed again)", tag, before, after)
			}
			if !strings.Contains(stderr, "bridge invoke: suspended until ") {
				t.Errorf("%s: stderr does not say the attempt suspended:\n%s", tag, stderr)
			}
		})
	}
}
