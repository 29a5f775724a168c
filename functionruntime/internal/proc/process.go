package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/internal/procstat"
)

// DefaultGrace is how long a worker's group gets between SIGTERM and
// SIGKILL when no grace is configured.
const DefaultGrace = 2 * time.Second

// exitDrain bounds how long a response read may still wait for buffered
// bytes after the worker exited, should some stray descendant still hold
// the response pipe open.
const exitDrain = 500 * time.Millisecond

// logDrain bounds how long log capture keeps reading after the whole group
// was killed (a descendant that left the group may still hold the pipe).
const logDrain = 200 * time.Millisecond

// reapWait bounds how long Terminate waits for killed group members to be
// reaped before giving up on them.
const reapWait = time.Second

// Config describes one worker process.
type Config struct {
	// Path is the interpreter's absolute path.
	Path string
	// Args are the arguments after argv[0].
	Args []string
	// Dir is the working directory.
	Dir string
	// Env is the complete environment ("KEY=value"); nothing of the
	// server's environment is inherited. A nil Env is an empty environment.
	Env []string
	// Logger receives the worker's log lines outside invocations.
	Logger zerolog.Logger
	// MaxLogLine bounds a log line in bytes (0: [DefaultMaxLogLine]).
	MaxLogLine int
	// NoSubreaper keeps the server from becoming a child subreaper.
	NoSubreaper bool
	// Limits bound the worker (see [Limits]); the zero value is unlimited.
	Limits Limits
}

// Process is one running worker and the pipes to it. Its methods other than
// Terminate, Interrupt and Exited are meant for one caller at a time.
type Process struct {
	cmd  *exec.Cmd
	pid  int
	req  *os.File // write end; the worker reads it as fd 3
	resp *os.File // read end; the worker writes it as fd 4
	life *os.File // write end of the lifeline, the worker's fd 5; never written
	logR *os.File
	logs *logCapture

	limits  Limits
	inForce Limits      // limits, but for those lowered to the server's hard limits
	cg      *cgroupLeaf // nil without a worker cgroup
	// jobsAreChildren: the worker's own children, but for own, are what
	// its invocations started (see JobsAreChildren).
	jobsAreChildren bool
	own             []int

	exited  chan struct{}
	waitErr error // valid once exited is closed

	termOnce sync.Once
}

// Start launches a worker as described by cfg. It returns once the process
// exists; the caller then performs its own handshake on the pipes.
func Start(cfg Config) (*Process, error) {
	if !cfg.NoSubreaper {
		becomeSubreaper()
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	reqR, reqW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("create request pipe: %w", err)
	}
	respR, respW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("create response pipe: %w", err)
	}
	logR, logW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("create log pipe: %w", err)
	}
	// Only this process holds the lifeline's write end (close-on-exec), so
	// the worker's end reports EOF exactly when the server is gone or
	// Terminate is done; see the package doc.
	lifeR, lifeW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("create lifeline pipe: %w", err)
	}

	leaf, err := newCgroupLeaf(cfg.Limits)
	if err != nil {
		closeAll()
		return nil, err
	}
	path, args, inForce, lowered, err := launch(cfg, leaf)
	if err != nil {
		closeAll()
		leaf.release(0)
		return nil, err
	}
	warnLowered(cfg.Logger, lowered)
	env := cfg.Env
	if env == nil {
		env = []string{} // nil would mean "inherit the server's environment"
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        args,
		Dir:         cfg.Dir,
		Env:         env,
		Stdout:      logW,
		Stderr:      logW,
		ExtraFiles:  []*os.File{reqR, respW, lifeR},
		SysProcAttr: sysProcAttr(),
	}
	onSpawnThread(func() { err = cmd.Start() })
	// The child holds its own copies now; keeping ours would hide EOFs.
	_ = reqR.Close()
	_ = respW.Close()
	_ = logW.Close()
	_ = lifeR.Close()
	if err != nil {
		_ = reqW.Close()
		_ = respR.Close()
		_ = logR.Close()
		_ = lifeW.Close()
		leaf.release(0)
		return nil, fmt.Errorf("start %s: %w", cfg.Path, err)
	}

	p := &Process{
		cmd:     cmd,
		pid:     cmd.Process.Pid,
		req:     reqW,
		resp:    respR,
		life:    lifeW,
		logR:    logR,
		logs:    newLogCapture(logR, cfg.Logger, cfg.MaxLogLine),
		exited:  make(chan struct{}),
		limits:  cfg.Limits,
		inForce: inForce,
		cg:      leaf,
	}
	go p.logs.run()
	go func() {
		awaitExit(p.pid) // so that Wait does not hold a thread and its P
		p.waitErr = cmd.Wait()
		close(p.exited)
		// Normally the response pipe reports EOF now; this only unblocks a
		// reader when a stray descendant kept the write end open.
		_ = p.resp.SetReadDeadline(time.Now().Add(exitDrain))
	}()
	return p, nil
}

// Pid is the worker's process ID, which is also its process group ID.
func (p *Process) Pid() int { return p.pid }

// Requests is the pipe the worker reads requests from (its fd 3).
func (p *Process) Requests() *os.File { return p.req }

// Responses is the pipe the worker writes responses to (its fd 4).
func (p *Process) Responses() *os.File { return p.resp }

// Exited is closed once the worker process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// HasExited reports whether the worker process has exited.
func (p *Process) HasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Alive reports whether the worker is still running. Unlike HasExited it
// also notices a worker that died a moment ago but whose exit the waiting
// goroutine has not recorded yet; it then waits for that record, so a dead
// worker is never handed an invocation.
func (p *Process) Alive() bool {
	if p.HasExited() {
		return false
	}
	if hasExited(p.pid) {
		<-p.exited
		return false
	}
	return true
}

