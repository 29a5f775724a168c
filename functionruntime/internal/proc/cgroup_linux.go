//go:build linux

package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
)

// cgroupParents are the directories worker leaves are created in: the
// server's own cgroup in each usable hierarchy. Empty fields are
// unavailable; why is in the reasons.
type cgroupParents struct {
	v2      string // cgroup2 directory with memory and pids enabled for children
	v2Self  string // the leaf the server moved itself into under v2, "" if it did not
	pids    string // cgroup v1 pids hierarchy
	memory  string // cgroup v1 memory hierarchy
	reasons []string
	killed  []string // what was left in the leaves of servers that are gone
}

var (
	cgroupOnce sync.Once
	cgroups    cgroupParents
	leafSeq    atomic.Uint64
)

// detectCgroups finds, once, where the server may create worker cgroups,
// checking each by creating and removing a probe leaf.
func detectCgroups() cgroupParents {
	cgroupOnce.Do(func() { cgroups = findCgroups("/proc/self/mountinfo", "/proc/self/cgroup") })
	return cgroups
}

func findCgroups(mountinfo, selfCgroup string) cgroupParents {
	var c cgroupParents
	mounts := readMounts(mountinfo)
	paths := readCgroupPaths(selfCgroup)
	if m, ok := mounts["cgroup2"]; ok {
		dir := cgroupDir(m, paths[""])
		if moved, err := enableV2(dir); err != nil {
			c.reasons = append(c.reasons, "cgroup v2 at "+dir+": "+err.Error())
		} else {
			c.v2, c.v2Self = dir, moved
			c.killed = removeStaleLeaves(dir)
			return c
		}
	}
	for _, ctrl := range []string{"pids", "memory"} {
		m, ok := mounts[ctrl]
		if !ok {
			c.reasons = append(c.reasons, "cgroup v1 "+ctrl+": not mounted")
			continue
		}
		dir := cgroupDir(m, paths[ctrl])
		c.killed = append(c.killed, removeStaleLeaves(dir)...)
		if err := probeLeaf(dir); err != nil {
			c.reasons = append(c.reasons, "cgroup v1 "+ctrl+" at "+dir+": "+err.Error())
			continue
		}
		if ctrl == "pids" {
			c.pids = dir
		} else {
			c.memory = dir
		}
	}
	return c
}

type mount struct{ root, point string }

// readMounts maps "cgroup2" and each v1 controller to its mount.
func readMounts(path string) map[string]mount {
	out := map[string]mount{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent dev root point opts [optional...] - fstype source superopts
		left, right, ok := strings.Cut(sc.Text(), " - ")
		l, r := strings.Fields(left), strings.Fields(right)
		if !ok || len(l) < 5 || len(r) < 3 {
			continue
		}
		m := mount{root: l[3], point: l[4]}
		switch r[0] {
		case "cgroup2":
			if _, dup := out["cgroup2"]; !dup {
				out["cgroup2"] = m
			}
		case "cgroup":
			for _, o := range strings.Split(r[2], ",") {
				if o == "pids" || o == "memory" {
					out[o] = m
				}
			}
		}
	}
	return out
}

// readCgroupPaths maps each v1 controller (and "" for v2) to the server's
// cgroup path.
func readCgroupPaths(path string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			out[ctrl] = parts[2]
		}
	}
	return out
}

// cgroupDir is where cgroup path p of a hierarchy is visible under m; a
// path outside the mount's root (a container seeing the host's path) falls
// back to the mount point itself.
func cgroupDir(m mount, p string) string {
	rel, ok := strings.CutPrefix(p, m.root)
	dir := filepath.Join(m.point, rel)
	if st, err := os.Stat(dir); !ok || err != nil || !st.IsDir() {
		return m.point
	}
	return dir
}

