package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
)

// processTree is one reading of every process's stat (procstat.All) by
// pid, with each one's parent: what the CPU and memory samples walk.
func processTree() (stats map[int]procstat.Stat, parent map[int]int) {
	all := procstat.All()
	stats = make(map[int]procstat.Stat, len(all))
	parent = make(map[int]int, len(all))
	for _, st := range all {
		stats[st.PID] = st
		parent[st.PID] = st.PPID
	}
	return stats, parent
}

// descendants returns every pid below root in the parent tree given as
// pid → ppid (children, grandchildren, ...). Workers run in their own
// process groups, so the parent chain, not the group, is what ties them to
// the bridge.
func descendants(parent map[int]int, root int) []int {
	children := map[int][]int{}
	for pid, pp := range parent {
		children[pp] = append(children[pp], pid)
	}
	var out []int
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// cpuSample is one reading of the CPU counters of a process tree: self is
// the root's own utime+stime; workers is the root's cutime+cstime (its
// reaped children) plus, for every descendant present at the reading
// (zombies included), its utime+stime+cutime+cstime.
//
// The difference of two samples then counts each process exactly once,
// whenever it started or exited: a process's time is in its own entry
// while it is in /proc (a zombie still is, with its final times) and, once
// reaped, in its reaper's cutime, which the kernel adds exactly those
// times to as it removes the entry. Within the tree the reaper is the
// parent, a descendant or the root, both summed, so a reap moves time from
// one term to another and leaves the sum as it was: a process that exits
// between the samples is counted up to its end, and one alive at the
// first sample only from there (its before entry is subtracted). A pid
// reused in between needs no care: the sum does not look at identities,
// the old process's time is in its reaper's cutime and the new one's
// entry started from zero after the first sample; so the samples are
// plain sums, no longer keyed by pid and start time. A process's times
// only grow and, within the tree, only move between terms, so the
// difference is never negative; time is lost only when a process leaves
// the tree alive (an orphan reparented outside it: the bridge is a child
// subreaper, so its workers' orphans stay below it) or is auto-reaped by
// a parent ignoring SIGCHLD (no cutime). Reading /proc is not atomic: a
// process reaped while the tree is read can be missed or seen twice in
// that one reading, an error bounded by that process's CPU.
type cpuSample struct {
	self, workers time.Duration
	count         int // descendants present at the sample
}

func sampleCPU(root int) (cpuSample, error) {
	all, parent := processTree()
	return cpuSampleOf(all, parent, root)
}

// cpuSampleOf is sampleCPU over one reading of processTree.
func cpuSampleOf(all map[int]procstat.Stat, parent map[int]int, root int) (cpuSample, error) {
	st, ok := all[root]
	if !ok {
		return cpuSample{}, fmt.Errorf("process %d is gone", root)
	}
	cs := cpuSample{self: st.CPU(), workers: st.Cutime + st.Cstime}
	for _, pid := range descendants(parent, root) {
		d := all[pid]
		cs.workers += d.CPU() + d.Cutime + d.Cstime
		cs.count++
	}
	return cs, nil
}

// cpuDelta is the CPU used between two samples of one tree: the root's
// own, and that of the rest of the tree (see cpuSample).
func cpuDelta(before, after cpuSample) (self, workers time.Duration) {
	return after.self - before.self, after.workers - before.workers
}

// parseStatusKB returns the value in KiB of one "Name:   123 kB" line of
// /proc/PID/status.
func parseStatusKB(status, name string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status %s: %q is not \"N kB\"", name, strings.TrimSpace(v))
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("status: no %s line", name)
}

// rssKB is VmRSS of pid in KiB.
func rssKB(pid int) (int64, error) { return statusKB(pid, "VmRSS") }

// statusKB is one KiB value of /proc/PID/status (VmRSS, VmHWM, ...).
func statusKB(pid int, name string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	return parseStatusKB(string(b), name)
}

// machineCPU is the machine-wide CPU time from the "cpu" line of /proc/stat:
// busy (everything but idle and iowait) and total, summed over all cores.
type machineCPU struct{ Busy, Total time.Duration }

// parseMachineCPU parses the aggregate "cpu  user nice system idle iowait
// irq softirq steal ..." line of /proc/stat (values in clock ticks).
func parseMachineCPU(procStat string) (machineCPU, error) {
	line, _, _ := strings.Cut(procStat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("/proc/stat: first line %q is not the aggregate cpu line", line)
	}
	var m machineCPU
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("/proc/stat cpu field %d: %v", i+1, err)
		}
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		d := time.Duration(n) * procstat.ClockTick
		m.Total += d
		if i != 3 && i != 4 { // idle, iowait
			m.Busy += d
		}
	}
	return m, nil
}

func readMachineCPU() (machineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	return parseMachineCPU(string(b))
}

// cpuMark is the CPU counters read at one edge of a measured point: the
// peer and its descendants, restate-server (when measured), this process
// (the load generator or the driver) and the whole machine.
type cpuMark struct {
	peer, server cpuSample
	gen          time.Duration
	machine      machineCPU
}

// markCPU reads a cpuMark; server 0 skips restate-server. The machine is
// read last before a point and first after it (machineFirst), so its
// window is the innermost.
func markCPU(peer, server int, machineFirst bool) (cpuMark, error) {
	var m cpuMark
	var err error
	if machineFirst {
		if m.machine, err = readMachineCPU(); err != nil {
			return m, err
		}
	}
	if m.peer, err = sampleCPU(peer); err != nil {
		return m, err
	}
	if server != 0 {
		if m.server, err = sampleCPU(server); err != nil {
			return m, err
		}
	}
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		return m, err
	}
	m.gen = self.CPU()
	if !machineFirst {
		m.machine, err = readMachineCPU()
	}
	return m, err
}

// cpuUse is the CPU taken between two marks.
type cpuUse struct {
	// Self and Workers are the peer's own and the rest of its tree's (its
	// reaped children and its descendants, see cpuSample); Server is
	// restate-server with its tree; Gen this process; Machine the busy
	// time of all cores.
	Self, Workers, Server, Gen, Machine time.Duration
}

func cpuBetween(before, after cpuMark) cpuUse {
	var u cpuUse
	u.Self, u.Workers = cpuDelta(before.peer, after.peer)
	srvSelf, srvDesc := cpuDelta(before.server, after.server)
	u.Server = srvSelf + srvDesc
	u.Gen = after.gen - before.gen
	u.Machine = after.machine.Busy - before.machine.Busy
	return u
}
