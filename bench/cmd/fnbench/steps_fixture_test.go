package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// stepsAnswer is the fifth step's value for the load generator's body.
func TestStepsAnswer(t *testing.T) {
	if got, want := string(stepsAnswer([]byte(`{"n":42}`))), `{"n":42,"s":5}`; got != want {
		t.Fatalf("stepsAnswer: %s, want %s", got, want)
	}
}

// The five-step fixtures answer stepsAnswer through `bridge invoke` (a
// local journal: every step executes), with the bridge that BRIDGE_BIN
// names (the Makefile's bin/bridge).
func TestStepsFixturesInvoke(t *testing.T) {
	bin, _ := filepath.Abs(testtool.Require(t, "BRIDGE_BIN", "bridge", "to invoke the five-step fixtures"))
	dir := t.TempDir()
	cfgs, err := writeFixtures(dir, registrations{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	for key, svc := range map[string]string{"P5": "PySteps/steps", "S5": "BashSteps/steps"} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, bin, "invoke", svc, `{"n":7}`, "--config", cfgs[key]).Output()
		cancel()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("%s: %v\n%s", key, err, stderr)
		}
		if !sameJSON(out, stepsAnswer([]byte(`{"n":7}`))) {
			t.Errorf("%s: %q, want %s", key, out, stepsAnswer([]byte(`{"n":7}`)))
		}
	}
}

// The five-step targets compare P5 and S5 with N5 at c=32, and a step peer
// that answered nothing (no measured point) misses them.
func TestStepTargetsAgainstN5(t *testing.T) {
	pt := func(key string, ok int, cpu time.Duration) ingressPoint {
		return ingressPoint{Peer: key, C: 32, Load: loadResult{OK: ok, Duration: time.Second, Latencies: []time.Duration{time.Millisecond}}, Self: cpu}
	}
	r := &results{ingress: []ingressPoint{pt("N5", 100, 100*time.Millisecond), pt("P5", 95, 100*time.Millisecond)}}
	var b strings.Builder
	writeStepTargets(&b, r)
	got := b.String()
	for _, want := range []string{"P5 95 [95–95] vs N5 100 [100–100] req/s (0.950×) | **met** |", "(1.05×) | **met** |", "S5 not measured (see the failed points) | **missed** |"} {
		if !strings.Contains(got, want) {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
}