// enableV2 makes sure children of dir get the memory and pids
// controllers. cgroup v2 gives controllers to children only from a cgroup
// without processes of its own (the no-internal-process rule; the root
// is exempt), and the server's cgroup holds the server: alone in a cgroup
// delegated to it (systemd's Delegate=yes) it moves itself into a leaf of
// its own, fnbridge-<pid>-server, as such a cgroup's owner is expected to. It never moves another process: a cgroup
// shared with others (a terminal's scope) is left as it is, and so is a
// container's own cgroup when the bridge is its PID 1: container runtimes
// put the processes of `exec` (and exec probes) into that cgroup, which
// cgroup v2 refuses once its children have controllers. Why is the error.
// It returns the leaf the server moved into, "" when it did not move.
func enableV2(dir string) (moved string, err error) {
	ctrls, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", err
	}
	for _, want := range []string{"memory", "pids"} {
		if !hasWord(string(ctrls), want) {
			return "", fmt.Errorf("controller %s not delegated", want)
		}
	}
	sub, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if !hasWord(string(sub), "memory") || !hasWord(string(sub), "pids") {
		err := enableChildren(dir)
		// EBUSY: the cgroup holds processes. EOPNOTSUPP: it does, and a
		// threaded controller (pids) is on already, which makes it a
		// thread root that memory cannot be enabled in. Both go once it
		// is empty.
		if errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EOPNOTSUPP) {
			moved, err = moveSelfAside(dir)
		}
		if err != nil {
			return "", fmt.Errorf("enable memory and pids for children: %w", err)
		}
	}
	return moved, probeLeaf(dir)
}

// getpid is os.Getpid, a variable for the test of a bridge that is a
// container's PID 1.
var getpid = os.Getpid

// cgroupWrite writes one cgroup interface file (a variable, so a test can
// stand in for the kernel's answers on a host without cgroup v2
// controllers).
var cgroupWrite = func(path string, data []byte) error { return os.WriteFile(path, data, 0) }

func enableChildren(dir string) error {
	return cgroupWrite(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids"))
}

// moveSelfAside moves the server out of dir into dir/fnbridge-<pid>-server
// and enables the controllers for dir's children; on failure it moves the
// server back and removes the leaf. (A server that dies leaves the leaf
// empty, and the next one removes it with the other stale leaves.)
func moveSelfAside(dir string) (string, error) {
	self := getpid()
	if self == 1 {
		return "", errors.New("the bridge is PID 1, the init of a container, and leaves the container's cgroup alone: with controllers given to child cgroups, cgroup v2 refuses the processes a container runtime execs into it (docker exec, exec probes); give the bridge a delegated cgroup of its own (systemd: Delegate=yes)")
	}
	if others := otherPids(readPids(filepath.Join(dir, "cgroup.procs")), self); len(others) > 0 {
		return "", fmt.Errorf("the cgroup also holds %d process(es) other than the bridge (pid %d first), and cgroup v2 gives controllers to child cgroups only from a cgroup without processes: run the bridge in a cgroup of its own (systemd: Delegate=yes)", len(others), others[0])
	}
	leaf := filepath.Join(dir, fmt.Sprintf("fnbridge-%d-server", self))
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("a cgroup of its own for the bridge: %w", err)
	}
	pid := []byte(strconv.Itoa(self))
	if err := cgroupWrite(filepath.Join(leaf, "cgroup.procs"), pid); err != nil {
		_ = os.Remove(leaf)
		return "", fmt.Errorf("move the bridge into %s: %w", leaf, err)
	}
	if err := enableChildren(dir); err != nil {
		_ = cgroupWrite(filepath.Join(dir, "cgroup.procs"), pid)
		_ = os.Remove(leaf)
		return "", fmt.Errorf("after moving the bridge into a cgroup of its own: %w", err)
	}
	return leaf, nil
}

// otherPids is pids without self.
func otherPids(pids []int, self int) []int {
	var out []int
	for _, p := range pids {
		if p != self {
			out = append(out, p)
		}
	}
	return out
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// probeLeaf creates and removes a leaf in dir.
func probeLeaf(dir string) error {
	leaf := filepath.Join(dir, fmt.Sprintf("fnbridge-%d-probe", os.Getpid()))
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Remove(leaf)
}

// staleLeafWait bounds the wait for one stale leaf to empty: a killed
// process leaves its cgroup only once it has exited, which one in an
// uninterruptible wait (a dead NFS server) may not do soon.
const staleLeafWait = 2 * time.Second

// removeStaleLeaves empties and removes the leaves in dir of servers that
// are gone, and says what it killed. Their workers died with them
// (lifeline, Pdeathsig), but a descendant that left its worker's process
// group lives on in the leaf, and a SIGKILLed server could neither kill it
// nor remove the leaf.
func removeStaleLeaves(dir string) (killed []string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "fnbridge-") {
			killed = append(killed, removeStaleLeaf(filepath.Join(dir, e.Name()))...)
		}
	}
	return killed
}

