//go:build linux

package proc

import (
	"errors"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/fnbridge/fnbridge/internal/procstat"
	"golang.org/x/sys/unix"
)

// spawnRequests feeds the one goroutine that forks workers. It is locked to
// its OS thread and never returns, so that thread never exits: Linux sends a
// worker its Pdeathsig when the thread that forked it exits, not when the
// process does, and an ordinary goroutine may run on a thread that a later
// LockOSThread-and-return tears down.
var (
	spawnOnce     sync.Once
	spawnRequests chan func()
)

// onSpawnThread runs f on the dedicated spawn thread and waits for it.
func onSpawnThread(f func()) {
	spawnOnce.Do(func() {
		spawnRequests = make(chan func())
		go func() {
			runtime.LockOSThread()
			for req := range spawnRequests {
				req()
			}
		}()
	})
	done := make(chan struct{})
	spawnRequests <- func() {
		defer close(done)
		f()
	}
	<-done
}

// sysProcAttr puts the worker in its own process group and kills it when the
// server dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

var subreaperOnce sync.Once

// becomeSubreaper marks the server as a child subreaper (once), so orphans a
// handler leaves in its worker's group are re-parented here and can be
// reaped by [reapGroup] rather than by an init that may never reap them.
func becomeSubreaper() {
	subreaperOnce.Do(func() {
		// Best effort: without it orphans go to init, which is still correct
		// where init reaps.
		if unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != nil {
			return
		}
		// Orphans that left their worker's group (setsid) are reaped by no
		// group wait; reap them whenever a child exits.
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		go func() {
			for range ch {
				reapOrphans()
			}
		}()
	})
}

// strays are a worker's descendants seen outside its process group when
// the worker ended (`timeout` calls setpgid, so it and its child leave the
// group), by pid with their start time, which tells a reused pid apart.
// Re-parented to the server, they are children no exec.Cmd waits for, so
// reapOrphans reaps them once they exit.
var strays struct {
	mu   sync.Mutex
	pids map[int]uint64
}

// noteStray records pid, a descendant of a worker, for reapOrphans.
func noteStray(pid int) {
	st, err := procstat.Read(pid)
	if err != nil {
		return
	}
	strays.mu.Lock()
	if strays.pids == nil {
		strays.pids = map[int]uint64{}
	}
	strays.pids[pid] = st.StartTime
	strays.mu.Unlock()
}

// noteDescendants records the living descendants of the worker leader that
// left its process group pgid: without a cgroup nothing else finds them.
func noteDescendants(leader, pgid int) {
	all := procstat.All()
	parent := make(map[int]int, len(all))
	for _, st := range all {
		parent[st.PID] = st.PPID
	}
	for _, st := range all {
		if st.PGID == pgid || st.Dead() {
			continue
		}
		for p, hops := st.PPID, 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == leader {
				noteStray(st.PID)
				break
			}
		}
	}
}

// reapOrphans reaps exited children of the server that exec.Cmd does not
// wait for: those that lead a session of their own (the server never
// starts such a child: workers and probes share its session, so each is a
// handler's descendant that called setsid and was re-parented here) and
// the strays noted when their worker ended. Noted strays that are gone,
// or whose pid now names another process, are forgotten.
func reapOrphans() {
	self := os.Getpid()
	strays.mu.Lock()
	defer strays.mu.Unlock()
	for pid, start := range strays.pids {
		st, err := procstat.Read(pid)
		switch {
		case err != nil || st.StartTime != start:
			delete(strays.pids, pid)
		case st.PPID == self && st.Dead():
			var ws unix.WaitStatus
			if got, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid {
				delete(strays.pids, pid)
			}
		}
	}
	for _, st := range procstat.All() {
		if st.PPID != self || !st.Dead() {
			continue
		}
		if s, err := unix.Getsid(st.PID); err == nil && s == st.PID {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(st.PID, &ws, unix.WNOHANG, nil)
		}
	}
}

