// Package proctest holds test helpers shared by the python and bash adapter
// tests: a log sink that records zerolog records, and polling helpers for
// process state. It is only imported by tests.
package proctest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// Logs is a goroutine-safe zerolog sink that keeps every record.
type Logs struct {
	mu      sync.Mutex
	records []map[string]any
}

// Write implements io.Writer for zerolog: one JSON record per call.
func (l *Logs) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(p), &rec); err != nil {
		return 0, err
	}
	l.mu.Lock()
	l.records = append(l.records, rec)
	l.mu.Unlock()
	return len(p), nil
}

// Logger returns a logger writing to l with run_uid set.
func (l *Logs) Logger(runUID string) zerolog.Logger {
	return zerolog.New(l).With().Str("run_uid", runUID).Logger()
}

// Records returns a copy of the records whose message contains substr.
func (l *Logs) Records(substr string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, r := range l.records {
		if msg, _ := r["message"].(string); strings.Contains(msg, substr) {
			out = append(out, r)
		}
	}
	return out
}

// Messages returns the messages of records from the handler (source=handler).
func (l *Logs) Messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r["source"] == "handler" {
			msg, _ := r["message"].(string)
			out = append(out, msg)
		}
	}
	return out
}

// Eventually polls cond (testtool.Poll) until it holds or timeout passes;
// it fails the test with msg otherwise.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	if !testtool.Poll(timeout, cond) {
		t.Fatalf("condition not met within %v: %s", timeout, msg)
	}
}

// GroupGone reports whether no process at all (zombies included) is left
// in process group pgid.
func GroupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// ProcessDead reports whether pid is gone or a zombie.
func ProcessDead(pid int) bool { return !procstat.Alive(pid) }

// Env returns the value of key in /proc/pid/environ, and whether it is set.
func Env(pid int, key string) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", false
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// ExtraPipes lists the descriptors above 2 that pid holds on pipes or
// sockets: a handler's child should have none (a freshly exec'd child may
// briefly hold regular files, such as the libraries its loader opens).
func ExtraPipes(pid int) ([]string, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n <= 2 {
			continue
		}
		target, err := os.Readlink(dir + "/" + e.Name())
		if err == nil && (strings.HasPrefix(target, "pipe:") || strings.HasPrefix(target, "socket:")) {
			out = append(out, e.Name()+" -> "+target)
		}
	}
	return out, nil
}

// FindChild returns the pid of a child of this process whose command line
// contains substr, or 0.
func FindChild(substr string) int {
	self := os.Getpid()
	for _, st := range procstat.All() {
		if st.PPID != self {
			continue
		}
		if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/cmdline"); bytes.Contains(cmd, []byte(substr)) {
			return st.PID
		}
	}
	return 0
}

// LiveInGroup lists the processes of group pgid that can still run code
// (neither gone nor zombies).
func LiveInGroup(pgid int) []int {
	var live []int
	for _, st := range procstat.All() {
		if st.PGID == pgid && !st.Dead() {
			live = append(live, st.PID)
		}
	}
	return live
}

// CPU is CPU time consumed (user plus system).
type CPU struct {
	Self, Children, Worker time.Duration
}

// Total is the sum of all parts.
func (c CPU) Total() time.Duration { return c.Self + c.Children + c.Worker }

// Sub returns c - o.
func (c CPU) Sub(o CPU) CPU {
	return CPU{c.Self - o.Self, c.Children - o.Children, c.Worker - o.Worker}
}

// MeasureCPU reads the CPU time of this process, of its reaped children
// and, if worker > 0, of that live worker and its own reaped children
// (such as bash subshells). Benchmarks report it because on a shared
// machine wall time mostly measures waiting for a CPU.
func MeasureCPU(worker int) CPU {
	var c CPU
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		c.Children = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if worker > 0 {
		if st, err := procstat.Read(worker); err == nil {
			c.Worker = st.CPU() + st.Cutime + st.Cstime
		}
	}
	return c
}
