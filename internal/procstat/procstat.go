// Package procstat owns the reading of Linux /proc/PID/stat: one parser for
// the process state, parentage, process group, CPU times and start time
// that the worker supervisor, the tests and the benchmark look at.
//
// The command name in the second field is in parentheses and may itself
// hold spaces and parentheses, so every field after it is counted from the
// last ')' (proc(5)).
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ClockTick is the unit of the CPU times in /proc/PID/stat: USER_HZ, which
// is 100 on every Linux ABI Go supports.
const ClockTick = 10 * time.Millisecond

// Stat is the part of /proc/PID/stat the project uses.
type Stat struct {
	PID  int
	Comm string // the command name, without its parentheses
	// State is the one-letter process state: R, S, D, Z (zombie: exited,
	// not yet reaped), X (dead), T, t, I ...
	State byte
	PPID  int
	PGID  int
	// Utime and Stime are the process's own CPU time; Cutime and Cstime
	// that of its children it has waited for.
	Utime, Stime, Cutime, Cstime time.Duration
	// StartTime, in clock ticks after boot, tells a reused PID apart.
	StartTime uint64
}

// BootTicks is the time since boot in the unit of [Stat.StartTime]
// (CLOCK_BOOTTIME, as the kernel counts a process's start), rounded down
// as the kernel rounds: a process whose StartTime is less than BootTicks()
// taken at some moment started before it; one in the same tick may have
// started on either side.
func BootTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return uint64(time.Duration(ts.Nano()) / ClockTick)
}

// Dead reports whether the process has exited (a zombie or dead entry):
// such a process runs no more code, even if its parent has not reaped it.
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' }

// CPU is the process's own user and system time.
func (s Stat) CPU() time.Duration { return s.Utime + s.Stime }

// Parse parses one /proc/PID/stat line.
func Parse(line string) (Stat, error) {
	open := strings.IndexByte(line, '(')
	closing := strings.LastIndexByte(line, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("stat %q: no (comm) field", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return Stat{}, fmt.Errorf("stat %q: pid: %v", line, err)
	}
	// Fields after the comm, 0-based: state(0) ppid(1) pgrp(2) session(3)
	// tty(4) tpgid(5) flags(6) minflt(7) cminflt(8) majflt(9) cmajflt(10)
	// utime(11) stime(12) cutime(13) cstime(14) priority(15) nice(16)
	// threads(17) itrealvalue(18) starttime(19) ...
	f := strings.Fields(line[closing+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("stat %q: %d fields after the command name, want at least 20", line, len(f))
	}
	st := Stat{PID: pid, Comm: line[open+1 : closing], State: f[0][0]}
	var v [6]int64
	for k, i := range []int{1, 2, 11, 12, 13, 14} {
		if v[k], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("stat %q: field %d: %v", line, i+3, err)
		}
	}
	st.PPID, st.PGID = int(v[0]), int(v[1])
	st.Utime = time.Duration(v[2]) * ClockTick
	st.Stime = time.Duration(v[3]) * ClockTick
	st.Cutime = time.Duration(v[4]) * ClockTick
	st.Cstime = time.Duration(v[5]) * ClockTick
	if st.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("stat %q: starttime: %v", line, err)
	}
	return st, nil
}

// Read reads and parses /proc/PID/stat. A process that does not exist (or
// has been reaped) is an error wrapping fs.ErrNotExist.
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return Parse(strings.TrimSpace(string(b)))
}

// Alive reports whether pid is a process that can still run code: it
// exists and is neither a zombie nor dead.
func Alive(pid int) bool {
	st, err := Read(pid)
	return err == nil && !st.Dead()
}

// All reads every process's stat. Processes that exit while /proc is being
// read are skipped.
func All() []Stat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]Stat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := Read(pid); err == nil {
			out = append(out, st)
		}
	}
	return out
}
