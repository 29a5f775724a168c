//go:build linux

package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The counters a limit hit is told by, in the event files' formats: v2
// memory.events and pids.events, v1 memory.oom_control and pids.events.
func TestEventCounter(t *testing.T) {
	for _, tc := range []struct {
		file, key string
		want      int64
	}{
		{"low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\noom_group_kill 0\n", "oom_kill", 1},
		{"max 7\n", "max", 7},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 4\n", "oom_kill", 4},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 5", "oom_kill", 5}, // no final newline
		{"max 0\n", "oom_kill", 0},
		{"", "max", 0},
	} {
		if got := eventCounter([]byte(tc.file), tc.key); got != tc.want {
			t.Errorf("eventCounter(%q, %s) = %d, want %d", tc.file, tc.key, got, tc.want)
		}
	}
}

// fakeCgroup2 stands in for the kernel on a cgroup v2 tree in a temporary
// directory, for the two answers enableV2 depends on and this host cannot
// give (its memory and pids controllers are bound to cgroup v1): a write
// to cgroup.subtree_control of a non-root cgroup that holds processes
// fails with EBUSY (the no-internal-process rule), and a pid written to a
// cgroup.procs leaves every other cgroup of the tree (whose interface
// files are plain files here: a leaf that empties loses its cgroup.procs,
// so that it can be removed as an empty cgroup can).
type fakeCgroup2 struct {
	root         string
	refuseAfter  error // what enabling answers once the cgroup is empty
	populatedErr error // what it answers while it holds processes (EBUSY if nil)
}

