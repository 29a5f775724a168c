package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// The function-mode targets: P against N's throughput at each
// concurrency and restate-server's CPU per request at all of them, S at
// c=32 naming its registrations, F's CPU through restate-server.
func TestFunctionTargets(t *testing.T) {
	pt := func(key string, c, ok int, self, server time.Duration) ingressPoint {
		return ingressPoint{Peer: key, C: c, Load: loadResult{OK: ok, Duration: time.Second, Latencies: []time.Duration{time.Millisecond}}, Self: self, Server: server}
	}
	r := &results{cfg: config{concurrency: []int{1, 32}, regs: registrations{python: 4, bash: 32}}, ingress: []ingressPoint{
		pt("N", 1, 100, 100*time.Millisecond, 300*time.Millisecond), pt("P", 1, 101, 100*time.Millisecond, 290*time.Millisecond),
		pt("N", 32, 400, 400*time.Millisecond, 800*time.Millisecond), pt("P", 32, 396, 400*time.Millisecond, 800*time.Millisecond),
		pt("S", 32, 320, 640*time.Millisecond, 700*time.Millisecond), pt("F", 32, 500, 150*time.Millisecond, 700*time.Millisecond),
	}}
	var b strings.Builder
	writeTargets(&b, r)
	got := b.String()
	for _, want := range []string{
		"≥ 1.0× N's at c=1 | P 101 [101–101] vs N 100 [100–100] req/s (1.010×); deployment CPU per invocation P 0.99× of N's | **met** |",
		"≥ 1.0× N's at c=32 | P 396 [396–396] vs N 400 [400–400] req/s (0.990×)",
		"| restate-server CPU per request for P ≤ N's | c=1: P 2871 vs N 3000 µs/req (0.96×); c=32: P 2020 vs N 2000 µs/req (1.01×) | **missed** |",
		"at c=32 (32 warm Bash registrations) | S 320 [320–320] vs N 400 [400–400] req/s (0.800×); deployment CPU per invocation S 2000 µs (bridge 2000, workers 0), 2.00× of N's | **met** |",
		"(through restate-server, c=32) | F 300 µs vs N 1000 µs (0.30×) | **met** |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
}

// The analysis appended to a report can be replaced by newer notes; the
// generated part stays as it is.
func TestNotesReplaceTheAnalysisOnly(t *testing.T) {
	first := withNotes("# report\n\ntables\n", []byte("old analysis\n"))
	again := withNotes(first, []byte("new analysis"))
	if want := "# report\n\ntables\n\n" + notesMarker + "\n\nnew analysis\n"; again != want {
		t.Fatalf("got %q, want %q", again, want)
	}
}

// "CPU total" is the median over repetitions of process+workers of the
// same point, not the sum of the two columns' medians, which may come from
// different repetitions; the ×N ratios and the targets use it.
func TestCPUTotalIsTheMedianOfPerPointSums(t *testing.T) {
	const ms = time.Millisecond
	pt := func(key string, self, workers time.Duration) ingressPoint {
		return ingressPoint{Peer: key, C: 32, Load: loadResult{OK: 100, Duration: time.Second, Latencies: []time.Duration{ms}}, Self: self, Workers: workers}
	}
	// Per invocation (µs): S (100+900, 900+100, 500+0): process median
	// 500, workers median 100, totals 1000, 1000, 500: median 1000, not
	// 600. N: 1000 every time.
	r := &results{cfg: config{concurrency: []int{32}, regs: registrations{bash: 32}}, ingress: []ingressPoint{
		pt("S", 10*ms, 90*ms), pt("S", 90*ms, 10*ms), pt("S", 50*ms, 0),
		pt("N", 100*ms, 0), pt("N", 100*ms, 0), pt("N", 100*ms, 0),
	}}
	row, ok := aggregateIngress(r.ingress, "S", 32)
	if !ok || row.SelfUS != 500 || row.WorkersUS != 100 || row.TotalUS != 1000 {
		t.Errorf("S row = process %v, workers %v, total %v; want 500, 100, 1000", row.SelfUS, row.WorkersUS, row.TotalUS)
	}
	var b strings.Builder
	writeTargets(&b, r)
	if want := "deployment CPU per invocation S 1000 µs (bridge 500, workers 100), 1.00× of N's"; !strings.Contains(b.String(), want) {
		t.Errorf("targets lack %q:\n%s", want, b.String())
	}
	b.Reset()
	writeIngressTable(&b, r, []*peer{{Key: "N"}, {Key: "S"}}, "N")
	if want := "| 500 | 100 | 1.00× |"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q (process, workers, CPU total ×N):\n%s", want, b.String())
	}

	dp := func(key string, self, workers time.Duration) directPoint {
		return directPoint{Peer: key, C: 1, Stats: restatetest.Stats{Invocations: 100, Duration: time.Second}, Self: self, Workers: workers}
	}
	d := []directPoint{dp("F", 10*ms, 90*ms), dp("F", 90*ms, 10*ms), dp("F", 50*ms, 0)}
	if row, ok := aggregateDirect(d, "F", 1); !ok || row.SelfUS != 500 || row.WorkersUS != 100 || row.TotalUS != 1000 {
		t.Errorf("direct F row = process %v, workers %v, total %v; want 500, 100, 1000", row.SelfUS, row.WorkersUS, row.TotalUS)
	}
}
