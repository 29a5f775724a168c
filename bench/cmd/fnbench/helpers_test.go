package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}, {0.5, time.Millisecond}} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	three := []time.Duration{10, 20, 30}
	if got := percentile(three, 50); got != 20 {
		t.Errorf("p50 of 3 values = %v, want the middle one", got)
	}
	if got := percentile(three, 99); got != 30 {
		t.Errorf("p99 of 3 values = %v, want the largest", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
}

func TestMedianOfRepetitions(t *testing.T) {
	vals := []float64{5, 1, 3}
	if got := median(vals); got != 3 {
		t.Errorf("median(5,1,3) = %v, want 3", got)
	}
	if !slices.Equal(vals, []float64{5, 1, 3}) {
		t.Error("median reordered its argument")
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4,1,3,2) = %v, want 2.5", got)
	}
	if got := median(nil); got != 0 {
		t.Errorf("median() = %v, want 0", got)
	}
}

// The CPU of a process and of its descendants as sampleCPU counts it from
// procstat's reading: the root's own time as self; its reaped children's
// plus each descendant's own and reaped children's as workers; comm may
// hold spaces and parentheses.
func TestCPUSampleOfAProcessTree(t *testing.T) {
	all, parent := map[int]procstat.Stat{}, map[int]int{}
	for _, line := range []string{
		"10 (bridge) S 1 10 10 0 -1 0 0 0 0 0 250 75 12 3 20 0 9 0 100 1000 200",
		"11 (we (ird) name) S 10 11 11 0 -1 0 0 0 0 0 40 10 5 5 20 0 1 0 200 1000 200",
		"12 (sh) S 11 11 11 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 300 1000 200",
		"20 (other) S 1 20 20 0 -1 0 0 0 0 0 999 999 0 0 20 0 1 0 400 1000 200",
	} {
		st, err := procstat.Parse(line)
		if err != nil {
			t.Fatal(err)
		}
		all[st.PID], parent[st.PID] = st, st.PPID
	}
	cs, err := cpuSampleOf(all, parent, 10)
	if err != nil {
		t.Fatal(err)
	}
	// workers: 10's cutime+cstime 150 ms + 11's 600 ms + 12's 20 ms.
	if want := (cpuSample{self: 3250 * time.Millisecond, workers: 770 * time.Millisecond, count: 2}); cs != want {
		t.Errorf("cpuSampleOf(10) = %+v, want %+v", cs, want)
	}
	if _, err := cpuSampleOf(all, parent, 99); err == nil {
		t.Error("a sample of a process that is gone succeeded")
	}
}

