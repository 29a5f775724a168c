package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
)

// This file holds the measuring side of chaos_test.go: /proc readers for
// the bridge's workers, descriptors and memory, the parser of the
// handlers' marker file, and the log of injected faults that explains
// duplicate executions.

// isWorkerComm matches the adapters' worker processes (python3, bash).
func isWorkerComm(comm string) bool {
	return strings.HasPrefix(comm, "python") || comm == "bash"
}

// workersOf lists the live python/bash children of pid: the adapters'
// workers, each the leader of its own process group.
func workersOf(pid int) []procstat.Stat {
	var out []procstat.Stat
	for _, p := range childrenOf(pid) {
		if isWorkerComm(p.Comm) {
			out = append(out, p)
		}
	}
	return out
}

// rssBytes is the resident set size of pid (VmRSS).
func rssBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return -1
}

// execution is one run of a handler for one invocation id, or of one
// step of a steps-mode invocation, as a marker file tells it: the handlers
// append "start ID PID NS TOKEN" (steps: "start ID STEP PID NS TOKEN")
// before their work and the same with "end" after it, with O_APPEND, so
// the file order is the order in which those writes happened.
type execution struct {
	id, token      string
	step           string // the step's name; empty for a function-mode execution
	pid            int    // the worker process (python3, or the bash worker: $$)
	startNS, endNS int64  // wall clock (CLOCK_REALTIME), 0 endNS: no end line
	startLine      int    // line number of the start record
	endLine        int    // line number of the end record, -1 when none
}

// readMarker parses the function-mode marker file into executions grouped
// by id, in file order of their start lines.
func readMarker(path string) (map[string][]*execution, int, error) {
	return parseMarker(path, false)
}

// stepKey names one step of one invocation.
type stepKey struct{ id, step string }

// readStepMarker parses the steps-mode marker file into executions grouped
// by invocation id and step, in file order of their start lines.
func readStepMarker(path string) (map[stepKey][]*execution, int, error) {
	byID, n, err := parseMarker(path, true)
	if err != nil {
		return nil, n, err
	}
	out := map[stepKey][]*execution{}
	for id, xs := range byID {
		for _, x := range xs {
			k := stepKey{id, x.step}
			out[k] = append(out[k], x)
		}
	}
	return out, n, nil
}

// parseMarker reads a marker file; withStep: its lines carry a step name
// after the id. A file that does not exist yet has no executions.
func parseMarker(path string, withStep bool) (map[string][]*execution, int, error) {
	byID := map[string][]*execution{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return byID, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	byToken := map[string]*execution{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	want := 5
	if withStep {
		want = 6
	}
	for sc.Scan() {
		line := sc.Text()
		n++
		fl := strings.Fields(line)
		if len(fl) != want {
			return nil, n, fmt.Errorf("marker line %d malformed: %q", n, line)
		}
		step := ""
		if withStep {
			step, fl = fl[2], append(fl[:2:2], fl[3:]...)
		}
		pid, err1 := strconv.Atoi(fl[2])
		ns, err2 := strconv.ParseInt(fl[3], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, n, fmt.Errorf("marker line %d malformed: %q", n, line)
		}
		switch fl[0] {
		case "start":
			if byToken[fl[4]] != nil {
				return nil, n, fmt.Errorf("marker line %d: execution token %s started twice", n, fl[4])
			}
			e := &execution{id: fl[1], step: step, token: fl[4], pid: pid, startNS: ns, startLine: n, endLine: -1}
			byToken[e.token] = e
			byID[e.id] = append(byID[e.id], e)
		case "end":
			e := byToken[fl[4]]
			if e == nil || e.id != fl[1] || e.step != step {
				return nil, n, fmt.Errorf("marker line %d: end of an execution that never started: %q", n, line)
			}
			e.endNS, e.endLine = ns, n
		default:
			return nil, n, fmt.Errorf("marker line %d malformed: %q", n, line)
		}
	}
	return byID, n, sc.Err()
}

// chaosEvent is one injected fault, with the wall-clock time it happened
// (the same clock the handlers stamp their markers with).
type chaosEvent struct {
	// "bridge-kill", "worker-kill", "restate-restart"; the cluster run's
	// "bridge-drain" (SIGTERM), "restate-node-kill" (one node down) and
	// "leader-change" (a node took a partition over, which restate-server
	// also does on its own: it is logged, not injected)
	kind string
	// UnixNano; till is the end of a restart, drain or outage window, or
	// when the killed worker's process group was gone (2 s at most)
	at, till int64
	pid      int // the killed worker
	// workers of the killed bridge incarnation, recorded just before the
	// kill: an execution on one of them belonged to that incarnation.
	workers map[int]bool
}

// chaosLog records faults concurrently.
type chaosLog struct {
	mu     sync.Mutex
	events []chaosEvent
}

func (l *chaosLog) add(e chaosEvent) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *chaosLog) count(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.kind == kind {
			n++
		}
	}
	return n
}

// overlapCause names why ex, which started after the journaled execution
// w had ended, ran in an attempt that overlapped w's (see
// chaosPlan.overlapping): the first node kill, leader change, drain or
// bridge kill within overlapWindow before ex started. It is "" when the
// plan does not allow overlapping attempts or no such fault applies.
func (r *chaosRun) overlapCause(w, ex *execution) string {
	if !r.plan.overlapping {
		return ""
	}
	from := min(w.startNS, ex.startNS) - int64(overlapWindow)
	r.faults.mu.Lock()
	defer r.faults.mu.Unlock()
	var first *chaosEvent
	for i := range r.faults.events {
		e := &r.faults.events[i]
		switch e.kind {
		case "restate-node-kill", "restate-restart", "leader-change", "bridge-drain", "bridge-kill":
			if e.till >= from && e.at <= ex.startNS && (first == nil || e.at < first.at) {
				first = e
			}
		}
	}
	if first == nil {
		return ""
	}
	return "an attempt overlapping the journaled one (started after it ended, without its completion) after " + first.kind
}

