package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// clusterPlan sizes one cluster run: the chaos load (chaosPlan: the
// invocations, their concurrency, the handler sleeps, the steps-mode
// share) and the faults injected into the cluster.
type clusterPlan struct {
	chaosPlan
	replicas int
	faults   []clusterFault
	// minShare is the fair part of the work each replica must have done:
	// with 3 replicas an even split is 33%, and the faults take each one
	// out for a while, so 15% is the least a balanced set-up gives.
	minShare float64
}

// clusterFault is injected once the given fraction of invocations has
// completed: "replica-kill" (SIGKILL, then started again), "replica-drain"
// (SIGTERM, waited for, started again), "node-kill" (a restate-server node
// SIGKILLed), "node-restart" (that node started again, in the background).
// target is the replica or node index.
type clusterFault struct {
	at     float64
	kind   string
	target int
}

var (
	clusterCI = clusterPlan{
		chaosPlan: chaosPlan{name: "cluster-ci", invocations: 400, concurrency: 12, perHandler: 6, maxSleep: 300 * time.Millisecond,
			callDeadline: 3 * time.Minute, steps: true, overlapping: true},
		replicas: 3,
		faults: []clusterFault{
			{0.15, "replica-kill", 0}, {0.30, "node-kill", 1}, {0.50, "node-restart", 1}, {0.65, "replica-drain", 1},
		},
		minShare: 0.15,
	}
	clusterFull = clusterPlan{
		chaosPlan: chaosPlan{name: "cluster-full", invocations: 6000, concurrency: 32, perHandler: 8, maxSleep: 40 * time.Millisecond,
			callDeadline: 10 * time.Minute, steps: true, overlapping: true},
		replicas: 3,
		faults: []clusterFault{
			{0.06, "replica-kill", 0}, {0.12, "replica-kill", 1}, {0.18, "replica-kill", 2},
			{0.25, "node-kill", 1}, {0.32, "replica-kill", 0}, {0.38, "replica-kill", 1},
			{0.46, "node-restart", 1}, {0.54, "replica-kill", 2}, {0.64, "replica-drain", 0},
			{0.74, "replica-kill", 1},
		},
		minShare: 0.15,
	}
)

// TestChaosCluster is the scale-out run: a 3-node restate-server cluster
// (replication 2) and three `bridge serve` replicas (instances r1, r2, r3)
// behind HAProxy in TCP mode, registered once through HAProxy's address.
// The chaos load of TestChaos (Chaos/py, Chaos/sh, ChaosSteps/py,
// ChaosSteps/sh, each invocation with an idempotency key) goes through all
// three nodes' ingresses, invocation i first through node i mod 3 and each
// retry through the next node, while faults are injected: replicas
// SIGKILLed and started again, a restate-server node SIGKILLed and later
// started again, a replica drained with SIGTERM and started again.
//
// Default (in `make test`): 400 invocations at concurrency 12, one fault
// of each kind. CHAOS_CLUSTER_FULL=1 (`make chaos-cluster`): 6,000
// invocations at concurrency 32; every replica SIGKILLed twice (one of
// them three times), node n2 SIGKILLed at 25% and restarted at 46%,
// replica r1 drained at 64%.
//
// It checks what TestChaos checks of the replay rule, with the same code
// (chaosRun.tally and checkTally, so the same marker files and journal
// cross-checks): nothing lost, no execution (or step) after its journaled
// completion, every duplicate attributed to a fault; besides the injected
// faults, the partition leader changes the nodes log count as causes
// (restate-server moves partitions on its own after the cluster formed and
// when a node rejoins, and a new leader re-invokes what was in flight).
// Then: each replica
// completed at least minShare of the invocations (its "invocation" log
// records with outcome ok), a drained replica exited 0, and for each fault
// it prints how long after it the last invocation then in flight
// completed, the lowest throughput in the 10 s after it (completions over
// 1 s, against the 5 s before) and how long the faulted part took to serve
// again.
func TestChaosCluster(t *testing.T) {
	plan := clusterCI
	if os.Getenv("CHAOS_CLUSTER_FULL") == "1" {
		plan = clusterFull
	}
	r := newClusterRun(t, plan)
	r.load()
	r.inject()
	r.verifyCluster()
}

