// Package maxprocs owns the bridge's GOMAXPROCS: it lets the Go scheduler
// run on as many cores as the process is using, not as many as the machine
// has.
//
// The bridge relays frames between restate-server and worker processes; at
// the loads most deployments see it uses a fraction of one core. With
// GOMAXPROCS at the machine's core count, every goroutine it wakes (a
// frame read, a worker's answer) makes the runtime wake another thread to
// look for it, which finds nothing and sleeps again: measured on two
// cores, a third of the bridge's CPU per invocation at one invocation at a
// time, for no throughput (bench/NOTES.md). So the controller starts at
// one and raises GOMAXPROCS as soon as the process's CPU use nears it, up
// to the runtime's own default (the machine's cores, or the cgroup's CPU
// limit), and lowers it again after the use has stayed well below for a
// while. GOMAXPROCS set in the environment pins it, as for any Go program.
package maxprocs

import (
	"context"
	"math"
	"os"
	"runtime"
	"syscall"
	"time"
)

// Interval is how often the controller samples the process's CPU use.
const Interval = 250 * time.Millisecond

const (
	// raiseAt: a sample that used more than this share of GOMAXPROCS
	// raises it at once, to where the same use is the aim share of it.
	raiseAt = 0.7
	aim     = 0.5
	// lowerAt: samples below this share of one core less keep counting
	// towards lowering it by one; calmSamples in a row lower it.
	lowerAt     = 0.35
	calmSamples = 8
)

// Policy decides GOMAXPROCS from successive samples of CPU use. Its zero
// value is not usable: make one with NewPolicy.
type Policy struct {
	max, cur, calm int
}

// NewPolicy starts at one, with the given ceiling (at least one).
func NewPolicy(ceiling int) *Policy {
	return &Policy{max: max(ceiling, 1), cur: 1}
}

// Next takes the cores the process used over the last interval (CPU time
// per wall time) and returns the GOMAXPROCS to run with until the next.
func (p *Policy) Next(cores float64) int {
	switch {
	case cores > raiseAt*float64(p.cur) && p.cur < p.max:
		n := int(math.Ceil(cores / aim))
		p.cur = min(max(n, p.cur+1), p.max)
		p.calm = 0
	case p.cur > 1 && cores < lowerAt*float64(p.cur-1):
		if p.calm++; p.calm >= calmSamples {
			p.cur--
			p.calm = 0
		}
	default:
		p.calm = 0
	}
	return p.cur
}

// Current is the GOMAXPROCS the policy last decided.
func (p *Policy) Current() int { return p.cur }

// Start runs the controller in the background until ctx ends, and then
// gives the runtime back its default. It does nothing when GOMAXPROCS is
// set in the environment or the default is already one.
func Start(ctx context.Context) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	ceiling := runtime.GOMAXPROCS(0)
	if ceiling <= 1 {
		return
	}
	runtime.GOMAXPROCS(1) // now, not when the goroutine first runs
	t := time.NewTicker(Interval)
	go func() {
		defer t.Stop()
		Run(ctx, NewPolicy(ceiling), t.C, processCPU, func(n int) { runtime.GOMAXPROCS(n) })
		runtime.SetDefaultGOMAXPROCS()
	}()
}

// Run is the controller's loop until ctx ends: it applies the policy's
// first decision at once, then one per tick after the first, from the CPU
// time cpu reports (the process's, all threads) against the wall time
// between the ticks. set is called only when the decision changes.
func Run(ctx context.Context, p *Policy, ticks <-chan time.Time, cpu func() time.Duration, set func(int)) {
	applied := p.Current()
	set(applied)
	var lastCPU time.Duration
	var lastWall time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticks:
			used := cpu()
			wall := now.Sub(lastWall)
			if lastWall.IsZero() || wall <= 0 {
				lastCPU, lastWall = used, now
				continue
			}
			n := p.Next(float64(used-lastCPU) / float64(wall))
			lastCPU, lastWall = used, now
			if n != applied {
				set(n)
				applied = n
			}
		}
	}
}

// processCPU is the user and system time of every thread of the process so
// far (its children are not counted: the workers are theirs).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
