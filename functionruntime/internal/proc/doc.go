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
// writes a per-process marker (see [NewMarker]) to fd 2 after each
// invocation and after initialisation; [Process.LogBarrier] waits until the
// capture goroutine has consumed that marker, so every line the handler
// printed before returning has been logged with the invocation's logger.
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
// [Probe] runs a one-off command (the python adapter's interpreter probe)
// under the same rules: own group, Pdeathsig, and its group killed and
// reaped before it returns.
package proc