// clusterRun is one TestChaosCluster run: a chaosRun whose ingresses are
// the cluster's nodes, its replicas and HAProxy.
type clusterRun struct {
	*chaosRun
	cplan    clusterPlan
	cluster  *restateserver.Cluster
	lb       *haproxy
	replicas []*bridgeServe

	mu         sync.Mutex
	recoveries []clusterRecovery
	nodeDown   map[int]time.Time
	restarts   sync.WaitGroup // node restarts in the background
	drains     int
}

func newClusterRun(t *testing.T, plan clusterPlan) *clusterRun {
	t.Helper()
	restateserver.Binary(t)
	requireInterpreters(t)
	requireHAProxy(t)
	ws, marker, stepsMarker := chaosWorkspace(t)
	// The nodes first: their ports are picked free and bound at their
	// start, and a replica's port picked before could be taken by one.
	cluster := restateserver.StartCluster(t, restateserver.ClusterOptions{})
	addrs := testtool.FreeAddrs(t, plan.replicas)
	// One file for every replica: each gets its own --listen and --instance.
	cfg := ws.config(t, chaosConfig(addrs[0], marker, stepsMarker, plan.perHandler, 30*time.Second))
	replicas := make([]*bridgeServe, plan.replicas)
	for i := range replicas {
		replicas[i] = newBridgeServe(t, cfg, addrs[i], "info", "--instance", fmt.Sprintf("r%d", i+1))
		replicas[i].start()
	}
	lb := startHAProxy(t, addrs)
	for _, s := range lb.servers {
		if !lb.waitUp(s, 10*time.Second) {
			t.Fatalf("HAProxy does not see replica %s up", s)
		}
	}
	cluster.Nodes[0].Register(t, lb.URI(), false)
	for i, n := range cluster.Nodes {
		if !knowsServices(n, 30*time.Second, "Chaos", "ChaosSteps") {
			t.Fatalf("node n%d does not know the services registered through n1", i+1)
		}
	}
	run := newChaosRun(t, plan.chaosPlan, &chaosEnv{marker: marker, stepsMarker: stepsMarker, srv: cluster.Nodes[0], b: replicas[0]})
	run.ingresses = cluster.Nodes
	return &clusterRun{chaosRun: run, cplan: plan, cluster: cluster, lb: lb, replicas: replicas, nodeDown: map[int]time.Time{}}
}