func (f *fakeCgroup2) write(path string, data []byte) error {
	dir, file := filepath.Dir(path), filepath.Base(path)
	switch file {
	case "cgroup.subtree_control":
		if dir != f.root && len(readPids(filepath.Join(dir, "cgroup.procs"))) > 0 {
			if f.populatedErr != nil {
				return f.populatedErr
			}
			return syscall.EBUSY
		}
		if f.refuseAfter != nil {
			return f.refuseAfter
		}
		return os.WriteFile(path, []byte("memory pids\n"), 0o644)
	case "cgroup.procs":
		pid := strings.TrimSpace(string(data))
		_ = filepath.WalkDir(f.root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				var keep []string
				for _, q := range strings.Fields(readFile(p)) {
					if q != pid {
						keep = append(keep, q+"\n")
					}
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(p), "cgroup.controllers")); len(keep) == 0 && err != nil {
					// A leaf made by the code under test: as in cgroupfs,
					// an empty one can be removed.
					return os.Remove(p)
				}
				_ = os.WriteFile(p, []byte(strings.Join(keep, "")), 0o644)
			}
			return nil
		})
		return os.WriteFile(path, []byte(readFile(path)+pid+"\n"), 0o644)
	}
	return os.WriteFile(path, data, 0o644)
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// newFakeCgroup2 makes the tree with the server's cgroup /svc holding
// procs, and the mountinfo and /proc/self/cgroup that point there.
func newFakeCgroup2(t *testing.T, procs ...int) (f *fakeCgroup2, svc, mountinfo, self string) {
	t.Helper()
	f = &fakeCgroup2{root: t.TempDir()}
	svc = filepath.Join(f.root, "svc")
	if err := os.Mkdir(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	var list string
	for _, p := range procs {
		list += strconv.Itoa(p) + "\n"
	}
	for name, body := range map[string]string{"cgroup.controllers": "cpu io memory pids\n", "cgroup.subtree_control": "", "cgroup.procs": list} {
		if err := os.WriteFile(filepath.Join(svc, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meta := t.TempDir()
	mountinfo, self = filepath.Join(meta, "mountinfo"), filepath.Join(meta, "cgroup")
	if err := os.WriteFile(mountinfo, []byte("30 25 0:26 / "+f.root+" rw,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(self, []byte("0::/svc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prev := cgroupWrite
	cgroupWrite = f.write
	t.Cleanup(func() { cgroupWrite = prev })
	return f, svc, mountinfo, self
}

// A bridge alone in a delegated cgroup v2 (systemd's Delegate=yes, a
// container's own cgroup) moves itself into a leaf of its own, so that the
// worker leaves beside it get memory and pids.
func TestCgroupV2MovesTheBridgeAsideWhenAlone(t *testing.T) {
	_, svc, mountinfo, self := newFakeCgroup2(t, os.Getpid())
	c := findCgroups(mountinfo, self)
	leaf := filepath.Join(svc, fmt.Sprintf("fnbridge-%d-server", os.Getpid()))
	if c.v2 != svc || c.v2Self != leaf {
		t.Fatalf("v2 = %q, moved into %q (reasons %q); want %q and %q", c.v2, c.v2Self, c.reasons, svc, leaf)
	}
	if got := readPids(filepath.Join(leaf, "cgroup.procs")); len(got) != 1 || got[0] != os.Getpid() {
		t.Errorf("the server's leaf holds %v, want the server (%d)", got, os.Getpid())
	}
	if got := readPids(filepath.Join(svc, "cgroup.procs")); len(got) != 0 {
		t.Errorf("the delegated cgroup still holds %v", got)
	}
	if sub := readFile(filepath.Join(svc, "cgroup.subtree_control")); !hasWord(sub, "memory") || !hasWord(sub, "pids") {
		t.Errorf("subtree_control = %q, want memory and pids", sub)
	}
	if p, m, _ := cgroupMechanismOf(c); !strings.Contains(p, "moved itself into "+leaf) || !strings.Contains(m, "memory.max") {
		t.Errorf("mechanisms %q / %q do not say where the bridge went", p, m)
	}
}

// A cgroup the bridge shares with other processes (a terminal's scope) is
// never rearranged: no process moves, the reason names one of the others.
func TestCgroupV2LeavesASharedCgroupAlone(t *testing.T) {
	_, svc, mountinfo, self := newFakeCgroup2(t, 1, os.Getpid())
	c := findCgroups(mountinfo, self)
	if c.v2 != "" {
		t.Fatalf("v2 = %q in a cgroup shared with pid 1", c.v2)
	}
	if r := strings.Join(c.reasons, "; "); !strings.Contains(r, "other than the bridge (pid 1 first)") || !strings.Contains(r, "Delegate=yes") {
		t.Errorf("reasons %q do not say why", r)
	}
	if got := readPids(filepath.Join(svc, "cgroup.procs")); len(got) != 2 {
		t.Errorf("the cgroup holds %v, want both processes still there", got)
	}
	if _, err := os.Stat(filepath.Join(svc, fmt.Sprintf("fnbridge-%d-server", os.Getpid()))); !os.IsNotExist(err) {
		t.Errorf("a leaf for the bridge was left behind: %v", err)
	}
}

// If the controllers stay refused after the move, the bridge goes back to
// where it was and its leaf is removed.
func TestCgroupV2MovesBackWhenStillRefused(t *testing.T) {
	f, svc, mountinfo, self := newFakeCgroup2(t, os.Getpid())
	f.refuseAfter = syscall.EACCES
	c := findCgroups(mountinfo, self)
	if c.v2 != "" {
		t.Fatalf("v2 = %q though enabling was refused", c.v2)
	}
	if r := strings.Join(c.reasons, "; "); !strings.Contains(r, "after moving the bridge into a cgroup of its own") {
		t.Errorf("reasons %q", r)
	}
	if got := readPids(filepath.Join(svc, "cgroup.procs")); len(got) != 1 || got[0] != os.Getpid() {
		t.Errorf("the cgroup holds %v, want the server back", got)
	}
	if _, err := os.Stat(filepath.Join(svc, fmt.Sprintf("fnbridge-%d-server", os.Getpid()))); !os.IsNotExist(err) {
		t.Errorf("the bridge's leaf was not removed: %v", err)
	}
}

// A bridge that is PID 1 (a container's init) leaves the container's cgroup
// as it is: container runtimes exec into it, which cgroup v2 would refuse.
func TestCgroupV2LeavesAContainersCgroupAlone(t *testing.T) {
	_, svc, mountinfo, self := newFakeCgroup2(t, 1)
	prev := getpid
	getpid = func() int { return 1 }
	defer func() { getpid = prev }()
	c := findCgroups(mountinfo, self)
	if c.v2 != "" {
		t.Fatalf("v2 = %q for a PID 1 bridge", c.v2)
	}
	if r := strings.Join(c.reasons, "; "); !strings.Contains(r, "the bridge is PID 1") || !strings.Contains(r, "docker exec") {
		t.Errorf("reasons %q do not say why", r)
	}
	if got := readPids(filepath.Join(svc, "cgroup.procs")); len(got) != 1 || got[0] != 1 {
		t.Errorf("the cgroup holds %v, want PID 1 still there", got)
	}
}

// With pids already on in a cgroup that holds the bridge, enabling memory
// fails with EOPNOTSUPP (a thread root), not EBUSY: the bridge moves aside
// all the same.
func TestCgroupV2MovesAsideFromAThreadRoot(t *testing.T) {
	f, svc, mountinfo, self := newFakeCgroup2(t, os.Getpid())
	f.populatedErr = syscall.EOPNOTSUPP
	c := findCgroups(mountinfo, self)
	if c.v2 != svc || c.v2Self == "" {
		t.Fatalf("v2 = %q, moved into %q (reasons %q)", c.v2, c.v2Self, c.reasons)
	}
}
