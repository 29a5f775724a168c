// Package proc owns the process plumbing shared by the built-in python and
// bash adapters: starting a worker in its own process group with a minimal
// environment, the control pipes it talks on, capture of its stdout/stderr
// into structured logs, and killing plus reaping its whole group.
//
// # File descriptors
//
// A worker started by [Start] sees:
//
//	fd 0  /dev/null
//	fd 1  log pipe (captured line by line into the logger)
//	fd 2  the same log pipe
//	fd 3  request pipe, read end (Go writes requests)
//	fd 4  response pipe, write end (Go reads responses)
//	fd 5  lifeline, read end (nothing is ever written; see below)
//
// The handler's own stdout and stderr therefore never share a pipe with the
// protocol: whatever a handler prints is a log line, and only the worker's
// bootstrap writes to fd 4. Bootstraps close any other descriptor the
// server leaked to them (Go's exec does not close descriptors without
// close-on-exec), move fds 3 and 4 out of the way and keep them from being
// inherited by the handler's children, so a background child cannot hold
// the protocol open.
//
// # Binary frames
//
// [WriteFrame] and [ReadFrame] implement the length-prefixed framing used by
// the python worker: one kind byte, a 4-byte big-endian payload length, then
// the payload. The bash worker uses a line-based variant described in the
// bash package, because bash cannot read binary lengths.
//
// # Log synchronisation
//
// Lines arrive on the log pipe asynchronously with respect to the response
// pipe. To attribute every line to the invocation that printed it, a worker
// flushes its stdout and stderr before it answers (its ready message, an
// invocation's status), so what it printed is on the log pipe before the
// answer is on the response pipe. Once the answer is read,
// [Process.SyncLogs] logs what the log pipe holds then, with the
// invocation's logger, a partial last line included; the capture
// goroutine and SyncLogs serialise their reads, so a byte one of them read
// is logged before the other reads on. Nothing waits: a handler's
// background child still writing does not hold the invocation up (its
// later lines go to the worker's logger).
//
// # Log levels
//
// Each line is logged at the level it gives itself: a leading level word
// (TRACE, DEBUG, INFO, WARN, WARNING, ERROR, and CRITICAL or FATAL as
// error; any case; bracketed or followed by ':', a space or nothing) keeps
// the line whole as the message, and a JSON object with a string "level"
// gives its "msg" or "message" as the message and its other members as
// "fields". Any other line is info, so lines below the logger's level (a
// handler's DEBUG output under --log-level info) are dropped.
//
// # Process ownership
//
// Workers run in their own process group (Setpgid) and, on Linux, receive
// SIGKILL when the server dies (Pdeathsig). Because Linux delivers the
// parent-death signal when the forking *thread* exits, every worker is
// forked from one dedicated goroutine locked to its OS thread for the life
// of the program, so a worker never dies because an unrelated goroutine's
// locked thread was torn down. Unless disabled, the server process also
// becomes a child subreaper, so descendants a handler leaves behind are
// re-parented to the server and reaped when their worker's group is
// terminated, instead of piling up as zombies under an init that may not
// reap them.
//
// The parent-death signal reaches the worker process only, not what it
// forked (a bash invocation's subshell and its children, a python
// handler's subprocesses). So that none of those outlives a SIGKILLed
// server, every worker also gets a lifeline: the read end of a pipe whose
// only write end the server holds (close-on-exec, never inherited). The
// kernel closes it when the server dies, however it dies, and the read end
// then reports end of file. Each bootstrap forks a small guardian into the
// worker's group first thing, which keeps only the lifeline open, blocks
// reading it and on end of file kills its whole process group with
// SIGKILL. The guardian does not depend on the worker being responsive
// (sourcing a slow file, holding the GIL, blocked in a foreground wait)
// and races nothing: it is a separate process, and Pdeathsig stays as the
// last resort for the worker itself should the guardian be gone. Terminate
// closes the lifeline only after the group is gone, so it never cuts the
// SIGTERM grace short; the guardian dies of the SIGTERM like the rest. A
// descendant that leaves the group (setsid, setpgid) escapes both the group
// kill and the guardian.
//
// # Limits
//
// Go's exec can set neither rlimits nor a cgroup for a child, and setting
// them after Start races the interpreter. So when [Config.Limits] or a
// cgroup applies, [Start] runs /bin/sh, which writes 1000 to its
// oom_score_adj (the OOM killer takes a worker before the server), joins
// the worker's cgroup leaf, sets the rlimits on itself (RLIMIT_DATA only
// without a memory cgroup, which a child would hit first, unnamed) and
// execs the interpreter:
// same pid, group and descriptors, and every process the handler forks
// inherits the limits. Paths travel as positional parameters, never as
// shell code, and PWD, which the shell exports on its own, is put back.
//
// The leaf (fnbridge-<server pid>-<n> under the server's own cgroup, in
// cgroup v2 when memory and pids can be enabled for children, otherwise in
// the writable v1 pids and memory hierarchies) carries memory and pids
// limits for the worker as a whole. cgroup v2 enables controllers for
// children only of a cgroup without processes, so a server alone in its
// delegated cgroup moves itself into fnbridge-<pid>-server first; it never
// moves another process, nor itself as a container's PID 1. Terminate kills whatever is still in
// it, descendants that left the process group included, and removes it;
// leaves of a server that died are emptied (what is left in them is
// killed, and named by [StaleWorkersKilled]) and removed by the next one.
// [Mechanisms] describes what is in force on the host.
//
// [Supervisor.Do] turns a limit hit into a [LimitError]: the worker died
// of SIGXFSZ or SIGXCPU, the leaf's oom_kill or pids max counter moved
// during the invocation, or the handler error (see [HandlerFailure]) is a
// MemoryError, EFBIG, EMFILE or a status of 128+SIGXFSZ or 128+SIGXCPU.
// The worker is discarded, so the next invocation starts a fresh one.
//
// A setsid'ed descendant also leaves the group that the waits of
// [Process.ReapStrays] and Terminate reach. The server, as subreaper,
// reaps on every SIGCHLD the exited children that lead a session of their
// own (workers and probes share the server's session, so such a child can
// only be an adopted orphan) and the descendants that left the group
// another way (setpgid: `timeout`) noted when their worker ended: those
// Terminate found in the cgroup leaf, or, without one, below the worker in
// the process tree. Such a descendant that exits while its worker lives
// stays a zombie until the worker ends; nothing tells it apart from a
// child exec.Cmd waits for before then.
//
// [Probe] runs a one-off command (the python adapter's interpreter probe)
// under the same rules: own group, Pdeathsig, and its group killed and
// reaped before it returns.
package proc