// inject runs the plan's faults as the load reaches them.
func (r *clusterRun) inject() {
	sched := append([]clusterFault(nil), r.cplan.faults...)
	sort.SliceStable(sched, func(i, j int) bool { return sched[i].at < sched[j].at })
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
loop:
	for len(sched) > 0 {
		select {
		case <-r.loadDone:
			break loop
		case <-tick.C:
		}
		if float64(r.completed.Load()) >= sched[0].at*float64(r.plan.invocations) {
			r.fault(sched[0])
			sched = sched[1:]
		}
	}
	<-r.loadDone
	r.elapsed = time.Since(r.begin)
	r.restarts.Wait()
	if len(sched) > 0 {
		r.t.Errorf("the load finished before %d scheduled faults could be injected: %v", len(sched), sched)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.nodeDown {
		r.t.Errorf("restate-server node n%d was never restarted", i+1)
	}
}

func (r *clusterRun) recovered(c clusterRecovery) {
	r.mu.Lock()
	r.recoveries = append(r.recoveries, c)
	r.mu.Unlock()
}

// backInRotation waits until HAProxy sees replica i up again and records
// the recovery of fault, injected at at.
func (r *clusterRun) backInRotation(fault string, i int, at time.Time) {
	if !r.lb.waitUp(r.lb.servers[i], 30*time.Second) {
		r.t.Errorf("%s: HAProxy does not see replica %s up again within 30s", fault, r.lb.servers[i])
	}
	r.recovered(clusterRecovery{fault: fault, at: at, back: time.Since(at), what: "replica back in HAProxy's rotation"})
}

func (r *clusterRun) fault(f clusterFault) {
	t := r.t
	switch f.kind {
	case "replica-kill":
		at := time.Now()
		r.killBridge(r.replicas[f.target]) // records the fault, checks the workers' groups, starts it again
		r.backInRotation(fmt.Sprintf("SIGKILL replica r%d", f.target+1), f.target, at)
	case "replica-drain":
		b := r.replicas[f.target]
		at := time.Now()
		b.signal(syscall.SIGTERM)
		exited, ok := b.waitExit(45 * time.Second)
		if !ok {
			t.Fatalf("replica r%d still running 45s after SIGTERM", f.target+1)
		}
		if exited.err != nil {
			t.Errorf("replica r%d exited with %v after its drain, want status 0", f.target+1, exited.err)
		}
		r.faults.add(chaosEvent{kind: "bridge-drain", at: at.UnixNano(), till: exited.at.UnixNano()})
		r.mu.Lock()
		r.drains++
		r.mu.Unlock()
		b.start()
		r.backInRotation(fmt.Sprintf("SIGTERM (drain) replica r%d", f.target+1), f.target, at)
	case "node-kill":
		at := time.Now()
		r.mu.Lock()
		r.nodeDown[f.target] = at
		r.mu.Unlock()
		r.cluster.Nodes[f.target].Kill()
		r.recovered(clusterRecovery{fault: fmt.Sprintf("SIGKILL restate node n%d", f.target+1), at: at})
	case "node-restart":
		r.mu.Lock()
		down, ok := r.nodeDown[f.target]
		delete(r.nodeDown, f.target)
		r.mu.Unlock()
		if !ok {
			t.Fatalf("node-restart of n%d, which is not down", f.target+1)
		}
		at := time.Now()
		r.restarts.Add(1)
		go func() {
			defer r.restarts.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := r.cluster.Nodes[f.target].Relaunch(ctx); err != nil {
				t.Errorf("restarting restate node n%d: %v", f.target+1, err)
				return
			}
			ready := time.Now()
			r.faults.add(chaosEvent{kind: "restate-node-kill", at: down.UnixNano(), till: ready.UnixNano()})
			if !knowsServices(r.cluster.Nodes[f.target], 30*time.Second, "Chaos", "ChaosSteps") {
				t.Errorf("restarted node n%d does not know the services within 30s", f.target+1)
			}
			r.recovered(clusterRecovery{fault: fmt.Sprintf("restart restate node n%d", f.target+1), at: at, back: ready.Sub(at),
				what: fmt.Sprintf("node ready (its admin knew the services %s later)", time.Since(ready).Round(10*time.Millisecond))})
		}()
	default:
		t.Fatalf("unknown cluster fault %q", f.kind)
	}
}

// verifyCluster checks the outcomes as TestChaos does, prints the cluster
// figures and fails on an unfair share or a fault the plan wanted but the
// run did not make.
func (r *clusterRun) verifyCluster() {
	t, plan := r.t, r.cplan
	// restate-server moves partitions between nodes on its own too (after
	// the cluster formed, when a node rejoins); a new leader re-invokes
	// what its partition had in flight. The nodes log each take-over.
	leaderChanges := 0
	for i, n := range r.cluster.Nodes {
		changes, err := n.LeaderChanges()
		if err != nil {
			t.Errorf("node n%d: %v", i+1, err)
		}
		for _, at := range changes {
			if at.After(r.begin) {
				leaderChanges++
				r.faults.add(chaosEvent{kind: "leader-change", at: at.UnixNano(), till: at.UnixNano()})
			}
		}
	}
	x := r.tally()
	fnCompleted := x.fnPython + x.fnBash - x.fnLost
	st := &x.steps

	shares := replicaShares(r.replicas)
	total := 0
	for _, n := range shares {
		total += n
	}
	lbStats, _ := r.lb.serverStats()
	var shareLines, recoveryLines []string
	for i, n := range shares {
		s := lbStats[r.lb.servers[i]]
		shareLines = append(shareLines, fmt.Sprintf("\n      r%d: %5d invocations (%4.1f%%); HAProxy: %d connections since start, %d open at the end",
			i+1, n, 100*float64(n)/float64(max(total, 1)), s.sessions, s.current))
	}
	r.mu.Lock()
	sort.Slice(r.recoveries, func(i, j int) bool { return r.recoveries[i].at.Before(r.recoveries[j].at) })
	for _, c := range r.recoveries {
		recoveryLines = append(recoveryLines, "\n      "+c.String(r.startAt, r.doneAt))
	}
	r.mu.Unlock()
	kills := map[int]int{}
	for _, f := range plan.faults {
		if f.kind == "replica-kill" {
			kills[f.target]++
		}
	}
	r.retryMu.Lock()
	retryReport := sortedCounts(r.retries)
	r.retryMu.Unlock()
	t.Logf(`cluster chaos figures (%s):
  topology:                        3 restate-server nodes (replication 2), %d bridge replicas behind HAProxy (TCP, leastconn), registered once through HAProxy
  invocations:                     %d, concurrency %d through all 3 ingresses, %s
    function mode:                 %d (python %d, bash %d)
    steps mode:                    %d (python %d, bash %d; %d steps each)
  completed with expected result:  %d
  lost:                            %d
  executions after a journaled completion: %d (function mode, file order), %d (steps, file order); journal-time check: %d, %d
  overlapping attempts (started after the journaled execution ended, in an attempt a fault had deposed; counted among the duplicates below): %d (function mode), %d (steps)
  duplicate executions (function mode): %d, by cause:%s
  re-executed steps (steps mode):  %d, by cause:%s
  faults:                          %d replica SIGKILLs, %d drains, %d restate node SIGKILLs (each restarted); %d partition leader changes logged by the nodes
  client retries (same idempotency key), by reason:%s
  per-replica share of the completed invocations (fair: at least %.0f%% each):%s
  recovery after each fault (throughput: the lowest 1 s of completions in the 10 s after, against the 5 s before):%s`,
		plan.name, plan.replicas,
		plan.invocations, plan.concurrency, r.elapsed.Round(time.Millisecond),
		x.fnPython+x.fnBash, x.fnPython, x.fnBash,
		st.python+st.bash, st.python, st.bash, len(chaosStepNames),
		plan.invocations-x.lost, x.lost,
		x.afterCompletion, st.afterCompletion, x.afterJournal, st.afterJournal,
		x.overlapping, st.overlapping,
		x.executions-fnCompleted, sortedCounts(x.causes),
		st.reexecuted, sortedCounts(st.causes),
		r.faults.count("bridge-kill"), r.faults.count("bridge-drain"), r.faults.count("restate-node-kill"), leaderChanges,
		retryReport,
		100*plan.minShare, strings.Join(shareLines, ""),
		strings.Join(recoveryLines, ""))

	r.checkTally(x)
	for i, n := range shares {
		if float64(n) < plan.minShare*float64(total) {
			t.Errorf("replica r%d completed %d of %d invocations (%.1f%%), less than the fair %.0f%%", i+1, n, total, 100*float64(n)/float64(max(total, 1)), 100*plan.minShare)
		}
	}
	want := 0
	for _, n := range kills {
		want += n
	}
	if got := r.faults.count("bridge-kill"); got != want {
		t.Errorf("%d replica SIGKILLs injected, the plan has %d", got, want)
	}
}
