package main

import (
	"context"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// measureAdapter collects every distribution section 3 reports, with the
// requested sample counts, for every runtime, and each sample is a real
// checked call (a wrong output fails the measurement).
func TestMeasureAdapterCollectsEachDistribution(t *testing.T) {
	for _, tool := range []string{"python3", "bash"} {
		testtool.Require(t, "", tool, "to measure its adapter")
	}
	dir := t.TempDir()
	if _, err := writeFixtures(dir, registrations{1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := adapterCounts{warm: 3, idle: 2, fresh: 2, cold: 1}
	for _, rt := range adapterRuntimes {
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