// siginfoPidOffset is where si_pid sits in a SIGCHLD siginfo_t: after three
// ints, aligned to the pointer size of the union that follows.
const siginfoPidOffset = 12 + (unsafe.Sizeof(uintptr(0)) - 4)

// reapStrays reaps exited members of group pgid other than leader without
// blocking. It peeks with WNOWAIT first so it never consumes the leader's
// status, which belongs to exec.Cmd.Wait.
func reapStrays(pgid, leader int) {
	for i := 0; i < 1024; i++ {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PGID, pgid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err != nil {
			return
		}
		pid := int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), siginfoPidOffset)))
		if pid == 0 || pid == leader {
			return
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != nil {
			return
		}
	}
}

// reapGroup reaps every exited member of group pgid. Only call it once the
// leader has been reaped by exec.Cmd.Wait.
func reapGroup(pgid int) {
	for i := 0; i < 1024; i++ {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return
		}
	}
}

// groupGone reports whether no process (zombies included) is left in pgid.
func groupGone(pgid int) bool {
	return syscall.Kill(-pgid, 0) == syscall.ESRCH
}

// signalGroup sends sig to every process of group pgid.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

// groupAlive reports whether group pgid still has a member that will go
// away on its own or by our reaping: a live process, or a zombie whose
// parent is the server. Zombies parented elsewhere (an init that does not
// reap) are beyond our reach and do not count.
func groupAlive(pgid int) bool {
	if groupGone(pgid) {
		return false
	}
	all := procstat.All()
	if len(all) == 0 {
		// /proc is unreadable (it always lists this process otherwise):
		// the group is known to exist, so count it as alive.
		return true
	}
	self := os.Getpid()
	for _, st := range all {
		if st.PGID == pgid && (!st.Dead() || st.PPID == self) {
			return true
		}
	}
	return false
}

// hasExited reports whether pid, a child of the server, has exited: it is
// a zombie (peeked with WNOWAIT, leaving the status to exec.Cmd.Wait) or
// already reaped by it (ECHILD).
func hasExited(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil {
		return errors.Is(err, unix.ECHILD)
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(&info), siginfoPidOffset)) != 0
}

// awaitExit parks the calling goroutine, not its thread, until pid (a
// child of the server, not yet reaped, so its pid cannot be reused) has
// exited: the wait that follows then returns at once. A thread blocked in
// waitid holds its P until sysmon retakes it, which with sysmon polling at
// 10 ms (internal/sysmon) stalled every other goroutine for 10-20 ms at
// GOMAXPROCS 1 each time a worker started. Without pidfds (before Linux
// 5.3, or refused by a seccomp profile) it returns at once and the wait
// that follows blocks a thread, with that stall.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, pidfdFlags)
	if err == unix.EINVAL {
		// Linux 5.3 to 5.9 have pidfds but not PIDFD_NONBLOCK; the
		// descriptor polls all the same once non-blocking.
		if fd, err = unix.PidfdOpen(pid, 0); err == nil {
			if err = unix.SetNonblock(fd, true); err != nil {
				unix.Close(fd)
			}
		}
	}
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// A pidfd is readable once its process has exited; Read parks until
	// the poller says so whenever the check says not yet.
	_ = rc.Read(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		return err != nil || n > 0
	})
}

// pidfdFlags are awaitExit's first try; a test swaps in flags the kernel
// refuses, to take the path of kernels without PIDFD_NONBLOCK.
var pidfdFlags = unix.PIDFD_NONBLOCK

// waitExitedNoReap blocks until pid, a child of the server, has exited,
// leaving it a zombie: its status stays for exec.Cmd.Wait, and its pid and
// process group id stay reserved until then. It reports whether it waited.
func waitExitedNoReap(pid int) bool {
	awaitExit(pid)
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err == nil
		}
	}
}

// pendingBytes is how many bytes the pipe fd holds unread.
func pendingBytes(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.TIOCINQ) }
