//go:build linux

package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
)

// goneBridge is a pid no process can have (above PID_MAX_LIMIT), so a leaf
// named after it is a leaf of a bridge that is gone.
const goneBridge = 1<<22 + 1

// hierarchies are the ones stale leaves are cleaned in: cgroup v2, where
// cgroup.kill empties a leaf, and a v1 hierarchy, where each process is
// killed by pid.
var hierarchies = []string{"cgroup2", "pids"}

// testCgroup makes a cgroup for one test below the test process's own
// cgroup in hierarchy (the leaves need no controllers, only a cgroup a
// process can be moved into) and removes it when the test ends. It skips
// where the test may not create one.
func testCgroup(t *testing.T, hierarchy string) string {
	t.Helper()
	m, ok := readMounts("/proc/self/mountinfo")[hierarchy]
	if !ok {
		t.Skipf("no %s hierarchy mounted", hierarchy)
	}
	key := hierarchy
	if hierarchy == "cgroup2" {
		key = ""
	}
	name := fmt.Sprintf("proc-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	dir := filepath.Join(cgroupDir(m, readCgroupPaths("/proc/self/cgroup")[key]), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("no writable %s cgroup here: %v", hierarchy, err)
	}
	t.Cleanup(func() { removeTestCgroup(t, dir) })
	return dir
}

// removeTestCgroup removes dir and the cgroups below it. It runs after the
// processes' own cleanups, but a killed process leaves its cgroup only once
// it has exited, so a busy cgroup is tried again for a while.
func removeTestCgroup(t *testing.T, dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	deadline := time.Now().Add(10 * time.Second)
	for i := len(dirs) - 1; i >= 0; i-- {
		for {
			err := os.Remove(dirs[i])
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("test cgroup %s left behind: %v", dirs[i], err)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// mkLeaf creates the cgroup parent/name.
func mkLeaf(t *testing.T, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sleeper is a `sleep 600` of the test's, waited for from the start, so
// that its death is seen whoever reaps it (the cleanup under test reaps the
// strays it kills).
type sleeper struct {
	cmd    *exec.Cmd
	pid    int
	start  uint64 // clock ticks after boot, which tell a reused pid apart
	exited chan struct{}
}

// startSleeper starts a sleeper, moves it into cgroup dir unless dir is "",
// and kills and waits for it when the test ends.
func startSleeper(t *testing.T, dir string, args ...string) *sleeper {
	t.Helper()
	if len(args) == 0 {
		args = []string{"sleep", "600"}
	}
	s := &sleeper{cmd: exec.Command(args[0], args[1:]...), exited: make(chan struct{})}
	if err := s.cmd.Start(); err != nil {
		t.Skipf("%s: %v", args[0], err)
	}
	s.pid = s.cmd.Process.Pid
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.stop)
	if st, err := procstat.Read(s.pid); err == nil {
		s.start = st.StartTime
	}
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(s.pid)), 0); err != nil {
			t.Skipf("move a process into %s: %v", dir, err)
		}
	}
	return s
}

func (s *sleeper) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// alive reports whether the sleeper is still running.
func (s *sleeper) alive() bool {
	st, err := procstat.Read(s.pid)
	return err == nil && st.StartTime == s.start && !st.Dead()
}

// requireGone fails unless the sleeper has died and been reaped (by its
// own wait or by the cleanup under test).
func (s *sleeper) requireGone(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s (pid %d) still alive after the cleanup", what, s.pid)
	}
	if st, err := procstat.Read(s.pid); err == nil && st.StartTime == s.start {
		t.Fatalf("%s (pid %d) not reaped: state %c", what, s.pid, st.State)
	}
}

func requireRemoved(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stale leaf %s not removed: %v", dir, err)
	}
}

func requireKept(t *testing.T, s *sleeper, dir string) {
	t.Helper()
	if !s.alive() {
		t.Fatalf("the process (pid %d) in %s was killed", s.pid, dir)
	}
	if got := readPids(filepath.Join(dir, "cgroup.procs")); len(got) != 1 || got[0] != s.pid {
		t.Fatalf("%s holds %v, want the process %d still there", dir, got, s.pid)
	}
}

// A process that left its worker's process group (setsid) outlives a
// SIGKILLed bridge in the worker's leaf; the next bridge kills it, and
// what it left in a cgroup below the leaf, and removes the leaf.
func TestStaleLeafOfAGoneBridgeIsEmptied(t *testing.T) {
	for _, h := range hierarchies {
		t.Run(h, func(t *testing.T) {
			parent := testCgroup(t, h)
			leaf := mkLeaf(t, parent, fmt.Sprintf("fnbridge-%d-1", goneBridge))
			escaped := startSleeper(t, leaf)
			server := mkLeaf(t, parent, fmt.Sprintf("fnbridge-%d-server", goneBridge))
			inner := mkLeaf(t, server, "inner")
			deeper := startSleeper(t, inner)
			killed := strings.Join(removeStaleLeaves(parent), ", ")
			escaped.requireGone(t, "the escaped process")
			deeper.requireGone(t, "the process in a cgroup below the leaf")
			requireRemoved(t, leaf)
			requireRemoved(t, server)
			for _, s := range []*sleeper{escaped, deeper} {
				if want := fmt.Sprintf("pid %d (sleep) in %s", s.pid, parent); !strings.Contains(killed, want) {
					t.Errorf("killed %q, want it to name %q", killed, want)
				}
			}
		})
	}
}

