package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// stepsAnswer is the fifth step's value for the load generator's body.
func TestStepsAnswer(t *testing.T) {
	if got, want := string(stepsAnswer([]byte(`{"n":42}`))), `{"n":42,"s":5}`; got != want {
		t.Fatalf("stepsAnswer: %s, want %s", got, want)
	}
}

// The five-step fixtures answer stepsAnswer through `bridge invoke` (a
// local journal: every step executes). FNBENCH_BRIDGE names the bridge
// binary; without it the test is skipped.
func TestStepsFixturesInvoke(t *testing.T) {
	bin := os.Getenv("FNBENCH_BRIDGE")
	if bin == "" {
		t.Skip("FNBENCH_BRIDGE (a bin/bridge) not set")
	}
	bin, _ = filepath.Abs(bin)
	dir := t.TempDir()
	cfgs, err := writeFixtures(dir, 1)
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
