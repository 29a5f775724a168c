package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// The step agent (`fnbridge agent DIR PID`, hidden) makes the context
// calls of `fnbridge run` for the fnbridge shell function of the Bash
// worker (functionruntime/bash/bootstrap.bash), so that a step in the
// invocation's own shell costs no process: one agent serves a worker for
// its whole life, started by its first step. It talks to the shell over
// two FIFOs in DIR, the worker's scratch directory:
//
//	a.req  requests, one line each, fields separated by tabs:
//	       S <nonce> <addr> <token> <name>          run/start
//	       C <nonce> <addr> <token> <status> <cmd>  run/complete: CMD exited
//	                                                with status, its stdout
//	                                                is in a.out
//	       P <nonce> <addr> <token> <name>          run/start sent ahead of
//	                                                CMD (an attempt with
//	                                                nothing to replay):
//	                                                never answered
//	       Q <nonce> <addr> <token> <P's nonce> <status> <cmd>
//	                                                C of the run that P
//	                                                started, or, when P did
//	                                                not start it, answered
//	                                                as P would have been
//	a.ans  one answer line per request but P: <nonce> <status> <kind> <message>
//	       kind x: execute CMD now
//	       kind r: the recorded value is in a.val (R: it holds a NUL byte)
//	       kind o: CMD's stdout was journaled; it is in a.val now (O: it
//	               holds a NUL byte); a.out is removed once read
//	       kind e: stop with <status>, <message> on stderr
//
// Statuses and messages are those of the command. The nonce, unique to
// the request within the worker, comes back with its answer: a shell
// skips an answer that is not its own, one the agent wrote after the
// shell that asked was killed. The agent holds one
// framed connection for the current token; a request with another token
// (the next attempt) replaces it. It exits when the worker (PID) is gone.
const (
	agentReq     = "a.req"
	agentAns     = "a.ans"
	agentOut     = "a.out"
	agentVal     = "a.val"
	agentMaxLine = 64 << 10 // a request line: a step name (at most stepctx.MaxRunNameBytes) and the endpoint
	agentMaxMsg  = 3000     // an answer stays one atomic FIFO write
)

func newCtxAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "agent DIR PID",
		Short:  "Serve the fnbridge shell function of a Bash worker (started by the worker)",
		Hidden: true,
		Args:   exactArgs(2, "fnbridge agent DIR PID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[1])
			if err != nil || pid <= 1 {
				return exitf(ctxExitUsage, "agent: PID %q is not a process id", args[1])
			}
			return runAgent(cmd.Context(), args[0], pid, cmd.OutOrStdout())
		},
	}
}

// runAgent makes the FIFOs, says "ready <pid>" on ready (then closes it
// when it is a file) and serves requests until the worker is gone.
func runAgent(ctx context.Context, dir string, worker int, ready io.Writer) error {
	// What stops it is said on ready too: the shell that started it
	// discards its stderr, and names the cause with its own error.
	failed := func(err error) error {
		fmt.Fprintf(ready, "error %v\n", err)
		return exitf(ctxExitError, "agent: %v", err)
	}
	var files [2]*os.File
	for i, name := range []string{agentReq, agentAns} {
		p := filepath.Join(dir, name)
		_ = os.Remove(p)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return failed(err)
		}
		// Its mode as asked, whatever the function's umask (0277 would
		// leave the owner unable to open it for writing).
		if err := os.Chmod(p, 0o600); err != nil {
			return failed(err)
		}
		// Read and write: neither open blocks, and the shell's opens never
		// do either; a.req never reads EOF between invocations.
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return failed(err)
		}
		defer f.Close()
		files[i] = f
	}
	go func() {
		// The worker's process group is killed with it; this covers a
		// worker that ended by itself.
		waitGone(worker)
		os.Exit(0)
	}()
	if _, err := fmt.Fprintf(ready, "ready %d\n", os.Getpid()); err != nil {
		return exitf(ctxExitError, "agent: %v", err)
	}
	if c, ok := ready.(io.Closer); ok {
		c.Close()
	}
	a := &agent{dir: dir}
	defer a.close()
	r := bufio.NewReaderSize(files[0], 4096)
	for {
		line, tooLong, err := readRequest(r)
		if err != nil {
			return exitf(ctxExitError, "agent: reading requests: %v", err)
		}
		fields := strings.Split(strings.TrimSuffix(string(line), "\n"), "\t")
		nonce := ""
		if len(fields) > 1 {
			nonce = fields[1]
			fields = append(fields[:1:1], fields[2:]...)
		}
		var status int
		var kind, msg string
		if tooLong {
			// Only a step name makes a line this long, and the context
			// endpoint refuses one past MaxRunNameBytes: say so as it does.
			status, kind, msg = ctxExitUsage, "e", fmt.Sprintf("run: the step name is longer than %d bytes, the most a step name may have", stepctx.MaxRunNameBytes)
		} else {
			status, kind, msg = a.serve(ctx, nonce, fields)
		}
		if len(fields) > 0 && fields[0] == "P" {
			// Never answered: a refusal is its Q's answer.
			a.refusedP = nil
			if kind != "" {
				a.refusedP = &refusal{nonce, status, kind, msg}
			}
			continue
		}
		msg = oneLine(msg)
		if len(msg) > agentMaxMsg {
			msg = msg[:agentMaxMsg] + "..."
		}
		if _, err := fmt.Fprintf(files[1], "%s\t%d\t%s\t%s\n", nonce, status, kind, msg); err != nil {
			return exitf(ctxExitError, "agent: answering: %v", err)
		}
	}
}