// A bridge that is running keeps its leaves, its own server leaf included.
func TestLeafOfALiveBridgeIsLeftAlone(t *testing.T) {
	for _, h := range hierarchies {
		t.Run(h, func(t *testing.T) {
			parent := testCgroup(t, h)
			bridge := startSleeper(t, "") // stands in for the other bridge
			leaf := mkLeaf(t, parent, fmt.Sprintf("fnbridge-%d-1", bridge.pid))
			worker := startSleeper(t, leaf)
			server := mkLeaf(t, parent, fmt.Sprintf("fnbridge-%d-server", os.Getpid()))
			ours := startSleeper(t, server)
			removeStaleLeaves(parent)
			requireKept(t, worker, leaf)
			requireKept(t, ours, server)
		})
	}
}

// The pid of a bridge that is gone may be taken by an unrelated process: a
// process in the leaf that started before it shows that it cannot be the
// leaf's owner.
func TestStaleLeafOfAReusedPidIsEmptied(t *testing.T) {
	for _, h := range hierarchies {
		t.Run(h, func(t *testing.T) {
			parent := testCgroup(t, h)
			escaped := startSleeper(t, "")
			reuser := startSleeper(t, "")
			for deadline := time.Now().Add(5 * time.Second); reuser.start <= escaped.start; {
				if time.Now().After(deadline) {
					t.Fatal("no process with a later start time")
				}
				time.Sleep(procstat.ClockTick) // start times count clock ticks
				reuser = startSleeper(t, "")
			}
			leaf := mkLeaf(t, parent, fmt.Sprintf("fnbridge-%d-1", reuser.pid))
			if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(escaped.pid)), 0); err != nil {
				t.Skipf("move a process into %s: %v", leaf, err)
			}
			removeStaleLeaves(parent)
			escaped.requireGone(t, "the escaped process")
			requireRemoved(t, leaf)
			if !reuser.alive() {
				t.Fatal("the process that reused the pid was killed")
			}
		})
	}
}

// A bridge that got the pid of its predecessor finds that one's leaves
// under its own pid; before it has made a leaf, those are stale.
func TestStaleLeafOfThePredecessorWithOurPid(t *testing.T) {
	parent := testCgroup(t, "cgroup2")
	prev := leafSeq.Load()
	t.Cleanup(func() { leafSeq.Store(prev) })
	leafSeq.Store(0)
	leaf := mkLeaf(t, parent, fmt.Sprintf("fnbridge-%d-3", os.Getpid()))
	escaped := startSleeper(t, leaf)
	leafSeq.Store(1) // a leaf of this bridge's own now
	removeStaleLeaves(parent)
	requireKept(t, escaped, leaf)
	leafSeq.Store(0)
	removeStaleLeaves(parent)
	escaped.requireGone(t, "the predecessor's escaped process")
	requireRemoved(t, leaf)
}

// A leaf holding a process of another pid namespace is left alone: the
// pid in its name is of that namespace, and says nothing here.
func TestLeafWithAProcessOfAnotherPidNamespaceIsLeftAlone(t *testing.T) {
	parent := testCgroup(t, "cgroup2")
	leaf := mkLeaf(t, parent, fmt.Sprintf("fnbridge-%d-1", goneBridge))
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1) here")
	}
	outer := startSleeper(t, "", "unshare", "--pid", "--fork", "--kill-child", "sleep", "600")
	inner := 0
	for deadline := time.Now().Add(5 * time.Second); inner == 0; time.Sleep(5 * time.Millisecond) {
		select {
		case <-outer.exited:
			t.Skip("unshare --pid is not permitted here")
		default:
		}
		if time.Now().After(deadline) {
			t.Skip("unshare --pid started no child")
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", outer.pid, outer.pid))
		inner, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	t.Cleanup(func() {
		// unshare reaps its child and exits with it; killed first, it
		// would leave the child to init.
		_ = syscall.Kill(inner, syscall.SIGKILL)
		select {
		case <-outer.exited:
		case <-time.After(5 * time.Second):
		}
	})
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(inner)), 0); err != nil {
		t.Skipf("move a process into %s: %v", leaf, err)
	}
	removeStaleLeaves(parent)
	if !procstat.Alive(inner) {
		t.Fatal("the process of the other pid namespace was killed")
	}
	if _, err := os.Stat(leaf); err != nil {
		t.Fatal(err)
	}
}
