package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// launchShell applies a worker's limits before its interpreter runs: Go's
// exec cannot set rlimits or a cgroup for the child, and doing it after
// Start races the interpreter. The shell sets them on itself and execs the
// interpreter, which keeps its pid, process group and descriptors.
const launchShell = "/bin/sh"

// launchOOMScore makes the kernel's OOM killer pick a worker (and what it
// forks) before anything else, the server above all.
const launchOOMScore = 1000

// launch returns the path and argv that start cfg's interpreter under its
// limits and in leaf, the limits in force, and which of them it lowered to
// the hard limits the server itself runs under (in the configuration's
// words, for a warning).
// Positional parameters carry every path, so nothing from the
// configuration is parsed as shell code; PWD, which the shell exports on
// its own, is put back as the worker's environment had it.
func launch(cfg Config, leaf *cgroupLeaf) (path string, argv []string, inForce Limits, lowered []string, err error) {
	inForce = cfg.Limits
	if _, err := os.Stat(launchShell); err != nil {
		if cfg.Limits == (Limits{}) && leaf == nil {
			return cfg.Path, append([]string{cfg.Path}, cfg.Args...), inForce, nil, nil
		}
		return "", nil, inForce, nil, fmt.Errorf("applying worker limits needs %s: %w", launchShell, err)
	}
	var s strings.Builder
	var pos []string
	fmt.Fprintf(&s, "echo %d 2>/dev/null >/proc/self/oom_score_adj; ", launchOOMScore)
	fail := `|| { echo "fnbridge: cannot apply worker limits" >&2; exit 125; }; `
	// The cgroup first: dash moves a redirected descriptor to 10 or above
	// while it writes, which a low open_files set before would refuse.
	if leaf != nil {
		for _, dir := range leaf.dirs {
			s.WriteString(`echo "$$" >"$1/cgroup.procs" ` + fail + "shift; ")
			pos = append(pos, dir)
		}
	}
	rl := func(name string, flag byte, res int, v *int64, unit int64) {
		if *v <= 0 {
			return
		}
		n := *v / unit // rounded up below; v + unit - 1 would overflow near 2^63
		if *v%unit != 0 {
			n++
		}
		var cur syscall.Rlimit
		if syscall.Getrlimit(res, &cur) == nil && cur.Max != ^uint64(0) && uint64(n) > cur.Max/uint64(unit) {
			// Above the hard limit ulimit fails (only root may raise
			// one), and the worker would never start.
			n = int64(cur.Max / uint64(unit))
			lowered = append(lowered, fmt.Sprintf("%s %d lowered to %d, the hard limit the server runs under", name, *v, n*unit))
			*v = n * unit
		}
		// Without -H or -S the shell sets both (dash honours only the last
		// of the two flags).
		fmt.Fprintf(&s, "ulimit -%c %d %s", flag, n, fail)
	}
	l := &inForce
	if !leaf.boundsMemory() {
		// Only without the worker's memory cgroup: a child would hit the
		// rlimit first and fail with its own ENOMEM, where the cgroup's
		// OOM kill is seen and named as the memory limit.
		rl("memory", 'd', syscall.RLIMIT_DATA, &l.Memory, 1024) // KiB
	}
	rl("open_files", 'n', syscall.RLIMIT_NOFILE, &l.OpenFiles, 1)
	rl("file_size", 'f', syscall.RLIMIT_FSIZE, &l.FileSize, 512) // POSIX 512-byte blocks
	if l.CPU > 0 {
		// Soft below hard, so the kernel sends SIGXCPU (which names the
		// limit) a second before its SIGKILL.
		secs := int64(l.CPU / time.Second)
		if l.CPU%time.Second != 0 {
			secs++
		}
		fmt.Fprintf(&s, "ulimit -t %d && ulimit -S -t %d %s", secs+1, secs, fail)
	}
	if pwd, ok := envValue(cfg.Env, "PWD"); ok {
		s.WriteString(`PWD=$1; shift; `)
		pos = append(pos, pwd)
	} else {
		s.WriteString("unset PWD; ")
	}
	s.WriteString(`exec "$@"`)
	args := append([]string{launchShell, "-c", s.String(), "fnbridge-worker"}, pos...)
	args = append(args, cfg.Path)
	return launchShell, append(args, cfg.Args...), inForce, lowered, nil
}

// loweredWarned keeps the lowered limits already warned about: once per
// server, not at every worker start.
var loweredWarned sync.Map

// warnLowered warns, once per limit and value, that a worker limit was
// lowered to the server's own hard limit: the function then fails below
// the limit its configuration shows (EMFILE, ENOMEM, SIGXFSZ).
func warnLowered(log zerolog.Logger, lowered []string) {
	for _, l := range lowered {
		if _, seen := loweredWarned.LoadOrStore(l, true); !seen {
			log.Warn().Str("limit", l).Msg("worker limit above the server's own hard limit: workers get the hard limit (raise it where the server starts, e.g. LimitNOFILE= or ulimit -H)")
		}
	}
}

func envValue(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// StaleWorkersKilled says what the server killed at start in the worker
// cgroups that servers which are gone left behind: processes that had
// escaped their worker's process group and outlived their bridge. Empty
// when there were none.
func StaleWorkersKilled() []string { return staleKilled() }

// Enforced reports whether the processes limit, and memory for the worker
// as a whole, are enforced here (by cgroups the server may create).
func Enforced() (processes, memory bool) {
	procs, mem, _ := cgroupMechanism()
	return procs != "", mem != ""
}

// Mechanisms describes, for the log at start, how worker limits are
// enforced on this host: what is always in force and what depends on the
// cgroups the server may create.
func Mechanisms() (desc string, processes bool) {
	procs, mem, reasons := cgroupMechanism()
	parts := []string{
		"rlimits before the interpreter starts (open_files: RLIMIT_NOFILE; file_size: RLIMIT_FSIZE; cpu: RLIMIT_CPU)",
		"oom_score_adj " + strconv.Itoa(launchOOMScore),
	}
	if procs != "" {
		parts = append(parts, "processes: "+procs)
	} else {
		parts = append(parts, "processes: NOT enforced (no writable pids cgroup)")
	}
	if mem != "" {
		parts = append(parts, "memory of the whole worker: "+mem)
	} else {
		parts = append(parts, "memory: RLIMIT_DATA of each process only (no writable memory cgroup)")
	}
	if len(reasons) > 0 {
		parts = append(parts, "unavailable: "+strings.Join(reasons, "; "))
	}
	return strings.Join(parts, "; "), procs != ""
}