// readRequest reads one request line of any length. A line longer than
// agentMaxLine is read to its end and reported too long, with its first
// agentMaxLine bytes (the nonce to answer with is near the start). The
// bufio buffer is copied before the next read reuses it.
func readRequest(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	part, err := r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return part, false, err
	}
	line = append([]byte(nil), part...)
	for errors.Is(err, bufio.ErrBufferFull) {
		part, err = r.ReadSlice('\n')
		if room := agentMaxLine - len(line); room > 0 {
			line = append(line, part[:min(len(part), room)]...)
		} else {
			tooLong = true
		}
	}
	if len(line) >= agentMaxLine {
		tooLong = true
	}
	return line, tooLong, err
}

// agent is the step agent's connection and the run being executed.
type agent struct {
	dir     string
	key     string // addr and token of c
	c       *stepctx.Client
	handle  string // of the run whose CMD executes
	name    string // its name
	started bool
	// ahead is the nonce of the P that started the run, "" for an S: its
	// completion must be the Q that names it. A P refused while a run
	// executes is followed by its own Q, which must not complete the run
	// executing.
	ahead string
	// refusedP is the latest P's answer when it did not start its run:
	// the answer of the Q that names it.
	refusedP *refusal
}

// refusal is the answer a P would have had.
type refusal struct {
	nonce  string
	status int
	kind   string
	msg    string
}

func (a *agent) close() {
	if a.c != nil {
		a.c.Close()
	}
}

// client is the client of addr and token, replacing one of an earlier
// attempt.
func (a *agent) client(addr, token string) (*stepctx.Client, error) {
	if key := addr + "\x00" + token; key != a.key || a.c == nil {
		a.close()
		a.c, a.key, a.started = nil, "", false
		c, err := stepctx.NewClient(addr, token)
		if err != nil {
			return nil, err
		}
		a.c, a.key = c, key
	}
	return a.c, nil
}

// answerOf is the answer of a failed call, as the command would exit.
func answerOf(err error) (int, string, string) {
	var e *ctxExit
	if !errors.As(err, &e) {
		e = callFailed(err).(*ctxExit)
	}
	return e.code, "e", e.msg
}