// ExitDescription describes how the worker ended ("exit status 1",
// "signal: killed"); empty while it runs.
func (p *Process) ExitDescription() string {
	if !p.HasExited() {
		return ""
	}
	var ee *exec.ExitError
	if p.waitErr == nil || errors.As(p.waitErr, &ee) {
		return p.cmd.ProcessState.String()
	}
	return p.waitErr.Error()
}

// ExitCode is the worker's exit status once it has exited of itself; ok
// is false while it runs and when a signal ended it.
func (p *Process) ExitCode() (code int, ok bool) {
	if !p.HasExited() || p.cmd.ProcessState == nil {
		return 0, false
	}
	code = p.cmd.ProcessState.ExitCode()
	return code, code >= 0
}

// Interrupt makes any blocked request write or response read fail at once.
// It is meant for context cancellation, after which the process is
// terminated; the deadlines are never lifted.
func (p *Process) Interrupt() {
	past := time.Unix(1, 0)
	_ = p.req.SetWriteDeadline(past)
	_ = p.resp.SetReadDeadline(past)
}

// BeginInvocation routes log lines to l until [Process.EndInvocation] and
// forgets the recent lines remembered so far.
func (p *Process) BeginInvocation(l *zerolog.Logger) { p.logs.setLogger(l) }

// EndInvocation routes log lines back to the worker's logger. The recent
// lines of the invocation stay available to [Process.RecentLines].
func (p *Process) EndInvocation() { p.logs.cur.Store(nil) }

// SyncLogs logs what the worker wrote to its log pipe so far, with the
// logger in place: called once the worker answered (its ready message,
// an invocation's status), every line it printed before the answer is
// logged when SyncLogs returns, a partial last line included. It never
// waits for the worker.
func (p *Process) SyncLogs() { p.logs.drain() }

// RecentLines returns up to n of the last log lines (each at most 1 KiB)
// since the last [Process.BeginInvocation].
func (p *Process) RecentLines(n int) []string { return p.logs.lastLines(n) }

// ReapStrays reaps descendants that exited after being re-parented to the
// server, without touching the worker itself. Call it between invocations
// so a handler that spawns background children does not pile up zombies.
func (p *Process) ReapStrays() { reapStrays(p.pid, p.pid) }

// JobsAreChildren is for a worker that runs invocations in its own
// process (a bash worker's inline invocations): its children are then its
// invocations' background jobs, which [Process.Leftovers] counts, but for
// the processes of its group it has now, once ready (its guardian, what
// its file started), which are the worker's own.
func (p *Process) JobsAreChildren() {
	for _, st := range procstat.All() {
		if st.PGID == p.pid && st.PID != p.pid && !st.Dead() {
			p.own = append(p.own, st.PID)
		}
	}
	p.jobsAreChildren = true
}

// Leftovers lists the live processes of the worker's group other than the
// worker, its own children and except: what ended invocations left
// running (their background jobs, re-parented once their subshell exited,
// or children of a worker whose jobs are its children).
func (p *Process) Leftovers(except ...int) []int {
	return p.LeftoversBefore(0, except...)
}

// LeftoversBefore is Leftovers limited to the processes that started in
// a clock tick before ticks ([procstat.BootTicks]; 0: any): left by
// earlier invocations when ticks is when an invocation began. One that
// started in the same tick (10 ms) is not counted, so that an
// invocation's own processes never are.
func (p *Process) LeftoversBefore(ticks uint64, except ...int) []int {
	var left []int
	for _, st := range procstat.All() {
		if st.PGID == p.pid && st.PID != p.pid && (st.PPID != p.pid || p.jobsAreChildren) && !st.Dead() &&
			!slices.Contains(except, st.PID) && !slices.Contains(p.own, st.PID) && (ticks == 0 || st.StartTime < ticks) {
			left = append(left, st.PID)
		}
	}
	return left
}

// Terminate stops the worker's whole process group: SIGTERM, up to grace
// for the group to exit, then SIGKILL. It reaps the worker (and any group
// member re-parented to the server), finishes log capture and closes the
// pipes, the lifeline last, once the group is gone. It is idempotent and
// safe to call concurrently.
func (p *Process) Terminate(grace time.Duration) {
	p.termOnce.Do(func() {
		if grace <= 0 {
			grace = DefaultGrace
		}
		pgid := p.pid
		if p.cg == nil {
			// Without a cgroup, what left the group outlives the worker;
			// noted now, it is reaped when it exits (see reapOrphans).
			noteDescendants(p.pid, pgid)
		}
		signalGroup(pgid, syscall.SIGTERM)
		deadline := time.Now().Add(grace)
		timer := time.NewTimer(grace)
		select {
		case <-p.exited:
		case <-timer.C:
		}
		timer.Stop()
		waitGroupEmpty(pgid, deadline, p.exited)
		signalGroup(pgid, syscall.SIGKILL)
		<-p.exited
		waitGroupEmpty(pgid, time.Now().Add(reapWait), p.exited)
		// Members that left the group are still in the worker's cgroup.
		p.cg.release(reapWait)

		_ = p.logR.SetReadDeadline(time.Now().Add(logDrain))
		<-p.logs.done
		_ = p.logR.Close()
		_ = p.req.Close()
		_ = p.resp.Close()
		_ = p.life.Close()
	})
}

// waitGroupEmpty polls until no live process is left in pgid or the
// deadline passes, reaping members re-parented to the server once the
// leader (whose status belongs to exec.Cmd.Wait) has been reaped.
func waitGroupEmpty(pgid int, deadline time.Time, leaderReaped <-chan struct{}) {
	for {
		select {
		case <-leaderReaped:
			reapGroup(pgid)
		default:
		}
		if !groupAlive(pgid) || !time.Now().Before(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
