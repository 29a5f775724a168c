//go:build !linux

package proc

import (
	"syscall"
	"time"
)

// onSpawnThread runs f; only Linux ties child lifetime to a thread.
func onSpawnThread(f func()) { f() }

// sysProcAttr puts the worker in its own process group. Parent-death
// signals are Linux-only; elsewhere a worker can outlive a crashed server.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func becomeSubreaper()                 {}
func reapStrays(pgid, leader int)      {}
func reapGroup(pgid int)               {}
func noteDescendants(leader, pgid int) {}

func groupGone(pgid int) bool { return syscall.Kill(-pgid, 0) == syscall.ESRCH }

func signalGroup(pgid int, sig syscall.Signal) { _ = syscall.Kill(-pgid, sig) }

func groupAlive(pgid int) bool { return !groupGone(pgid) }

func hasExited(pid int) bool { return false }

// awaitExit returns at once: the wait that follows blocks a thread.
func awaitExit(pid int) {}

// waitExitedNoReap returns false at once: without waitid's WNOWAIT the
// exit is only seen by exec.Cmd.Wait, so Probe cannot kill the group
// between the command's exit and its reaping.
func waitExitedNoReap(pid int) bool { return false }

type cgroupLeaf struct{ dirs []string }

func newCgroupLeaf(Limits) (*cgroupLeaf, error)   { return nil, nil }
func (c *cgroupLeaf) counters() limitCounters     { return limitCounters{} }
func (c *cgroupLeaf) boundsMemory() bool          { return false }
func (c *cgroupLeaf) release(time.Duration)       {}
func cgroupMechanism() (string, string, []string) { return "", "", []string{"cgroups are Linux-only"} }
func staleKilled() []string                       { return nil }

// pendingBytes bounds what a log drain reads here: the non-blocking pipe
// is read until it is empty, up to 1 MiB.
func pendingBytes(fd int) (int, error) { return 1 << 20, nil }
