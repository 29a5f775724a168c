// Package bash is the built-in Bash runtime of the FunctionRuntime server,
// following the AWS Lambda custom-runtime handler model: it owns one
// long-lived bash worker per registration, which sources file.sh once and
// then calls one of its functions per invocation.
//
// # Handler
//
// The handler string is file.function, each part 1-128 bytes and at most 256 in all. file is a
// stem of ASCII letters, digits, '_' and '-' (not starting with '-');
// file.sh is resolved relative to the registered working directory and
// must stay inside it after symlinks are resolved. function is a bash name ([A-Za-z_][A-Za-z0-9_]*)
// that is not a special builtin, one of the builtins eval, source, exec,
// builtin, command, declare, typeset, local, let, alias or enable, nor a
// reserved word (if, then, ..., coproc, in): in POSIX mode bash runs a
// special builtin before a function of that name, so a function named
// eval would run the payload as shell code. Nor is it fnbridge, which the
// worker defines in every invocation's shell after the file, or a __fnb_
// name, one of the worker's own helpers.
// No '/', '..', whitespace or shell metacharacter is ever accepted.
//
// At registration the worker sources file.sh once; it must source with
// status 0 (end it with `true` if its last command may fail), and the
// function must then exist (`declare -F`). Otherwise the registration fails
// with an error naming the file or function and, for a failed source, bash's
// own last error lines, e.g.
//
//	bash handler "greet.hello": sourcing greet.sh failed with status 2; last log lines: greet.sh: line 4: syntax error near unexpected token `}'
//
// Shell options the file sets (set -euo pipefail, set -x, ...) apply to
// the function's invocations, not to the worker's own loop. POSIX mode
// (set -o posix, POSIXLY_CORRECT) applies to the sourcing only: it is off
// in every invocation, for the reason above.
//
// # Invocation
//
// Each invocation runs `function "$payload"` in a subshell of the worker:
// the payload is one positional argument, $1, byte for byte. It is read
// from a pipe, never put on a command line, and never evaluated: `$(...)`,
// backticks, ';', quotes, globs and newlines in it are plain data. Calling
// the function execs nothing, so $1 has no size limit; but the kernel
// bounds each argument of an *external* command to 128 KiB
// (MAX_ARG_STRLEN), so `jq --arg x "$1"` fails with "Argument list too
// long" on a bigger payload. The same bytes are in the file named by
// FNBRIDGE_INPUT_FILE ([InputFileEnv]), which the function and its
// children can read (`jq . "$FNBRIDGE_INPUT_FILE"`); Go writes it before
// the request and removes it when the invocation ends. Payloads may be any
// bytes except NUL, which bash arguments cannot hold: a payload containing
// NUL fails terminally (code 400) with Type "InvalidInput". Any content type is
// accepted and passed through.
//
// Because of the subshell, `exit N` ends only that invocation, and
// variables, directory changes or traps set by one invocation do not leak
// into the next; a cd at the file's top level is undone after the file is
// sourced, so every invocation starts in the registered working directory.
// (Unless the registration runs its invocations inline: see below.)
// A file under set -e that a failing command ends fails the registration
// naming the file, the line and the status. Children the function leaves running in the background do
// not delay the invocation; they live in the worker's process group and
// are killed with it (also when the server is SIGKILLed, see below). A
// process that leaves the group (setsid) is on its own.
//
// # Inline invocations
//
// A registration whose WorkerSpec.Inline is set (RegisterFunction metadata
// functionruntime.SubshellMetadata "false"; the bridge's bash.subshell:
// false) runs its invocations one after another in the worker's own shell,
// without the subshell: no process per invocation, which is most of what
// an invocation costs where process creation is dear. What one invocation
// leaves in the shell the next one sees: global variables, functions,
// exports, shopt settings, aliases, the umask, ulimits, readonly
// variables, signal traps, and descriptors it opened with exec (a lock it
// took with flock stays held while the worker waits). After each invocation the worker
// puts back what it needs and what belongs to one invocation alone: the
// set options it gives back to each invocation (errexit, nounset,
// pipefail, xtrace, verbose, noclobber, errtrace, functrace, allexport),
// posix, keyword, onecmd and job control (monitor, unless the file set
// it), the fnbridge function, the ERR, DEBUG
// and RETURN traps, LC_ALL and LC_CTYPE, the working directory, stdin
// (/dev/null) and stderr (an `exec 2>...` of the function's), TMOUT, the
// step context, FNBRIDGE_KEY, and TRACEPARENT and TRACESTATE as the file
// left them; the jobs the function left running are disowned, so a later
// invocation's `wait` does not wait for them (they run on in the worker's
// group). A function that makes one of the variables the worker assigns
// readonly (LC_ALL, LC_CTYPE, TMOUT, TRACEPARENT, TRACESTATE, an
// FNBRIDGE_ one) ends the worker after its invocation. Between
// invocations the worker's stdout is its stderr, so a signal trap the
// function left that prints while the worker waits is logged.
//
// Whatever would have ended an invocation's subshell ends the worker
// instead, with the outcome the subshell would have given: `exit N`,
// errexit (set -e, also when the function returns non-zero under it),
// exec (the program's exit status, however long it runs), `fnbridge
// fail`, an EXIT trap the function set (it runs after the function with
// the options the function left, its output appended to the
// invocation's), and a signal (a crash, [functionruntime.ErrWorkerCrashed],
// as for any worker that dies). Go takes the worker's exit status as the
// invocation's once the function's stdout file exists (the call began;
// an exit before it is a crash), and the next invocation waits for a
// fresh worker, which sources the file again; the processes the function
// left running are killed with the old worker's group. So inline
// invocations are for functions that return. An EXIT trap the file set is
// the worker's, off while a function runs: as in a subshell, an invocation
// that ends the worker does not run it.
//
// The loop's protocol descriptors are closed for the function's call by
// bash's own redirections, which are undone when it returns: a program
// the function runs inherits none of them, but a child that bash forks
// holds them until it execs, and a subshell it starts in the background
// (`( ... ) &`) holds them while it runs. It cannot take a later
// invocation's answer (it never had its token), but it keeps the response
// pipe open, so the end of a worker that exits is noticed up to 500 ms
// later.
//
// # Output
//
// The function's stdout is the output, captured exactly except that one
// trailing newline, if present, is removed (so `echo '{"ok":true}'` returns
// the clean JSON value {"ok":true}; print two newlines to keep one). The
// output content type is application/json when the output is valid JSON,
// text/plain; charset=utf-8 when it is other valid UTF-8 (or empty), and
// application/octet-stream otherwise. Output over the server's bound
// (functionruntime.Limits.MaxOutputBytes) fails the invocation terminally
// (OUTPUTS_INVALID: the handler already ran); so does output over
// Options.MaxOutput, the adapter's own bound (Type "OutputTooLarge", naming
// stdout and the bound), which the bridge sets to the server's. An
// FNBRIDGE_OUTPUTS file over 1 MiB fails the same way.
//
// # Failures
//
//   - Status 0 is success.
//   - Status 100 ([TerminalExitStatus]) is a terminal failure: a
//     [functionruntime.HandlerError] with Terminal set, which must not be
//     retried.
//   - Status 75 ([AttemptEndedStatus]) of an invocation given a step
//     context, after a fnbridge call said the attempt ended, is a
//     retryable HandlerError of Type functionruntime.AttemptEndedType
//     (see Durable steps).
//   - Any other status is a retryable HandlerError.
//
// Failure errors have Type "exit", ExitCode set to the status and Message
// "exit status N: <last non-empty stderr line>" (the line is bounded to
// 1 KiB), for example
//
//	echo "order $1 not found" >&2; exit 100
//
// `fnbridge fail [--code N] MESSAGE` (a shell function of the invocation's
// own shell) writes "N MESSAGE" to the invocation's file f.<key> and exits
// 100; on status 100 Go takes that record, if any, as the failure: Type
// "fnbridge.fail", Code N, Message MESSAGE.
//
// # Outputs
//
// The environment variable FNBRIDGE_OUTPUTS names a file of the invocation's
// own, which does not exist at its start (append to it; a job an earlier
// invocation left behind writes to that invocation's file, never read
// again); key=value lines written to it become the
// invocation's outputs. The value is everything after the first '=' up to
// the end of the line (a trailing \r is dropped); blank lines are ignored;
// a later key replaces an earlier one. Keys are ASCII letters, digits, '_',
// '.', '-', starting with a letter or '_'; values are UTF-8. A malformed
// line fails the invocation terminally with the server's reason
// OUTPUTS_INVALID (Type InvalidOutputsType: the function ran, and a retry
// would write the same). Outputs of
// a failed invocation are discarded.
//
//	echo "order_id=$id" >>"$FNBRIDGE_OUTPUTS"
//
// # Logs
//
// Everything the function (or the file, while being sourced) writes to
// stderr becomes log records, one per line, on the invocation's logger
// (run_uid, invocation_id) with source=handler; lines longer than
// Options.MaxLogLine are truncated and carry truncated_bytes. stdout written
// while the file is sourced is logged too. A line keeps the level it
// starts with ("ERROR: ...", "[warn] ...") or, as a JSON line, names in
// "level"; any other line is info (see package proc).
//
// # Durable steps
//
// An invocation given a step context (functionruntime.Invocation.Context,
// from the InvokeFunction metadata of a handler with durability: steps)
// runs with FNBRIDGE_CONTEXT and FNBRIDGE_CONTEXT_TOKEN ([ContextEnv],
// [ContextTokenEnv]) exported in its subshell, so the function and every
// process it starts reach the attempt's context endpoint; no other
// invocation sees them (a plain function never has them, and a file that
// makes them readonly fails to register). The per-invocation environment
// (functionruntime.Invocation.Env, such as FNBRIDGE_KEY and TRACEPARENT)
// is exported the same way, in either durability mode; each entry is one
// word to export, never evaluated. The fnbridge command takes the
// steps:
//
//	vm=$(fnbridge run create-vm -- ./create-vm.sh "$1") || exit
//	fnbridge sleep 5m || exit
//	fnbridge call Billing/charge "$order" || exit
//
// fnbridge run journals CMD's stdout as the step's value and prints it; on
// replay it prints the recorded value and CMD does not run. Code outside
// steps runs again on every attempt. fnbridge's exit statuses: 0; 100 a
// terminal failure (journaled, the same on replay: `|| exit` makes the
// invocation fail terminally); 75 ([AttemptEndedStatus]) the attempt
// suspended or ended, stop now; 3 a call that could not be made, 2 bad arguments; a
// retryably failing CMD's own status. Arguments and payloads are data:
// CMD is executed directly, never through a shell.
//
// In the invocation's own shell fnbridge is a shell function: fnbridge
// run goes through the worker's step agent (`fnbridge agent`, one per
// worker, started by its first step) without a process per step, runs a
// builtin CMD in the shell, and with --var VAR assigns the value to VAR
// instead of printing it; its requests carry a nonce that the agent's
// answers echo, so an answer left for a shell that was killed while it
// waited is never taken by the next invocation's. In an attempt with
// nothing to replay (the request's context says "fresh") the start of a
// step whose CMD is a builtin goes ahead of it and one answer ends the
// step. Other shells, children, and a trap handler's step while the
// shell's own is open use the command.
//
// Keyed services and awakeables (see the command's help): fnbridge key
// (also $FNBRIDGE_KEY, in either durability mode), fnbridge state
// get|set|clear|clear-all|keys, fnbridge awakeable (its id is a handle
// for fnbridge await), resolve-awakeable, reject-awakeable, fnbridge
// promise get|peek|resolve|reject and fnbridge cancel. A call the handler
// may not make (a state write from a shared handler) and a wait the
// invocation's cancellation interrupted exit 100 with the reason on
// stderr; state get and promise peek exit 1, printing nothing, when there
// is no value (a call that could not be made exits 3).
//
// When the attempt suspends (or a step fails retryably, or the journal
// cannot go on), the bridge cancels the invocation, which kills the
// worker's process group (see below): whatever the function does after
// its fnbridge call returned 75 does not count, even if it ignores the
// status. In addition, an invocation given a step context that exits with
// status 75 after a fnbridge call said so (its "... must stop now" on
// stderr) fails retryably with Type functionruntime.AttemptEndedType, so
// `set -e` or `|| exit` ends it as the attempt it is even before the
// cancellation arrives. Without a step context, 75 is an ordinary status.
//
// The fnbridge command is the bridge binary under that name
// (Options.ContextCommand; by default the running executable when it is
// the bridge): each worker gets a directory of its own, in its scratch
// directory, holding a symlink named fnbridge, placed first on PATH, so a
// fnbridge of the registration's PATH is shadowed and nothing can stand in
// for the runtime's. Without a context, fnbridge fails with status 3 (its
// status for a failed call; 1 is an absent key or an unresolved promise)
// and says so.
//
// # Environment and process
//
// The worker is `bash --noprofile --norc`, with the registered working
// directory as its current directory, in its own process group. If the
// server dies, however it dies, that whole group dies with it, not just the
// worker: the worker gets the Linux parent-death signal, but the
// invocation's subshell, its children and the pre-forked idle subshell do
// not, so the worker's first act is to fork a guardian subshell that keeps
// only the lifeline pipe (fd 5, see package proc) open and, once it ends,
// kills the group with SIGKILL. An idle subshell that finds the request
// pipe closed kills the group too, and one that did read a request checks
// the lifeline before it runs the function, so a request the server wrote
// just before dying is not started after its death. Its environment is
// exactly PATH=/usr/local/bin:/usr/bin:/bin, LANG=C.UTF-8, HOME=<working
// directory>, then the registration's env (which may override those three), then
// FNBRIDGE_OUTPUTS and FNBRIDGE_INPUT_FILE, and the fnbridge command's
// directory put first on PATH (see Durable steps); nothing is inherited from the server. Bash 4.4 or
// newer is supported (MinBashVersion: an older one fails the registration
// naming its version, before the file is sourced). Options.Interpreter (default bash) is looked up in the
// server's PATH when the adapter is created.
//
// When an invocation's context ends the worker's whole process group gets
// SIGTERM, then SIGKILL after Options.Grace; the next invocation starts a
// fresh worker, which sources the file again (re-checking that it stays
// inside the working directory). The same happens after a worker dies; a
// worker that dies during an invocation fails it with
// [functionruntime.ErrWorkerCrashed], a restart that fails with
// [functionruntime.ErrWorkerFailed].
//
// # Wire protocol
//
// Go and the worker talk on two extra pipes, never on the handler's stdout
// or stderr: fd 3 carries requests, fd 4 responses (the bootstrap moves both
// to descriptors of its own and closes them in the invocation subshell).
// fd 5, the lifeline, carries nothing: only the guardian keeps it.
// Messages are lines, because bash cannot read binary lengths:
//
//	← "K <bash version>\n"          sourced, function found: ready
//	← "E bash <version>\n"          (the -c stub) a bash older than MinBashVersion; the worker exits unsourced
//	← "E source <status>\n"         sourcing failed; the worker exits
//	← "E shadow builtin command\n"  the file defines functions named builtin or command (either or both named),
//	                                which the bootstrap reaches bash's own commands through; the worker exits
//	← "E nofunc\n"                  function not defined; the worker exits
//	← "E readonly\n"                the file made a step context or per-invocation variable readonly; the worker exits
//	← "E readonly LC_ALL\n"         the file made the locale variable the worker switches (LC_ALL when the file set it,
//	  "E readonly LC_CTYPE\n"       LC_CTYPE otherwise) readonly (requests are read in the C locale); the worker exits
//	← "E readonly TMOUT\n"          the file made TMOUT readonly (it would end the worker's waits for requests); the worker exits
//	→ <key>                         after K, and after each request: the next invocation's key
//	→ <token><n> then n payload bytes   one invocation (n as 12 digits)
//	→ <token>c<n><m><context> then n payload bytes
//	                                one invocation with a step context: n as
//	                                11 digits, m as 4, context "<address> <token>" of m bytes,
//	                                "<address> <token> fresh" when the attempt replays nothing
//	→ <token>e<n><env> then n payload bytes
//	                                one invocation with a per-invocation environment:
//	                                env is the count of entries (1 digit), then each
//	                                entry's length (5 digits) and NAME=VALUE
//	→ <token>b<n><m><context><env> then n payload bytes   both
//	← "R <seq> <token> <status>\n"   invocation done (from its subshell)
//	← "D <seq> <token> <status>\n"   invocation's subshell reaped (from the loop); inline, the
//	                                invocation done (the worker's exit status instead when it ended)
//
// A key is 32 random hex digits from Go: a 16-digit token, then the name
// of the invocation's files (s.<name> its stdout, o.<name> its
// FNBRIDGE_OUTPUTS, i.<name> its payload, in the worker's scratch
// directory). seq counts requests from 1. The loop reads each key after
// the last invocation's subshell is gone, so a process an invocation
// leaves behind never had a later invocation's token or file names in its
// memory, and the paths it knows are files Go already removed. The
// request must carry the token the loop holds, or the worker kills its
// group (bytes someone else wrote to the request pipe are never run);
// every status line must carry the invocation's seq and token, and the
// closing "D" of an invocation answered by "R" must come before anything
// else. Any other line (a forged one, written through /proc/<pid>/fd, or
// one over 4 KiB) is a protocol error: Go kills the worker's group, the
// invocation fails retryably ([functionruntime.ErrWorkerCrashed]) and the
// next one gets a fresh worker. The token proves nothing against a process
// that reads the worker's pipes or memory through /proc (same user): it
// could take a request and answer it; run handlers that must not see each
// other's invocations under different users.
//
// Each invocation's subshell is forked as soon as the previous invocation
// ended and waits for its request itself, so the fork is off the
// invocation's path. While it waits it also touches the memory it will
// write, so most copy-on-write faults are paid before the request comes.
// It reads the request, closes the protocol pipes and runs the function.
// When the function returns, the subshell reports the status ("R") through
// the loop's descriptors before it exits, so the answer does not wait for
// the process teardown; the loop then reaps it and writes "D". "D" without
// "R" before it is the status: the function called exit, tripped errexit,
// exec'd, was killed, or set an EXIT trap (whose output and log lines must
// come first). A "D" after an "R" is skipped. The worker sets no trap in
// the subshell, so signals keep their default effect. The function's stdout goes to its
// invocation's file in the worker's scratch directory, which Go reads and
// removes after the status (so a background child that keeps stdout open
// cannot hold the invocation up, nor write into a later one's output).
// Whatever the invocation wrote to stderr is on the log pipe before its
// status; Go logs what the pipe holds once it has read the status, so all
// the invocation's log lines are logged before Invoke returns (see
// package proc).
package bash
