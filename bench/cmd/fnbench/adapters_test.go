package main

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// measureAdapter collects every distribution section 3 reports, with the
// requested sample counts, for both runtimes, and each sample is a real
// checked call (a wrong output fails the measurement).
func TestMeasureAdapterCollectsEachDistribution(t *testing.T) {
	for _, tool := range []string{"python3", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required in CI: %v", tool, err)
			}
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	dir := t.TempDir()
	if _, err := writeFixtures(dir, registrations{1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := adapterCounts{warm: 3, idle: 2, fresh: 2, cold: 1}
	for _, rt := range []string{"python", "bash"} {
		pt, err := measureAdapter(ctx, rt, functionsDir(dir), n)
		if err != nil {
			t.Fatalf("%s: %v", rt, err)
		}
		for name, got := range map[string]struct {
			d    []time.Duration
			want int
		}{
			"warm": {pt.Warm, n.warm}, "warm after idle": {pt.WarmIdle, n.idle},
			"fresh": {pt.Fresh, n.fresh}, "adapter cold": {pt.AdapterCold, n.cold},
		} {
			if len(got.d) != got.want || got.d[0] <= 0 {
				t.Errorf("%s %s: %v, want %d positive samples", rt, name, got.d, got.want)
			}
		}
	}
}
