// Package python is the built-in Python runtime of the FunctionRuntime
// server: it owns one long-lived python3 worker process per registration
// and runs a module.function handler in it.
//
// # Handler
//
// The handler string is module.function, at most 256 bytes. The module may
// be dotted (pkg.sub.handler); each part is an ASCII Python identifier. The module is
// imported once, when the registration starts, from the registered working
// directory (which is put first on sys.path); the function must be
// callable. Every module of the dotted name must be a file beneath the
// working directory once symlinks are resolved: each is located, before
// any of its code runs, and one that resolves elsewhere (a symlink out of
// the directory, a module of the interpreter such as subprocess, a
// built-in such as sys) fails the registration, e.g.
//
//	python handler "escape.f": import module 'escape': ImportError: module 'escape' is /srv/other/evil.py, outside the working directory /srv/fn
//
// Modules the handler imports in turn may come from anywhere on the
// interpreter's paths. A broken handler (syntax error, missing module,
// missing or non-callable function, exception at import) fails the
// registration the same way, with the exception type and message:
//
//	python handler "greeter.greet": import module 'greeter': SyntaxError: invalid syntax (greeter.py, line 3)
//
// and the traceback goes to the logs. Modules the worker itself has already
// imported (json, os, ...) cannot be shadowed by files in the working
// directory: a handler module of that name is refused as outside it.
//
// For each invocation the function is called with one argument: the JSON
// input, decoded strictly (an empty input is None; NaN and Infinity are
// not JSON). A function without a parameter is called without it; one
// that needs more than one argument fails its registration. Its return value
// is encoded with json.dumps (UTF-8, compact, NaN and Infinity rejected)
// and becomes the output, with content type application/json. A coroutine
// (async def handler) is run to completion with asyncio.run. Module-level
// state persists between invocations of one worker, but a worker may be
// restarted at any time, so it must not be relied on.
//
// # Failures
//
//   - An exception fails the invocation with a [functionruntime.HandlerError]
//     whose Type is the exception class (module-qualified unless builtin) and
//     Message is str(exception); the traceback goes to the logs. It is
//     retryable.
//   - Raising fnbridge.TerminalError (or any exception class named
//     TerminalError, or a subclass of one) fails it terminally: it must not
//     be retried.
//   - Failures a retry can only repeat are terminal. A return value that
//     json cannot encode (a set, NaN, nesting too deep) fails with Type
//     "UnserializableOutput" ("return value is not JSON-serializable:
//     TypeError: ..."); one larger than Options.MaxOutput with Type
//     "OutputTooLarge"; one larger than the server's output bound
//     (functionruntime.Limits.MaxOutputBytes) fails at the server
//     (OUTPUTS_INVALID: the handler already ran).
//   - Input that is not valid JSON, or nests too deeply to decode
//     (RecursionError), fails terminally (code 400) with Type "InvalidInput" without
//     calling the function; a content type other than application/json
//     (or */*+json, or empty) fails terminally (code 415) with Type
//     "UnsupportedContentType". The worker keeps running.
//
// # The fnbridge module
//
// The worker injects a module named fnbridge (it wins over any file of that
// name):
//
//	import fnbridge
//	raise fnbridge.TerminalError("order not found", code=404)   # no retry
//	fnbridge.set_output("order_id", "A-17")           # key and value are str
//	fnbridge.traceparent()      # the invocation's W3C traceparent, or None
//
// set_output belongs to the invocation whose context it is called in: the
// handler, its coroutines, asyncio.to_thread and anything run with
// contextvars.copy_context().run. Called elsewhere (a plain thread, or
// after the invocation ended) it raises RuntimeError, so a thread that
// outlives its invocation can never add outputs to a later one.
//
// # Durable steps
//
// For a handler with durability: steps the server passes the attempt's
// context endpoint (Invocation.Context, from the InvokeFunction metadata)
// and the function runs on every attempt; each call below is one request
// to the endpoint (see package bridge/stepctx), journaled and replayed in
// order. Code outside steps re-runs on every attempt.
//
//	fnbridge.run(name, fn, /, *args, **kwargs) a step: fn's JSON-encodable result is journaled
//	fnbridge.sleep(seconds)                   a durable timer (seconds or timedelta)
//	fnbridge.call(service, handler, input=None, *, key=None, idempotency_key=None, headers=None)
//	fnbridge.send(service, handler, input=None, *, key=None, delay=None, idempotency_key=None, headers=None)
//	fnbridge.call_async(...), fnbridge.sleep_async(seconds)   → fnbridge.Future (.result())
//	fnbridge.wait_any(*futures)               → the first completed Future
//	fnbridge.wait_all(*futures)               → their results, in order
//	fnbridge.invocation_id(), fnbridge.random(), fnbridge.uuid4()   the same on every attempt
//	fnbridge.state.get(name, default=None), .set(name, value), .clear(name), .clear_all(), .keys()
//	fnbridge.awakeable()                      → (awakeable_id, Future)
//	fnbridge.resolve_awakeable(id, value), fnbridge.reject_awakeable(id, message, code=500)
//	fnbridge.promise(name)                    → Promise: .get(), .get_async() (a Future), .peek() (None unresolved),
//	                                            .resolve(value), .reject(message, code=500)
//	fnbridge.cancel(invocation_id)
//	fnbridge.key()                            the object key or workflow id (both durability modes)
//
// A context call the handler may not make (a state write from a shared
// handler, state in a plain service, a promise outside a workflow), a
// second completion of a promise, and any wait the invocation's
// cancellation interrupts (code 409) raise fnbridge.TerminalError from
// that call alone: the function may go on. fnbridge.key() reads
// FNBRIDGE_KEY of the per-invocation environment; a plain service's
// invocations have none (RuntimeError).
//
// A recorded step returns its journaled result without calling fn. An fn
// that is an async def, or returns another awaitable, is awaited on an
// event loop of its own (in a thread when the handler's loop runs in this
// one: fnbridge.run blocks it); a task of the handler's loop cannot be
// waited for, and fails the step terminally. fn
// raising fnbridge.TerminalError(message, code=500) journals the step's
// failure, raised again on this and every later attempt; a return value
// json cannot encode is journaled the same way (code 500), since a retry
// could only repeat it. Any other exception from fn fails the attempt:
// it is reported to the endpoint as retryable and raised again; Restate
// retries the invocation and completed steps stay journaled. A terminal
// failure of a called handler raises TerminalError with its code and
// message. Inputs are JSON-encoded (bytes are sent as they are; None is
// no input); results are decoded JSON, None when empty, bytes when not
// JSON. A future may be awaited any number of times, in any order, long
// after it was created, but only in the attempt that created it.
//
// Once the endpoint answers 410 (the attempt suspended, or ended because
// a step failed or the journal cannot go on), that call and every later
// one raise fnbridge.Suspended, a BaseException, so "except Exception"
// does not stop it; the invocation then ends without a result as a
// retryable HandlerError of Type functionruntime.AttemptEndedType, even
// if the function caught Suspended and returned. When the bridge cancels
// the invocation meanwhile, the worker is killed as on any cancellation.
//
// Calls are made one at a time: a call from another thread while one is
// in flight (a step's function included), a call inside a step's
// function, and the endpoint's 409 (another process using the token)
// raise RuntimeError. Like set_output, the calls belong to the
// invocation's context (the function, its coroutines, threads run with
// contextvars.copy_context()); from a plain thread they raise
// RuntimeError. Without a step context (durability: function) every call
// raises RuntimeError "fnbridge.run needs durability: steps ...". The
// worker speaks the endpoint's framed protocol (bridge/stepctx) on a raw
// socket over AF_UNIX or TCP: one connection, opened by the first call
// and kept from one attempt to the next (each attempt's preface goes in
// the same send as its first request; a kept connection the bridge
// closed meanwhile is replaced once, before anything of the request was
// answered), one send and one recv_into a reused buffer per call; an
// endpoint that
// cannot be reached fails the call with "fnbridge: the context endpoint
// at ... is unreachable: ..." and ends the attempt retryably.
//
// FNBRIDGE_CONTEXT and FNBRIDGE_CONTEXT_TOKEN are in os.environ (and so
// in children started meanwhile) while such an invocation runs, for the
// fnbridge command or other clients; they are removed after it.
//
// # Per-invocation environment
//
// The per-invocation environment (functionruntime.Invocation.Env: names
// of functionruntime.InvocationEnvNames such as FNBRIDGE_KEY and
// TRACEPARENT) is set in os.environ while the invocation runs, so
// children started meanwhile inherit it, and restored afterwards: a name
// the registration's env set gets that value back, any other is removed.
//
// # Outputs
//
// Outputs are key/value strings returned next to the output. A handler sets
// them with fnbridge.set_output, or by writing key=value lines to the file
// named by the FNBRIDGE_OUTPUTS environment variable (the same convention
// as Bash). Every invocation gets a new, empty file, and FNBRIDGE_OUTPUTS
// (os.environ, and so the environment of children started from then on)
// names it only while that invocation runs; the file is removed once read,
// so a late write through a path or a descriptor of an earlier invocation
// is never read. Values set with set_output win over the file. Keys are ASCII letters, digits, '_',
// '.', '-', starting with a letter or '_'; values are UTF-8 without NUL; a
// bad key or line fails the invocation terminally with the server's
// reason OUTPUTS_INVALID (HandlerError, Type InvalidOutputsType: the
// function ran, and a retry would write the same). Outputs of a failed invocation are discarded.
//
// # Logs
//
// print(), logging and anything else written to stdout or stderr (file
// descriptors 1 and 2, including child processes) become log records, one
// per line, on the invocation's logger (run_uid, invocation_id) with
// source=handler, at the level a line starts with ("WARNING:root:..." as
// logging's default format writes it, "[error] ...") or, for a JSON line,
// names in "level" (the message then from "msg" or "message"); any other
// line is info (see package proc). Lines longer than Options.MaxLogLine
// are truncated and carry truncated_bytes. Output written outside an invocation (at import,
// by background threads between invocations) goes to the registration's
// logger. Printing never reaches the function output. The worker keeps a
// high close-on-exec copy of the log pipe and puts it back on descriptor 1
// or 2 when an invocation closed it (the lifeline's poll before each
// invocation reports that), so one function closing its stdout never
// costs later invocations their logs.
//
// Python drops a logger's info records by default (the root logger and the
// last-resort handler start at WARNING). When logging is first imported,
// the worker sets the root logger to INFO, unless something set its level
// or handlers already, and the last-resort handler to INFO with the format
// "LEVEL:name:message", so logging.getLogger(__name__).info(...) is logged
// at info; libraries' info records too. A function that configures logging
// (basicConfig, dictConfig, its own handlers) gets what it configures.
//
// # Environment and process
//
// The worker runs python3 -I -u (isolated: PYTHON* variables and the user
// site directory are ignored) with the registered working directory as its
// current directory, in its own process group. It writes no bytecode cache
// (sys.dont_write_bytecode): a .pyc is trusted while its source keeps the
// size and modification second it was compiled from, so a worker started
// right after an edit could otherwise run the old code. If the server
// dies, however it dies, that whole group dies with it: the worker gets the Linux
// parent-death signal, and a small guardian process the worker forks at
// start (a copy of it that keeps only the lifeline pipe, fd 5, open; see
// package proc) kills the group, the handler's subprocesses included, once
// the lifeline ends. Its environment is exactly
// PATH=/usr/local/bin:/usr/bin:/bin, LANG=C.UTF-8, HOME=<working
// directory>, then the registration's env (which may override those
// three), then FNBRIDGE_OUTPUTS; nothing is inherited from the server.
//
// # Interpreter
//
// Each registration resolves its interpreter when it starts
// (ResolveInterpreter): the one it names (WorkerSpec.Interpreter, the
// handler's python.interpreter: a path, relative to the working directory
// when not absolute, or a python command such as python3.12 looked up on
// the server's PATH), else the working directory's .venv/bin/python when
// it exists, else Options.Interpreter (default python3) looked up in the
// server's PATH when the adapter is created. The interpreter is then
// asked once, with -I, for its version, sys.executable and prefixes:
// older than MinVersion (3.9), or not answering like a Python, fails the
// registration naming the interpreter and how it was chosen, before any
// handler code runs; the registration logs "python interpreter" with the
// path, version, how it was chosen and its virtual environment. The
// answer is cached per interpreter file (path, and the link's and the
// file's size, mode and modification time), so a venv made again is asked
// again. Workers start sys.executable, so launcher shims such as pyenv's
// are resolved once (workers do not get the environment shims read). The
// probe inherits the server's environment but is otherwise owned like a
// worker: own process group, parent-death signal, group killed when it
// returns or the start is cancelled.
//
// An interpreter that belongs to a virtual environment (sys.prefix is not
// sys.base_prefix) gets it activated as its bin/activate would:
// VIRTUAL_ENV is the venv and its bin directory leads the worker's PATH
// (the registration's PATH, or the default), so its packages import and
// its scripts are found by subprocesses.
//
// When an invocation's context ends (timeout, cancellation) the worker's
// whole process group is sent SIGTERM, then SIGKILL after Options.Grace,
// and the next invocation starts a fresh worker, which imports the module
// again. The same happens after a worker dies; a worker that dies during
// an invocation fails it with [functionruntime.ErrWorkerCrashed], and a
// restart that fails (the module was broken meanwhile) with
// [functionruntime.ErrWorkerFailed]. Background processes a handler starts
// live in the worker's group and are killed with it, also when the server
// is SIGKILLed. A process that leaves the group (setsid, os.setpgid) is on
// its own.
//
// # Wire protocol
//
// Go and the worker talk on two extra pipes, never on stdout or stderr:
// fd 3 carries requests, fd 4 responses (the bootstrap moves both to high,
// close-on-exec descriptors). fd 5, the lifeline, carries nothing: the
// guardian keeps it, and the worker a high close-on-exec copy. Each message
// is a frame: one kind byte, a 4-byte big-endian payload length, the
// payload. After the handshake every payload starts with an 8-byte request
// id: Go draws a random one per request, and the worker starts each
// response frame with the id of the request it answers.
//
//	→ 'N' id, {"NAME":"value",...}               the per-invocation environment (optional), then:
//	→ 'C' id, {"address","token"[,"fresh":true]  the step context (durability: steps;
//	           [,"ordered":true]}                fresh: the attempt replays nothing; ordered: the
//	                                             endpoint takes numbered starts sent ahead), then:
//	→ 'I' id, input bytes (the invocation's raw JSON input)
//	← 'K' {"python":version,"file":path}        ready, after the import
//	← 'X' {"stage","type","message"}            import failed; the worker exits
//	← 'O' id, {"key":"value",...}                set_output pairs (optional)
//	← 'F' id, raw FNBRIDGE_OUTPUTS file content  (optional)
//	← 'D' id                                     (optional, before 'R') a thread of the
//	                                             steps attempt is still in a context call:
//	                                             Go ends the worker once it has the result
//	← 'R' id, output bytes                       success, ends the invocation
//	← 'E' id, {"type","message","terminal"}      failure, ends the invocation
//	                                             (+ "code": a TerminalError's int code;
//	                                             + "discard": true when a thread of a failed
//	                                             steps attempt is still in a context call:
//	                                             Go ends the worker before it answers)
//
// An 'N' frame is followed by a 'C' or 'I', a 'C' frame by the 'I', all
// of the same id; anything else, or an 'N' naming a variable off the
// allow-list, ends the worker. An invocation whose attempt ended answers 'E' with type
// fnbridge.Suspended and terminal false.
//
// Before 'K', 'X', 'R' or 'E' the worker flushes its stdout and stderr;
// once Go has read that frame it logs whatever the log pipe holds, so all
// the invocation's log lines are logged before Invoke returns (see
// package proc).
//
// A result is never attributed to an invocation it does not belong to.
// A response frame naming another id (a stale one, or one nobody sent), or
// bytes left on the pipe after an invocation ended, mean something other
// than the worker loop wrote to it: Go ends the worker (kills its group),
// the invocation fails retryably with [functionruntime.ErrWorkerCrashed],
// and the next one starts a fresh worker. Because ids are random, nothing
// can prepare a frame for a request it has not seen; a handler runs in the
// worker and can always forge its own invocation's answer, but never
// another's. A child the handler forks (os.fork, multiprocessing) closes
// the protocol pipes at once (os.register_at_fork), and one that returns
// from the handler exits instead of answering or reading a request.
//
// The worker polls its lifeline copy after reading a request and before
// starting it: a request the server wrote just before dying is never run
// (the guardian may not have struck yet); the worker kills its group
// instead.
package python