// removeStaleLeaf kills what is in leaf and the cgroups below it, waits
// until they are empty and removes them, if the leaf is stale and holds
// only processes of this pid namespace.
func removeStaleLeaf(leaf string) (killed []string) {
	tree := cgroupTree(leaf)
	procs := treePids(tree)
	if !staleLeaf(filepath.Base(leaf), procs) || !killable(procs) {
		return nil
	}
	self := os.Getpid()
	seen := map[int]bool{}
	note := func(pids []int) {
		for _, pid := range pids {
			if pid > 0 && pid != self && !seen[pid] {
				seen[pid] = true
				noteStray(pid) // reaped below should it be the server's
				comm := "?"
				if st, err := procstat.Read(pid); err == nil {
					comm = st.Comm
				}
				killed = append(killed, fmt.Sprintf("pid %d (%s) in %s", pid, comm, leaf))
			}
		}
	}
	note(procs)
	// cgroup.kill (Linux 5.14) kills the whole subtree at once, forks in
	// flight included; without it each process is killed by pid until
	// none is left.
	byPid := len(procs) == 0 || writeExisting(filepath.Join(leaf, "cgroup.kill"), "1") != nil
	for deadline := time.Now().Add(staleLeafWait); ; time.Sleep(2 * time.Millisecond) {
		left := treePids(tree)
		if !populated(leaf, left) {
			break
		}
		if !time.Now().Before(deadline) {
			killed = append(killed, fmt.Sprintf("%s still not empty after %v", leaf, staleLeafWait))
			break
		}
		if byPid {
			note(left)
			for _, pid := range left {
				if pid > 0 && pid != self {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
	reapOrphans()
	for i := len(tree) - 1; i >= 0; i-- {
		_ = os.Remove(tree[i])
	}
	return killed
}

// staleLeaf reports whether the leaf named fnbridge-<pid>-<suffix>, which
// holds procs, is of a server that is gone. A live process with that pid
// is its server, unless a process in the leaf started before it: the
// server started every process in its leaves, so the pid was reused. Our
// own pid names a predecessor's leaf (one that had the pid before) until
// we have made a leaf ourselves, except the server leaf, which we may have
// just moved into.
func staleLeaf(name string, procs []int) bool {
	pidText, suffix, _ := strings.Cut(strings.TrimPrefix(name, "fnbridge-"), "-")
	pid, err := strconv.Atoi(pidText)
	switch {
	case err != nil || pid <= 0:
		return false
	case pid == os.Getpid():
		return suffix != "server" && leafSeq.Load() == 0
	case syscall.Kill(pid, 0) == syscall.ESRCH:
		return true
	}
	owner, err := procstat.Read(pid)
	if err != nil {
		return false
	}
	for _, p := range procs {
		if st, err := procstat.Read(p); err == nil && st.StartTime < owner.StartTime {
			return true
		}
	}
	return false
}

// killable reports whether every process in procs is another one of our
// own pid namespace. The pid in a leaf's name is of its server's
// namespace: a leaf holding a process we cannot see (listed as pid 0 in
// cgroup v2) or of a nested namespace may be of a live server there.
func killable(procs []int) bool {
	self := os.Getpid()
	depth := pidNSDepth(self)
	for _, pid := range procs {
		if pid <= 0 || pid == self {
			return false
		}
		if d := pidNSDepth(pid); d != depth && d != 0 && depth != 0 {
			return false
		}
	}
	return true
}

// pidNSDepth is how many pid namespaces pid is in as seen from ours (the
// NSpid line of its status, Linux 4.1), 0 when unknown.
func pidNSDepth(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			return len(strings.Fields(rest))
		}
	}
	return 0
}

// cgroupTree is dir and the cgroups below it, each before its children.
func cgroupTree(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func treePids(tree []string) []int {
	var out []int
	for _, dir := range tree {
		out = append(out, readPids(filepath.Join(dir, "cgroup.procs"))...)
	}
	return out
}

// populated reports whether leaf's subtree still holds a process: its
// cgroup.events says so under v2, which also counts processes we cannot
// see; under v1 the processes listed, pids, are all there is.
func populated(leaf string, pids []int) bool {
	if b, err := os.ReadFile(filepath.Join(leaf, "cgroup.events")); err == nil {
		return eventCounter(b, "populated") != 0
	}
	return len(pids) > 0
}

// writeExisting writes to a cgroup interface file that exists: cgroupfs
// creates no files, and an absent one means the kernel lacks the feature.
func writeExisting(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// cgroupLeaf is one worker's cgroup directories (one per hierarchy).
type cgroupLeaf struct {
	dirs       []string
	pidsEvents string // file with the "max" counter, "" without
	memEvents  string // file with the "oom_kill" counter, "" without

	// The event files stay open and are re-read with pread: they are read
	// before every invocation, and opening them each time cost about 5% of
	// a steps-mode bridge's CPU.
	mu      sync.Mutex
	open    map[string]*os.File
	removed bool
}

// newCgroupLeaf creates the worker's leaf in every usable hierarchy and
// sets its limits there. Without any usable hierarchy, or with no limit a
// cgroup enforces, it returns nil.
func newCgroupLeaf(l Limits) (*cgroupLeaf, error) {
	c := detectCgroups()
	if l.Memory <= 0 && l.Processes <= 0 {
		return nil, nil
	}
	name := fmt.Sprintf("fnbridge-%d-%d", os.Getpid(), leafSeq.Add(1))
	leaf := &cgroupLeaf{}
	type setting struct {
		file     string
		v        string // "" leaves the file alone
		optional bool   // absent where the kernel lacks the feature
	}
	num := func(v int64) string {
		if v <= 0 {
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	mk := func(parent string, settings ...setting) error {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		leaf.dirs = append(leaf.dirs, dir)
		for _, st := range settings {
			if st.v == "" {
				continue
			}
			path := filepath.Join(dir, st.file)
			if _, err := os.Stat(path); err != nil && st.optional {
				continue
			}
			if err := os.WriteFile(path, []byte(st.v), 0); err != nil {
				return fmt.Errorf("cgroup %s: %w", st.file, err)
			}
		}
		return nil
	}
	var err error
	switch {
	case c.v2 != "":
		// No swap either, or a worker past its memory swaps instead of
		// failing.
		if err = mk(c.v2, setting{"memory.max", num(l.Memory), false}, setting{"memory.swap.max", swapOff(l.Memory), true},
			setting{"pids.max", num(l.Processes), false}); err == nil {
			leaf.pidsEvents = filepath.Join(c.v2, name, "pids.events")
			leaf.memEvents = filepath.Join(c.v2, name, "memory.events")
		}
	default:
		if c.pids != "" && l.Processes > 0 {
			if err = mk(c.pids, setting{"pids.max", num(l.Processes), false}); err == nil {
				leaf.pidsEvents = filepath.Join(c.pids, name, "pids.events")
			}
		}
		if c.memory != "" && l.Memory > 0 && err == nil {
			// memsw (memory plus swap) exists with swap accounting only and
			// must not be below the memory limit, so it comes second.
			if err = mk(c.memory, setting{"memory.limit_in_bytes", num(l.Memory), false},
				setting{"memory.memsw.limit_in_bytes", num(l.Memory), true}); err == nil {
				leaf.memEvents = filepath.Join(c.memory, name, "memory.oom_control")
			}
		}
	}
	if err != nil {
		leaf.remove()
		return nil, fmt.Errorf("worker cgroup: %w", err)
	}
	if len(leaf.dirs) == 0 {
		return nil, nil
	}
	// Open the event files now rather than at the first invocation, so a
	// worker holds the same descriptors for its whole life.
	_ = leaf.counters()
	return leaf, nil
}

// boundsMemory reports whether the leaf limits the worker's memory as a
// whole; a nil leaf does not.
func (c *cgroupLeaf) boundsMemory() bool { return c != nil && c.memEvents != "" }

func swapOff(memory int64) string {
	if memory > 0 {
		return "0"
	}
	return ""
}

// counters reads the leaf's event counters; a nil leaf reads zeros.
func (c *cgroupLeaf) counters() limitCounters {
	if c == nil {
		return limitCounters{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return limitCounters{pidsMax: c.readCounter(c.pidsEvents, "max"), oomKill: c.readCounter(c.memEvents, "oom_kill")}
}

// readCounter reads key's value from one of the leaf's event files; a file
// that is absent or gone (the leaf was removed) reads zero. c.mu is held.
func (c *cgroupLeaf) readCounter(file, key string) int64 {
	if file == "" || c.removed {
		return 0
	}
	f := c.open[file]
	if f == nil {
		var err error
		if f, err = os.Open(file); err != nil {
			return 0
		}
		if c.open == nil {
			c.open = map[string]*os.File{}
		}
		c.open[file] = f
	}
	// One pread: these files are a few short lines, and a second call
	// only to see end of file would double the cost of an invocation's
	// read (File.ReadAt reads until the buffer is full or EOF).
	var buf [1024]byte
	var n int
	var err error
	if rc, rerr := f.SyscallConn(); rerr == nil {
		_ = rc.Control(func(fd uintptr) {
			for {
				n, err = syscall.Pread(int(fd), buf[:], 0)
				if err != syscall.EINTR {
					return
				}
			}
		})
	} else {
		n, err = f.ReadAt(buf[:], 0)
	}
	if n <= 0 && err != nil {
		return 0
	}
	return eventCounter(buf[:max(n, 0)], key)
}

// eventCounter finds "key value" among the lines of an event file.
func eventCounter(b []byte, key string) int64 {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if k, v, ok := bytes.Cut(line, []byte(" ")); ok && string(k) == key {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}

// release kills whatever is left in the leaf (descendants that left the
// worker's process group stay in its cgroup), reaps those re-parented to
// the server, and removes the leaf, giving up after wait. A killed process
// is not reaped at once (it has not died yet) and, dead, is no longer
// listed in the leaf, so each is noted first and reaped by reapOrphans,
// now or when it reaches the server.
func (c *cgroupLeaf) release(wait time.Duration) {
	if c == nil {
		return
	}
	deadline := time.Now().Add(wait)
	for {
		left := false
		for _, dir := range c.dirs {
			for _, pid := range readPids(filepath.Join(dir, "cgroup.procs")) {
				left = true
				noteStray(pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if !left || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	reapOrphans()
	c.remove()
}

func (c *cgroupLeaf) remove() {
	c.mu.Lock()
	for _, f := range c.open {
		_ = f.Close()
	}
	c.open, c.removed = nil, true
	c.mu.Unlock()
	for _, dir := range c.dirs {
		_ = os.Remove(dir)
	}
}

func readPids(file string) []int {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupMechanism describes where worker cgroups go, for [Mechanisms].
func cgroupMechanism() (processes, memory string, reasons []string) {
	return cgroupMechanismOf(detectCgroups())
}

// staleKilled is what the start's cleanup found alive in the worker
// cgroups of servers that are gone, for [StaleWorkersKilled].
func staleKilled() []string { return detectCgroups().killed }

func cgroupMechanismOf(c cgroupParents) (processes, memory string, reasons []string) {
	reasons = c.reasons
	switch {
	case c.v2 != "":
		where := c.v2
		if c.v2Self != "" {
			where += " (the bridge moved itself into " + c.v2Self + ", as cgroup v2 asks of a cgroup whose children get controllers)"
		}
		processes, memory = "cgroup v2 pids.max under "+where, "cgroup v2 memory.max under "+where
	default:
		if c.pids != "" {
			processes = "cgroup v1 pids.max under " + c.pids
		}
		if c.memory != "" {
			memory = "cgroup v1 memory.limit_in_bytes under " + c.memory
		}
	}
	return processes, memory, reasons
}