// cause explains why execution x was not the one whose result Restate
// journaled, given the next execution of the same id started at next: the
// earliest fault that applies to x. A fault applies when it is a SIGKILL
// of x's own worker between x's start (or as it started) and next, a
// SIGKILL of the bridge incarnation x's worker belonged to, any bridge
// SIGKILL between x's start and next, or a restate-server restart, node
// outage, bridge drain or partition leader change overlapping that
// window. Whether x
// had written its end line by the fault says whether it was interrupted
// mid-execution or lost its result after finishing; for the latter,
// exposed is how long before the fault the run had ended.
func (l *chaosLog) cause(x *execution, next int64) (cause string, exposed time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first *chaosEvent
	for i := range l.events {
		e := &l.events[i]
		applies := false
		switch e.kind {
		case "worker-kill":
			applies = e.pid == x.pid && e.till >= x.startNS && e.at <= next
		case "bridge-kill":
			applies = e.workers[x.pid] || (e.at >= x.startNS && e.at <= next)
		case "restate-restart", "restate-node-kill", "bridge-drain", "leader-change":
			applies = e.till >= x.startNS && e.at <= next
		}
		if applies && (first == nil || e.at < first.at) {
			first = e
		}
	}
	if first == nil {
		return "unexplained (no fault between this execution and the next attempt)", 0
	}
	what := map[string]string{"worker-kill": "worker SIGKILLed", "bridge-kill": "bridge SIGKILLed", "restate-restart": "restate-server restarted",
		"restate-node-kill": "a restate-server node SIGKILLed", "bridge-drain": "a bridge drained (SIGTERM)",
		"leader-change": "a partition moved to a new leader node"}[first.kind]
	switch {
	case x.startNS > first.at && first.kind == "bridge-kill":
		// The fault is stamped just before SIGKILL is sent, but the
		// kernel closes the dying bridge's descriptors (and so the
		// workers' lifelines) only at the end of its teardown: a request
		// the bridge had already delivered can start in that window, and
		// the worker group's guardian kills it at once.
		// TestChaosBridgeKillLeavesNoHandlerProcess checks nothing survives.
		return what + " just before the execution began (request already delivered; killed with the worker's group)", 0
	case x.startNS > first.at:
		return what + " while the execution began", 0
	case x.endLine < 0 || x.endNS > first.at:
		return what + " mid-execution", 0
	}
	return what + " after the run ended, before its completion was journaled", time.Duration(first.at - x.endNS)
}

// around renders the faults within 5 s of t, relative to t (ms), for
// diagnosing a duplicate no fault explains.
func (l *chaosLog) around(t int64) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for _, e := range l.events {
		if d := time.Duration(e.at - t); d > -5*time.Second && d < 5*time.Second {
			parts = append(parts, fmt.Sprintf("%s %+dms", e.kind, d.Milliseconds()))
		}
	}
	if len(parts) == 0 {
		return "none within 5s"
	}
	return strings.Join(parts, ", ")
}

// sortedCounts renders a cause → count map, largest first.
func sortedCounts(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var b bytes.Buffer
	for _, x := range all {
		fmt.Fprintf(&b, "\n      %6d  %s", x.v, x.k)
	}
	if b.Len() == 0 {
		return " none"
	}
	return b.String()
}

// fdLinks returns the targets of pid's open descriptors ("pipe:[123]",
// "socket:[456]", "/path").
func fdLinks(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, l)
		}
	}
	return out
}

// bridgeFDs counts the bridge's descriptors: total, "own", which leaves
// out pipes whose other end a live worker (or a process of a worker's
// group) holds and the pidfds kept for its child processes, how many
// of the own ones are sockets, and the pidfds. Own descriptors (listeners,
// connections, the log, pipes of dead workers) must not grow with the
// number of invocations or worker kills; the per-worker pipes and pidfds
// rise and fall with the warm workers.
func bridgeFDs(pid int) (total, own, sockets, pidfds, workers int) {
	ws := workersOf(pid)
	groups := map[int]bool{}
	for _, w := range ws {
		groups[w.PGID] = true
	}
	held := map[string]bool{}
	for _, p := range liveInGroups(groups) {
		for _, l := range fdLinks(p.PID) {
			if strings.HasPrefix(l, "pipe:") {
				held[l] = true
			}
		}
	}
	links := fdLinks(pid)
	for _, l := range links {
		switch {
		case held[l]:
		case l == "anon_inode:[pidfd]":
			pidfds++
		default:
			own++
			if strings.HasPrefix(l, "socket:") {
				sockets++
			}
		}
	}
	return len(links), own, sockets, pidfds, len(ws)
}

// busyWorkers returns the worker PIDs that have an execution in flight
// according to the last lines of the marker files (function-mode lines
// "start ID PID NS TOKEN", steps-mode lines "start ID STEP PID NS TOKEN").
func busyWorkers(paths ...string) map[int]bool {
	out := map[int]bool{}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if len(b) > 64<<10 {
			b = b[len(b)-64<<10:]
		}
		open := map[string]int{} // token -> pid
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 6 {
				f = append(f[:2:2], f[3:]...) // drop the step name
			}
			if len(f) != 5 {
				continue
			}
			switch f[0] {
			case "start":
				pid, _ := strconv.Atoi(f[2])
				open[f[4]] = pid
			case "end":
				delete(open, f[4])
			}
		}
		for _, pid := range open {
			out[pid] = true
		}
	}
	return out
}
