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

// probeLeaf creates and removes a leaf in dir, after removing leaves a
// dead server left behind.
func probeLeaf(dir string) error {
	removeStaleLeaves(dir)
	leaf := filepath.Join(dir, fmt.Sprintf("fnbridge-%d-probe", os.Getpid()))
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Remove(leaf)
}

// removeStaleLeaves removes the (empty) leaves of servers that are gone:
// their workers died with them, but a SIGKILLed server cannot rmdir.
func removeStaleLeaves(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "fnbridge-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidText); err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
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

func cgroupMechanismOf(c cgroupParents) (processes, memory string, reasons []string) {
	switch {
	case c.v2 != "":
		where := c.v2
		if c.v2Self != "" {
			where += " (the bridge moved itself into " + c.v2Self + ", as cgroup v2 asks of a cgroup whose children get controllers)"
		}
		return "cgroup v2 pids.max under " + where, "cgroup v2 memory.max under " + where, c.reasons
	}
	if c.pids != "" {
		processes = "cgroup v1 pids.max under " + c.pids
	}
	if c.memory != "" {
		memory = "cgroup v1 memory.limit_in_bytes under " + c.memory
	}
	return processes, memory, c.reasons
}
