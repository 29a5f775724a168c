package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// This file holds the fault-injection machinery of chaos_test.go: a
// `bridge serve` child that can be SIGKILLed and restarted on the same
// port, /proc readers for its workers, descriptors and memory, and the
// parser of the handlers' marker file.

// chaosBridge is a `bridge serve` child the test kills and restarts on the
// same address. Every incarnation appends its logs to one file.
type chaosBridge struct {
	bin, config, addr, logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid after done
}

func newChaosBridge(t *testing.T, bin, config, addr, logPath string) *chaosBridge {
	b := &chaosBridge{bin: bin, config: config, addr: addr, logPath: logPath}
	t.Cleanup(func() {
		b.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("bridge log tail (%s):\n%s", logPath, chaosTail(logPath, 60))
		}
	})
	return b
}

// start launches a new incarnation and waits until /health answers 200.
func (b *chaosBridge) start() error {
	logFile, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(b.bin, "serve", "--config", b.config, "--listen", b.addr, "--log-format", "json", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own group; Pdeathsig so a crashed test binary leaves no bridge.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start bridge serve: %w", err)
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.done, b.err = cmd, done, nil
	b.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logFile.Close()
		b.mu.Lock()
		if b.cmd == cmd {
			b.err = err
		}
		b.mu.Unlock()
		close(done)
	}()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("http://" + b.addr + "/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("bridge serve exited before it was healthy: %v\n%s", b.exitErr(), chaosTail(b.logPath, 30))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bridge serve not healthy on %s within 30s", b.addr)
		}
	}
}

// pid is the current incarnation's PID (0 when none runs).
func (b *chaosBridge) pid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return 0
	}
	select {
	case <-b.done:
		return 0
	default:
		return b.cmd.Process.Pid
	}
}

func (b *chaosBridge) exitErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// kill SIGKILLs the bridge process itself (a crash: no shutdown code runs)
// and reaps it. Its workers are left to their Pdeathsig.
func (b *chaosBridge) kill() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// terminate sends SIGTERM and waits at most wait for the exit; it reports
// the exit error and whether the process exited in time.
func (b *chaosBridge) terminate(wait time.Duration) (error, bool) {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return nil, true
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
		return b.exitErr(), true
	case <-time.After(wait):
		return nil, false
	}
}

// stop is the owner's cleanup: TERM, KILL after grace, reap.
func (b *chaosBridge) stop(grace time.Duration) {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// chaosTail returns the last n lines of a file.
func chaosTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procStat is what the tests need from /proc/PID/stat.
type procStat struct {
	pid, ppid, pgid int
	state           byte
	comm            string
	start           uint64 // start time in clock ticks since boot: tells a PID's reuse apart
}

func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, false
	}
	// Fields after the command: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime stime cutime cstime priority nice
	// threads itrealvalue starttime ...
	f := strings.Fields(s[closing+1:])
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return procStat{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0], comm: s[open+1 : closing], start: start}, true
}

// allProcs reads every process's stat.
func allProcs() []procStat {
	entries, _ := os.ReadDir("/proc")
	var out []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// isWorkerComm matches the adapters' worker processes (python3, bash).
func isWorkerComm(comm string) bool {
	return strings.HasPrefix(comm, "python") || comm == "bash"
}

// workersOf lists the live python/bash children of pid: the adapters'
// workers, each the leader of its own process group.
func workersOf(pid int) []procStat {
	var out []procStat
	for _, p := range allProcs() {
		if p.ppid == pid && p.state != 'Z' && isWorkerComm(p.comm) {
			out = append(out, p)
		}
	}
	return out
}

// childrenOf lists the live children of pid, whatever they run.
func childrenOf(pid int) []procStat {
	var out []procStat
	for _, p := range allProcs() {
		if p.ppid == pid && p.state != 'Z' {
			out = append(out, p)
		}
	}
	return out
}

// liveInGroups lists the live (not zombie) processes whose process group is
// one of pgids: what is left of the workers and everything they started.
func liveInGroups(pgids map[int]bool) []procStat {
	var out []procStat
	for _, p := range allProcs() {
		if pgids[p.pgid] && p.state != 'Z' && p.state != 'X' {
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

// execution is one run of a handler for one invocation id, as the marker
// file tells it: the handlers append "start ID PID NS TOKEN" before their
// work and "end ID PID NS TOKEN" after it, with O_APPEND, so the file order
// is the order in which those writes happened.
type execution struct {
	id, token      string
	pid            int   // the worker process (python3, or the bash worker: $$)
	startNS, endNS int64 // wall clock (CLOCK_REALTIME), 0 endNS: no end line
	startLine      int   // line number of the start record
	endLine        int   // line number of the end record, -1 when none
}

// readMarker parses the marker file into executions grouped by id, in file
// order of their start lines.
func readMarker(path string) (map[string][]*execution, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	byToken := map[string]*execution{}
	byID := map[string][]*execution{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		n++
		fl := strings.Fields(line)
		if len(fl) != 5 {
			return nil, n, fmt.Errorf("marker line %d malformed: %q", n, line)
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
			e := &execution{id: fl[1], token: fl[4], pid: pid, startNS: ns, startLine: n, endLine: -1}
			byToken[e.token] = e
			byID[e.id] = append(byID[e.id], e)
		case "end":
			e := byToken[fl[4]]
			if e == nil || e.id != fl[1] {
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
	kind     string // "bridge-kill", "worker-kill", "restate-restart"
	at, till int64  // UnixNano; till is the end of a restart window
	pid      int    // the killed worker
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

// cause explains why execution x was not the one whose result Restate
// journaled, given the next execution of the same id started at next: the
// earliest fault that applies to x. A fault applies when it is a SIGKILL
// of x's own worker between x's start and next, a SIGKILL of the bridge
// incarnation x's worker belonged to, any bridge SIGKILL between x's start
// and next, or a restate-server restart overlapping that window. Whether x
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
			applies = e.pid == x.pid && e.at >= x.startNS && e.at <= next
		case "bridge-kill":
			applies = e.workers[x.pid] || (e.at >= x.startNS && e.at <= next)
		case "restate-restart":
			applies = e.till >= x.startNS && e.at <= next
		}
		if applies && (first == nil || e.at < first.at) {
			first = e
		}
	}
	if first == nil {
		return "unexplained (no fault between this execution and the next attempt)", 0
	}
	what := map[string]string{"worker-kill": "worker SIGKILLed", "bridge-kill": "bridge SIGKILLed", "restate-restart": "restate-server restarted"}[first.kind]
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

// chaosWriteFile writes a file or fails the test.
func chaosWriteFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
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
// group) holds and the pidfds Go keeps for its child processes, how many
// of the own ones are sockets, and the pidfds. Own descriptors (listeners,
// connections, the log, pipes of dead workers) must not grow with the
// number of invocations or worker kills; the per-worker pipes and pidfds
// rise and fall with the warm workers.
func bridgeFDs(pid int) (total, own, sockets, pidfds, workers int) {
	ws := workersOf(pid)
	groups := map[int]bool{}
	for _, w := range ws {
		groups[w.pgid] = true
	}
	held := map[string]bool{}
	for _, p := range liveInGroups(groups) {
		for _, l := range fdLinks(p.pid) {
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
// according to the marker file's last lines.
func busyWorkers(path string) map[int]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	if len(b) > 64<<10 {
		b = b[len(b)-64<<10:]
	}
	open := map[string]int{} // token -> pid
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
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
	out := map[int]bool{}
	for _, pid := range open {
		out[pid] = true
	}
	return out
}
