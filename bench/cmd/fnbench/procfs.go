package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/PID/stat. The kernel
// reports them in USER_HZ, which is 100 on every Linux ABI Go supports.
const clockTick = 10 * time.Millisecond

// procStat is the part of /proc/PID/stat the benchmark uses.
type procStat struct {
	PID, PPID, PGID int
	// Utime and Stime are the process's own CPU time; Cutime and Cstime
	// that of its reaped children (a Bash worker's per-invocation subshells
	// end up here).
	Utime, Stime, Cutime, Cstime time.Duration
	// StartTime (in clock ticks after boot) tells a reused pid apart.
	StartTime uint64
}

// parseStat parses one /proc/PID/stat line. The command name is in
// parentheses and may itself contain spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(line string) (procStat, error) {
	open := strings.IndexByte(line, '(')
	closing := strings.LastIndexByte(line, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("stat %q: no (comm)", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return procStat{}, fmt.Errorf("stat %q: pid: %v", line, err)
	}
	// Fields after the comm, 0-based: state(0) ppid(1) pgrp(2) ... utime(11)
	// stime(12) cutime(13) cstime(14) ... starttime(19).
	f := strings.Fields(line[closing+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("stat %q: %d fields after comm, want at least 20", line, len(f))
	}
	num := func(i int) (int64, error) { return strconv.ParseInt(f[i], 10, 64) }
	st := procStat{PID: pid}
	var vals [6]int64
	for k, i := range []int{1, 2, 11, 12, 13, 14} {
		if vals[k], err = num(i); err != nil {
			return procStat{}, fmt.Errorf("stat %q: field %d: %v", line, i, err)
		}
	}
	st.PPID, st.PGID = int(vals[0]), int(vals[1])
	st.Utime = time.Duration(vals[2]) * clockTick
	st.Stime = time.Duration(vals[3]) * clockTick
	st.Cutime = time.Duration(vals[4]) * clockTick
	st.Cstime = time.Duration(vals[5]) * clockTick
	if st.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("stat %q: starttime: %v", line, err)
	}
	return st, nil
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(bytes.TrimSpace(b)))
}

// allStats reads every process's stat; processes that exit while being
// read are skipped.
func allStats() map[int]procStat {
	out := map[int]procStat{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			out[pid] = st
		}
	}
	return out
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

// cpuSample is the CPU time of one process (own time only) and of its
// descendants (own plus reaped children's time), keyed by pid and start
// time so a reused pid is not mistaken for the earlier process.
type cpuSample struct {
	self  time.Duration
	desc  map[[2]uint64]time.Duration
	count int // descendants alive at the sample
}

type procKey = [2]uint64

func sampleCPU(root int) (cpuSample, error) {
	all := allStats()
	st, ok := all[root]
	if !ok {
		return cpuSample{}, fmt.Errorf("process %d is gone", root)
	}
	parent := make(map[int]int, len(all))
	for pid, s := range all {
		parent[pid] = s.PPID
	}
	cs := cpuSample{self: st.Utime + st.Stime, desc: map[procKey]time.Duration{}}
	for _, pid := range descendants(parent, root) {
		d := all[pid]
		cs.desc[procKey{uint64(pid), d.StartTime}] = d.Utime + d.Stime + d.Cutime + d.Cstime
		cs.count++
	}
	return cs, nil
}

// cpuDelta is the CPU used between two samples: the process's own, and
// that of its descendants (a descendant that appeared in between counts
// fully; one that vanished is lost, which only matters for a restarted
// worker).
func cpuDelta(before, after cpuSample) (self, desc time.Duration) {
	self = after.self - before.self
	for k, v := range after.desc {
		desc += v - before.desc[k]
	}
	return self, desc
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

// commOf is the process's command name (/proc/PID/comm).
func commOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
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
		d := time.Duration(n) * clockTick
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
