package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
)

// inFlightRSS is the memory bridge's RSS while 32 invocations are in
// flight through restate-server.
type inFlightRSS struct {
	IdleKB, PeakKB int64
	// MaxInFlight is the most handler `sleep` processes seen at once under
	// the bridge: evidence that the 32 invocations really overlapped.
	MaxInFlight int
	Errors      int
	FirstError  string
}

// measureInFlight sends n concurrent calls of a handler that sleeps, and
// samples the bridge's VmRSS (workers excluded: only the bridge's own pid)
// every 10 ms until they all answer.
func measureInFlight(ctx context.Context, rs *restateserver.Server, p *peer, n int) (inFlightRSS, error) {
	var out inFlightRSS
	idle, err := rssKB(p.proc.pid())
	if err != nil {
		return out, err
	}
	out.IdleKB, out.PeakKB = idle, idle
	client := newIngressClient(n)
	defer client.CloseIdleConnections()
	url := rs.IngressURL() + "/" + p.Service + "/" + p.Handler
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := callOnce(ctx, client, url, []byte(`{}`), nil); err != nil {
				mu.Lock()
				out.Errors++
				if out.FirstError == "" {
					out.FirstError = err.Error()
				}
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return out, nil
		case <-ctx.Done():
			<-done
			return out, ctx.Err()
		case <-tick.C:
		}
		if kb, err := rssKB(p.proc.pid()); err == nil && kb > out.PeakKB {
			out.PeakKB = kb
		}
		out.MaxInFlight = max(out.MaxInFlight, countDescendants(p.proc.pid(), "sleep"))
	}
}

// countDescendants counts the processes named comm below root.
func countDescendants(root int, comm string) int {
	all, parent := processTree()
	n := 0
	for _, pid := range descendants(parent, root) {
		if all[pid].Comm == comm {
			n++
		}
	}
	return n
}

// workerMem is one warm registration's memory: its worker process (a
// direct child of the bridge) and everything below it (a Bash worker keeps
// its next invocation's subshell forked in advance).
type workerMem struct {
	// RSS is the worker's own VmRSS; TreeRSS sums VmRSS over the worker and
	// its descendants (pages they share counted in each); TreePss sums
	// their proportional set size (shared pages split), 0 when
	// /proc/PID/smaps_rollup is not readable.
	RSS, TreeRSS, TreePss int64
}

// workerMemory returns one workerMem per direct child of root.
func workerMemory(root int) ([]workerMem, error) {
	all, parent := processTree()
	if _, ok := all[root]; !ok {
		return nil, fmt.Errorf("process %d is gone", root)
	}
	var out []workerMem
	for pid, pp := range parent {
		if pp != root {
			continue
		}
		var w workerMem
		for i, p := range append([]int{pid}, descendants(parent, pid)...) {
			kb, err := rssKB(p)
			if err != nil {
				continue
			}
			if i == 0 {
				w.RSS = kb
			}
			w.TreeRSS += kb
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/smaps_rollup"); err == nil {
				if pss, err := parseStatusKB(string(b), "Pss"); err == nil {
					w.TreePss += pss
				}
			}
		}
		out = append(out, w)
	}
	return out, nil
}
