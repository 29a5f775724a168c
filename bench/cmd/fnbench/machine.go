package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machineInfo describes where the numbers were taken.
type machineInfo struct {
	Cores                                   int
	CPU, Memory, Kernel, Go                 string
	Restate, Python, Bash, Commit, Hostname string
}

func gatherMachine(ctx context.Context, cfg config) machineInfo {
	m := machineInfo{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, err := parseStatusKB(string(b), "MemTotal"); err == nil {
			m.Memory = formatKB(kb)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.Hostname, _ = os.Hostname()
	m.Restate = firstLine(ctx, cfg.restateBin, "--version")
	m.Python = firstLine(ctx, "python3", "--version")
	m.Bash = firstLine(ctx, "bash", "--version")
	m.Commit = firstLine(ctx, "git", "describe", "--tags", "--always", "--dirty")
	return m
}

// firstLine is the first output line of a short command, or "?".
func firstLine(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "?"
	}
	l, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return l
}

// loadAvg is the 1, 5 and 15 minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