// processTree is this machine's /proc as fnbench walks it: this process is
// in it with its parent.
func TestProcessTreeHasThisProcess(t *testing.T) {
	all, parent := processTree()
	if st, ok := all[os.Getpid()]; !ok || st.PPID != os.Getppid() || parent[os.Getpid()] != os.Getppid() {
		t.Errorf("processTree: self = %+v (present %v), parent %d; want ppid %d", st, ok, parent[os.Getpid()], os.Getppid())
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tbridge\nVmPeak:\t  812345 kB\nVmHWM:\t   30000 kB\nVmRSS:\t   21234 kB\nThreads:\t9\n"
	if got, err := parseStatusKB(status, "VmRSS"); err != nil || got != 21234 {
		t.Errorf("VmRSS = %d, %v; want 21234", got, err)
	}
	if got, err := parseStatusKB(status, "VmHWM"); err != nil || got != 30000 {
		t.Errorf("VmHWM = %d, %v; want 30000", got, err)
	}
	if _, err := parseStatusKB(status, "VmSwap"); err == nil {
		t.Error("a missing line parsed")
	}
	if _, err := parseStatusKB(status, "Threads"); err == nil {
		t.Error("a line without kB parsed as KiB")
	}
}

func TestDescendantsFollowsTheParentChain(t *testing.T) {
	// 1 ← 10 (bridge) ← 11, 12 (workers) ← 13 (a worker's subshell); 20 is
	// unrelated, 21 its child.
	parent := map[int]int{10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
	got := descendants(parent, 10)
	slices.Sort(got)
	if !slices.Equal(got, []int{11, 12, 13}) {
		t.Errorf("descendants(10) = %v, want [11 12 13]", got)
	}
	if got := descendants(parent, 13); len(got) != 0 {
		t.Errorf("descendants of a leaf = %v", got)
	}
}

// synthProc is one synthetic /proc/PID/stat entry, times in ms: own
// utime+stime and reaped children's cutime+cstime.
type synthProc struct {
	pid, ppid   int
	own, reaped int
	zombie      bool
}

// sampleOf is cpuSampleOf root 10 over synthetic entries.
func sampleOf(t *testing.T, ps ...synthProc) cpuSample {
	t.Helper()
	all, parent := map[int]procstat.Stat{}, map[int]int{}
	for _, p := range ps {
		st := procstat.Stat{PID: p.pid, PPID: p.ppid, State: 'S', Utime: time.Duration(p.own) * time.Millisecond, Cutime: time.Duration(p.reaped) * time.Millisecond}
		if p.zombie {
			st.State = 'Z'
		}
		all[p.pid], parent[p.pid] = st, p.ppid
	}
	cs, err := cpuSampleOf(all, parent, 10)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Every process below the peer (10) is counted once between two samples,
// for exactly the time it ran between them, however it started, exited and
// was reaped. Each case's want is worked out by hand from the times the
// processes ran between the samples.
func TestCPUDeltaCountsEveryProcessOnce(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after []synthProc
		self, workers int // ms
	}{{
		name:    "a worker running on",
		before:  []synthProc{{10, 1, 1000, 0, false}, {11, 10, 100, 0, false}},
		after:   []synthProc{{10, 1, 3000, 0, false}, {11, 10, 300, 0, false}},
		self:    2000,
		workers: 200,
	}, {
		// The old count lost it: 11 is gone, its time is in 10's cutime.
		name:    "a worker that exits and is reaped by the peer",
		before:  []synthProc{{10, 1, 1000, 0, false}, {11, 10, 50, 0, false}},
		after:   []synthProc{{10, 1, 1000, 80, false}},
		workers: 30,
	}, {
		// The old count gave 11 the whole 500 ms of 12's life.
		name:    "a subshell alive at the first sample, reaped by its worker",
		before:  []synthProc{{10, 1, 0, 0, false}, {11, 10, 100, 0, false}, {12, 11, 490, 0, false}},
		after:   []synthProc{{10, 1, 0, 0, false}, {11, 10, 150, 500, false}},
		workers: 60, // 11: 50, 12: 10
	}, {
		// A zombie keeps its final times until it is reaped; reaping only
		// moves them into the reaper's cutime. The old count added them
		// again through 11's cutime.
		name:    "a zombie at the first sample, reaped in between",
		before:  []synthProc{{10, 1, 0, 0, false}, {11, 10, 100, 0, false}, {12, 11, 40, 0, true}},
		after:   []synthProc{{10, 1, 0, 0, false}, {11, 10, 100, 40, false}},
		workers: 0,
	}, {
		name:    "a zombie at the second sample",
		before:  []synthProc{{10, 1, 0, 0, false}, {11, 10, 100, 0, false}, {12, 11, 10, 0, false}},
		after:   []synthProc{{10, 1, 0, 0, false}, {11, 10, 100, 0, false}, {12, 11, 25, 0, true}},
		workers: 15,
	}, {
		// Pid 11 exits (reaped by 10), and a new process 11 starts below 10.
		name:    "a pid reused between the samples",
		before:  []synthProc{{10, 1, 0, 0, false}, {11, 10, 100, 0, false}},
		after:   []synthProc{{10, 1, 0, 120, false}, {11, 10, 40, 0, false}},
		workers: 60, // the old 11: 20, the new one: 40
	}, {
		// A subshell started and ended between the samples, its child too.
		name:    "a process tree that lived between the samples only",
		before:  []synthProc{{10, 1, 0, 0, false}, {11, 10, 100, 0, false}},
		after:   []synthProc{{10, 1, 0, 0, false}, {11, 10, 100, 70, false}},
		workers: 70,
	}, {
		name:    "an unrelated process",
		before:  []synthProc{{10, 1, 0, 0, false}, {20, 1, 100, 0, false}},
		after:   []synthProc{{10, 1, 0, 0, false}, {20, 1, 900, 0, false}, {21, 20, 50, 0, false}},
		workers: 0,
	}} {
		self, workers := cpuDelta(sampleOf(t, tc.before...), sampleOf(t, tc.after...))
		if self != time.Duration(tc.self)*time.Millisecond || workers != time.Duration(tc.workers)*time.Millisecond {
			t.Errorf("%s: cpuDelta = %v, %v; want %d ms, %d ms", tc.name, self, workers, tc.self, tc.workers)
		}
	}
}

func TestParseMachineCPU(t *testing.T) {
	stat := "cpu  100 5 50 1000 20 1 2 3 7 0\ncpu0 50 2 25 500 10 0 1 1 0 0\n"
	m, err := parseMachineCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	// busy = user+nice+system+irq+softirq+steal; guest is already in user.
	if m.Busy != 161*procstat.ClockTick || m.Total != 1181*procstat.ClockTick {
		t.Errorf("parseMachineCPU = %+v, want busy 1.61s total 11.81s", m)
	}
	if _, err := parseMachineCPU("intr 1 2 3\n"); err == nil {
		t.Error("a /proc/stat without the cpu line parsed")
	}
}

func TestSameJSONIgnoresWhitespaceOnly(t *testing.T) {
	if !sameJSON([]byte(`{"n": 1}`+"\n"), []byte(`{"n":1}`)) {
		t.Error("whitespace made equal documents differ")
	}
	if sameJSON([]byte(`{"n":2}`), []byte(`{"n":1}`)) || sameJSON([]byte(`nope`), []byte(`nope`)) {
		t.Error("different or invalid documents compared equal")
	}
}

func TestRotateStartsEachRepetitionElsewhere(t *testing.T) {
	ps := []*peer{{Key: "N"}, {Key: "F"}, {Key: "P"}}
	keys := func(ps []*peer) (s string) {
		for _, p := range ps {
			s += p.Key
		}
		return s
	}
	if got := keys(rotate(ps, 1)); got != "FPN" {
		t.Errorf("rotate rep 1 = %s", got)
	}
	if got := keys(rotate(ps, 3)); got != "NFP" {
		t.Errorf("rotate rep 3 = %s", got)
	}
	if keys(ps) != "NFP" {
		t.Error("rotate changed its argument")
	}
}

// TestChildIsFoundAndStopped starts a real process: it must show up as
// this process's descendant with its CPU sampled, and stop must leave
// nothing behind.
func TestChildIsFoundAndStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	c, err := startChild("sleeper", filepath.Join(t.TempDir(), "log"), nil, "sleep", "30")
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop(time.Second)
	s, err := sampleCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	st, err := procstat.Read(c.pid())
	if err != nil {
		t.Fatal(err)
	}
	if _, parent := processTree(); !slices.Contains(descendants(parent, os.Getpid()), c.pid()) || s.count < 1 {
		t.Errorf("child %d not among this process's descendants (%d sampled)", c.pid(), s.count)
	}
	if st.PGID != c.pid() {
		t.Errorf("child's process group = %d, want its own (%d)", st.PGID, c.pid())
	}
	if err := c.stop(5 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := procstat.Read(c.pid()); err == nil {
		t.Errorf("child %d still exists after stop", c.pid())
	}
}

func TestAggregateIngressQuotesMediansPerPeerAndConcurrency(t *testing.T) {
	pt := func(peer string, c, ok int, self time.Duration) ingressPoint {
		lat := make([]time.Duration, ok)
		for i := range lat {
			lat[i] = time.Duration(i+1) * time.Millisecond
		}
		return ingressPoint{Peer: peer, C: c, Load: loadResult{OK: ok, Duration: time.Second, Latencies: lat},
			Self: self, Server: time.Duration(ok) * time.Millisecond}
	}
	pts := []ingressPoint{
		pt("N", 1, 100, 100*time.Millisecond), // 1000 µs/inv
		pt("N", 1, 300, 900*time.Millisecond), // 3000 µs/inv
		pt("N", 1, 200, 400*time.Millisecond), // 2000 µs/inv
		pt("N", 8, 999, time.Second),          // another point: ignored
	}
	row, ok := aggregateIngress(pts, "N", 1)
	if !ok {
		t.Fatal("no row for N c=1")
	}
	if row.RPS != 200 || row.RPSMin != 100 || row.RPSMax != 300 {
		t.Errorf("req/s = %v [%v–%v], want 200 [100–300]", row.RPS, row.RPSMin, row.RPSMax)
	}
	if row.SelfUS != 2000 || row.ServerUS != 1000 || row.OK != 600 {
		t.Errorf("row = %+v, want 2000 µs/inv process, 1000 µs/req server, 600 ok", row)
	}
	if row.P50 != 100 { // p50 of 1..200 ms is 100 ms (the median point)
		t.Errorf("p50 = %v ms, want 100", row.P50)
	}
	if _, ok := aggregateIngress(pts, "F", 1); ok {
		t.Error("a row for a peer that was never measured")
	}
}
