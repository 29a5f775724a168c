package proc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
)

// Limits bound one worker. A zero field is unlimited. They are applied
// before the interpreter runs (see the package doc): per process as
// rlimits, and for the whole worker as a cgroup where one is available.
type Limits struct {
	Memory    int64         // bytes: memory cgroup of the worker, or else RLIMIT_DATA of each process
	Processes int64         // pids cgroup of the worker (no rlimit: RLIMIT_NPROC counts per user)
	OpenFiles int64         // RLIMIT_NOFILE of each process
	FileSize  int64         // bytes: RLIMIT_FSIZE of each process (stdout files included)
	CPU       time.Duration // RLIMIT_CPU of each process, over its whole life
}

// The limit names, as the configuration spells them.
const (
	LimitMemory    = "memory"
	LimitProcesses = "processes"
	LimitOpenFiles = "open_files"
	LimitFileSize  = "file_size"
	LimitCPU       = "cpu"
)

// LimitError is an invocation that failed because the worker hit one of
// its limits. The worker is discarded, so the next invocation gets a fresh
// one. Err is what the invocation failed with otherwise (a handler error,
// or a crash wrapping the supervisor's ErrCrashed).
type LimitError struct {
	Limit  string // one of the Limit* names
	Detail string // how it showed ("killed by SIGXFSZ")
	// InForce are the limits the worker ran under: the configured ones,
	// but for any lowered to the server's own hard limits.
	InForce Limits
	Err     error
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s limit exceeded (%s): %v", e.Limit, e.Detail, e.Err)
}

func (e *LimitError) Unwrap() error { return e.Err }

// StuckError is an invocation killed when its context ended (its
// timeout) while the worker could not have run it, whatever the function
// did: Why says what held it (a stopped worker shell, the processes limit
// reached, by processes earlier invocations left running too). The
// timeout stands, retryable: the next attempt gets a fresh worker.
type StuckError struct {
	Why string
	Err error
}

func (e *StuckError) Error() string { return e.Err.Error() + " (" + e.Why + ")" }

func (e *StuckError) Unwrap() error { return e.Err }

// stuck says what, besides the function, may have held an invocation
// that its context ended: the worker stopped by a signal (kill -STOP $$
// in a Bash function stops the shell that forks the next invocation), or
// a fork refused at the cgroup's process limit meanwhile. "" when neither.
func (p *Process) stuck(before, after limitCounters) string {
	if st, err := procstat.Read(p.pid); err == nil && (st.State == 'T' || st.State == 't') {
		return "the worker process was stopped (SIGSTOP or a terminal stop signal) and could not go on"
	}
	if p.limits.Processes > 0 && after.pidsMax > before.pidsMax {
		return fmt.Sprintf("meanwhile a fork failed at the worker's processes limit of %d, which processes earlier invocations left running count toward too", p.limits.Processes)
	}
	return ""
}

// HandlerFailure is implemented by the handler errors adapters return, so
// the supervisor can recognise a limit that surfaced inside the handler (a
// Python MemoryError, a Bash command killed by SIGXFSZ) without importing
// the adapters' error type.
type HandlerFailure interface {
	HandlerFailure() (typ, message string, exitCode int)
}

// limitCounters are the cgroup event counters read around an invocation;
// an increase means the worker hit that cgroup limit meanwhile.
type limitCounters struct{ pidsMax, oomKill int64 }

// limitHit tells which limit, if any, explains how an invocation failed.
// crashed is set when the worker died (the crash path of Supervisor.Do).
// before and after are the cgroup counters around the invocation (read
// after before the worker's cgroup is released).
func (p *Process) limitHit(before, after limitCounters, err error, crashed bool) (limit, detail string) {
	l := p.limits
	if l.Memory > 0 && after.oomKill > before.oomKill {
		return LimitMemory, "the worker's cgroup ran out of memory and the kernel killed a process"
	}
	if l.Processes > 0 && after.pidsMax > before.pidsMax {
		return LimitProcesses, "a fork failed at the worker's cgroup process limit"
	}
	if crashed && p.HasExited() {
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			switch ws.Signal() {
			case syscall.SIGXFSZ:
				return LimitFileSize, "the worker was killed by SIGXFSZ"
			case syscall.SIGXCPU:
				return LimitCPU, "the worker was killed by SIGXCPU"
			case syscall.SIGKILL:
				if l.CPU > 0 && p.cmd.ProcessState.UserTime()+p.cmd.ProcessState.SystemTime() >= l.CPU {
					return LimitCPU, "the worker used up its CPU time and was killed"
				}
			}
		}
	}
	var hf HandlerFailure
	if crashed || !errors.As(err, &hf) {
		return "", ""
	}
	typ, msg, code := hf.HandlerFailure()
	switch {
	case l.Memory > 0 && typ == "MemoryError" && !p.cg.boundsMemory():
		// RLIMIT_DATA is the memory limit only without the worker's
		// memory cgroup, whose limit kills (counted above): under it a
		// MemoryError is an allocation the system refused, or raised by
		// the code itself.
		return LimitMemory, "the handler could not allocate memory"
	case l.FileSize > 0 && (code == 128+int(syscall.SIGXFSZ) || oserror(msg, syscall.EFBIG)):
		return LimitFileSize, "a write went past the file size limit"
	case l.CPU > 0 && code == 128+int(syscall.SIGXCPU):
		return LimitCPU, "a process was killed by SIGXCPU"
	case l.OpenFiles > 0 && oserror(msg, syscall.EMFILE):
		return LimitOpenFiles, "the handler could not open another file"
	}
	return "", ""
}

// oserror reports whether a handler's failure message is a Python
// OSError of errno ("[Errno 24] Too many open files"): its own text
// starts so. A message that only quotes one (an upstream's error relayed)
// is no limit of this worker's.
func oserror(msg string, errno syscall.Errno) bool {
	return strings.HasPrefix(msg, "[Errno "+strconv.Itoa(int(errno))+"]")
}