// serve answers one request: its status, kind and message, or kind ""
// for no answer (a P that started its run).
func (a *agent) serve(ctx context.Context, nonce string, f []string) (int, string, string) {
	if len(f) < 4 || len(f) > 6 {
		return ctxExitUsage, "e", fmt.Sprintf("agent: malformed request (%d fields)", len(f))
	}
	c, err := a.client(f[1], f[2])
	if err != nil {
		return answerOf(exitf(ctxExitError, "%v", err))
	}
	switch {
	case (f[0] == "S" || f[0] == "P") && len(f) == 4:
		// A refused start (a trap handler's step while one executes)
		// leaves the executing step's handle: its completion follows.
		rec, h, err := c.RunStart(ctx, f[3])
		if err != nil {
			return answerOf(err)
		}
		a.started, a.ahead = false, ""
		if rec != nil {
			if f[0] == "P" {
				// Only a replay has recorded steps, and the shell sent this
				// start ahead for an attempt with nothing to replay: its
				// CMD (a builtin) ran.
				return ctxExitError, "e", fmt.Sprintf("run %s: the step is recorded, but the shell ran its CMD, taking the attempt for one with nothing to replay", f[3])
			}
			if rec.Failure != nil {
				return ctxExitTerminal, "e", fmt.Sprintf("run %s: %s", f[3], rec.Failure.Message)
			}
			if err := os.WriteFile(filepath.Join(a.dir, agentVal), rec.Value, 0o600); err != nil {
				return answerOf(exitf(ctxExitError, "agent: %v", err))
			}
			return 0, nulKind("r", rec.Value), ""
		}
		a.handle, a.name, a.started = h, f[3], true
		if f[0] == "P" {
			a.ahead = nonce
			return 0, "", ""
		}
		return 0, "x", ""
	case f[0] == "C" && len(f) == 5:
		if !a.started || a.ahead != "" {
			return ctxExitUsage, "e", "agent: no step is executing"
		}
		return a.complete(ctx, c, f[3], f[4])
	case f[0] == "Q" && len(f) == 6:
		if a.started && a.ahead == f[3] {
			return a.complete(ctx, c, f[4], f[5])
		}
		if r := a.refusedP; r != nil && r.nonce == f[3] {
			a.refusedP = nil
			_ = os.Remove(filepath.Join(a.dir, agentOut)) // CMD's, journaled nowhere
			return r.status, r.kind, r.msg
		}
		return ctxExitUsage, "e", "agent: the step's start did not start it"
	}
	return ctxExitUsage, "e", fmt.Sprintf("agent: unknown request %q", f[0])
}

// complete reports the end of the executing run's CMD, which exited with
// status (as text); cmd names it in a failure.
func (a *agent) complete(ctx context.Context, c *stepctx.Client, st, cmd string) (int, string, string) {
	a.started, a.ahead = false, ""
	// What cannot be known is reported as a failed CMD (a retryable
	// failure, as the command does), so the run never stays open.
	status, err := strconv.Atoi(st)
	why := fmt.Sprintf("%s exited with status %d", cmd, status)
	if err != nil || status < 0 || status > 255 {
		status, why = 126, fmt.Sprintf("agent: %s's status %q from the shell is no exit status", cmd, st)
	}
	out, err := os.ReadFile(filepath.Join(a.dir, agentOut))
	if errors.Is(err, fs.ErrPermission) {
		// The shell made it under the function's umask, which may leave
		// the owner no read permission: it is ours to read all the same.
		if os.Chmod(filepath.Join(a.dir, agentOut), 0o600) == nil {
			out, err = os.ReadFile(filepath.Join(a.dir, agentOut))
		}
	}
	if err != nil && status == 0 {
		status, why = 126, fmt.Sprintf("reading %s's stdout: %v", cmd, err)
	}
	// Unlinked at once: a background child of CMD that still holds it
	// writes on into a file no one reads, never into the next step's
	// stdout (the shell's >| would truncate and reuse the same file).
	_ = os.Remove(filepath.Join(a.dir, agentOut))
	outcome, exit := stepOutcome(a.name, status, why, out)
	if err := c.RunComplete(ctx, a.handle, outcome); err != nil {
		if outcome.Retryable == nil {
			return answerOf(err)
		}
		exit.msg += fmt.Sprintf(" (reporting it failed: %v)", err)
	}
	if exit != nil {
		return exit.code, "e", exit.msg
	}
	// The shell prints what was journaled, not what the file holds by
	// the time it reads it.
	if err := os.WriteFile(filepath.Join(a.dir, agentVal), out, 0o600); err != nil {
		return answerOf(exitf(ctxExitError, "agent: %v", err))
	}
	return 0, nulKind("o", out), ""
}

// nulKind is kind, upper-cased when v holds a NUL byte (which a shell
// variable cannot).
func nulKind(kind string, v []byte) string {
	if strings.IndexByte(string(v), 0) >= 0 {
		return strings.ToUpper(kind)
	}
	return kind
}

// waitGone returns once process pid has ended. A pidfd (Linux 5.3 and
// later) names the process itself, so a pid the kernel hands to another
// process cannot keep the agent alive; without one, kill(pid, 0) is
// polled.
func waitGone(pid int) {
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, -1)
			if err == nil && n > 0 {
				return // readable: the process ended
			}
			if err != nil && err != unix.EINTR {
				break
			}
		}
	}
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(500 * time.Millisecond)
	}
}
