package maxprocs_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/maxprocs"
)

func TestPolicy(t *testing.T) {
	type step struct {
		cores float64
		want  int
	}
	cases := []struct {
		name    string
		ceiling int
		steps   []step
	}{
		{"a light load stays on one", 8, []step{{0.1, 1}, {0.6, 1}, {0.69, 1}}},
		{"a load nearing one raises at once", 8, []step{{0.8, 2}}},
		{"a heavy load jumps to where it uses half", 8, []step{{2.6, 6}}},
		{"never above the ceiling", 2, []step{{1.9, 2}, {5, 2}}},
		{"lowered only after eight calm samples in a row", 8, []step{
			{0.8, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 1},
		}},
		{"a busier sample restarts the count", 8, []step{
			{0.8, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2},
			{0.5, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 2}, {0.3, 1},
		}},
		{"a steady load in the band stays put", 8, []step{{1.5, 3}, {1.0, 3}, {0.8, 3}, {1.4, 3}, {1.0, 3}}},
		{"a ceiling of one never moves", 1, []step{{3, 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := maxprocs.NewPolicy(c.ceiling)
			for i, s := range c.steps {
				if got := p.Next(s.cores); got != s.want {
					t.Fatalf("sample %d (%.2f cores): GOMAXPROCS %d, want %d", i, s.cores, got, s.want)
				}
			}
		})
	}
}

// TestRunAppliesDecisions drives the loop with a fake clock and CPU meter:
// one at once, a raise after a busy interval, no call while unchanged.
func TestRunAppliesDecisions(t *testing.T) {
	ticks := make(chan time.Time)
	// Run reads the meter once per tick, after taking it: each reading is
	// handed over there, so the loop never reads a later one.
	readings := make(chan time.Duration)
	var cpu time.Duration
	sets := make(chan int, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		maxprocs.Run(ctx, maxprocs.NewPolicy(4), ticks, func() time.Duration { return <-readings }, func(n int) { sets <- n })
	}()
	if n := <-sets; n != 1 {
		t.Fatalf("first GOMAXPROCS %d, want 1", n)
	}
	at := time.Unix(1000, 0)
	tick := func(used time.Duration) {
		cpu += used
		at = at.Add(time.Second)
		ticks <- at
		readings <- cpu
	}
	tick(0)                      // the base
	tick(900 * time.Millisecond) // 0.9 cores: raise to 2
	if n := <-sets; n != 2 {
		t.Fatalf("after 0.9 cores: GOMAXPROCS %d, want 2", n)
	}
	tick(900 * time.Millisecond) // unchanged: no call
	tick(3 * time.Second)        // 3 cores: the ceiling
	if n := <-sets; n != 4 {
		t.Fatalf("after 3 cores: GOMAXPROCS %d, want 4", n)
	}
	cancel()
	<-done
	if len(sets) != 0 {
		t.Fatalf("unexpected calls: %d more", len(sets))
	}
}

// TestStartInProcess runs Start in a child process (GOMAXPROCS is
// process-wide): without GOMAXPROCS in the environment it goes to one,
// and back to the default when its context ends; with it, it is left
// alone.
func TestStartInProcess(t *testing.T) {
	if os.Getenv("MAXPROCS_CHILD") == "1" {
		def := runtime.GOMAXPROCS(0) // the runtime's own: cores or the cgroup's limit
		ctx, cancel := context.WithCancel(context.Background())
		maxprocs.Start(ctx)
		before := runtime.GOMAXPROCS(0)
		cancel()
		deadline := time.Now().Add(10 * time.Second)
		for runtime.GOMAXPROCS(0) == before && before == 1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		os.Stdout.WriteString(strconv.Itoa(def) + " " + strconv.Itoa(before) + " " + strconv.Itoa(runtime.GOMAXPROCS(0)) + "\n")
		os.Exit(0)
	}

	run := func(env ...string) []string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStartInProcess$")
		cmd.Env = append(os.Environ(), append([]string{"MAXPROCS_CHILD=1"}, env...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		return strings.Fields(string(out))
	}
	got := run("GOMAXPROCS=")
	def := got[0]
	if def == "1" {
		t.Skip("the runtime's default is already one (one CPU, or a CPU limit of one)")
	}
	if got[1] != "1" || got[2] != def {
		t.Errorf("adaptive: GOMAXPROCS %s while running, %s after; want 1, then the default %s", got[1], got[2], def)
	}
	if got := run("GOMAXPROCS=" + def); got[1] != def || got[2] != def {
		t.Errorf("GOMAXPROCS=%s in the environment: %s while running, %s after; want it left alone", def, got[1], got[2])
	}
}
