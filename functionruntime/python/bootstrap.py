# fnbridge python worker bootstrap. It is embedded in the fnbridge binary,
# written to the worker's scratch directory and run as -c code (the stub in
# adapter.go reads it):
#
#   python3 -I -u -c <stub> SCRATCH/worker.py MODULE FUNCTION WORKDIR MAX_OUTPUT
#
# The wire protocol is described in the Go package documentation
# (functionruntime/python). Everything lives inside _fnbridge_worker so the
# __main__ namespace stays clean for handlers that inspect it.


def _fnbridge_worker():
    import _thread
    import contextvars
    import fcntl
    import json
    import os
    import select
    import signal
    import sys
    from struct import pack, unpack_from
    import traceback
    import types

    module_name, function_name, workdir, max_output = sys.argv[1:5]
    max_output = int(max_output)

    # What the worker's own mechanics use of the process's shared modules,
    # taken before the function's module is imported: a function that
    # patches json.dumps or json.loads, rebinds os.environ (a "snapshot"
    # dict, whose changes no child sees) or removes fnbridge from
    # sys.modules changes its own calls, never the worker's answers,
    # outputs or per-invocation environment. os.environ and
    # sys.modules["fnbridge"] are put back before every invocation.
    dumps = json.JSONEncoder().encode  # json.dumps(obj)
    loads = json.JSONDecoder().decode  # json.loads(text)
    environ = os.environ
    modules = sys.modules

    outputs_base = environ.get("FNBRIDGE_OUTPUTS", "")
    max_outputs_file = 1 << 20
    max_message = 8192

    # Close whatever descriptors the server may have leaked to us, then move
    # the protocol pipes and a copy of the lifeline off fds 3 to 5 and make
    # them close-on-exec, so neither the handler's own files nor its
    # children ever hold them. They (and the copy of the log pipe made
    # below) go to 64 and up, out of the way of the low descriptors a
    # handler opens or dup2s onto, or, under an open_files limit too low
    # for that, to the top four below it (F_DUPFD refuses a start at or
    # past the soft limit).
    open_max = os.sysconf("SC_OPEN_MAX")
    os.closerange(6, open_max)
    try:  # closerange stops at a low soft limit; a leak may lie above it
        leaked = [int(n) for n in os.listdir("/proc/self/fd") if int(n) >= open_max]
    except OSError:
        leaked = []
    for fd in leaked:
        os.close(fd)
    high = max(6, min(64, open_max - 4))
    req_fd = fcntl.fcntl(3, fcntl.F_DUPFD_CLOEXEC, high)
    resp_fd = fcntl.fcntl(4, fcntl.F_DUPFD_CLOEXEC, high)
    life_fd = fcntl.fcntl(5, fcntl.F_DUPFD_CLOEXEC, high)
    os.close(3)
    os.close(4)

    # The guardian (see Go package proc): fd 5 is the lifeline, whose only
    # write end the server holds, so reading it ends exactly when the server
    # is gone; the guardian then kills this whole process group, the
    # handler's subprocesses included. It is a process of its own, so a
    # handler holding the GIL cannot delay it; it keeps nothing else open
    # and dies of the group SIGTERM like the rest. /bin/sh costs a few
    # hundred KiB where a forked copy of this interpreter would keep its
    # whole heap alive; the copy is only the fallback. The lifeline is its
    # stdin: a redirection would have dash save a descriptor at 10 or
    # above, which a low open_files refuses, and the guardian would kill
    # the group at once.
    try:
        os.posix_spawn(
            "/bin/sh",
            ["fnbridge-python-guardian", "-c", "read x; kill -9 0"],
            {},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, 5, 0),
                (os.POSIX_SPAWN_CLOSE, 5),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_RDWR, 0),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
        )
    except (AttributeError, OSError):
        if os.fork() == 0:
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.close(req_fd)
                os.close(resp_fd)
                os.close(life_fd)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.close(null)
                while os.read(5, 512):
                    pass
                os.killpg(0, signal.SIGKILL)
            except BaseException:
                try:  # lands in the log unless stderr is redirected already
                    traceback.print_exc()
                except BaseException:
                    pass
            finally:
                os._exit(1)
    os.close(5)
    requests = open(req_fd, "rb", buffering=65536)
    lifeline = select.poll()
    lifeline.register(life_fd, select.POLLIN)
    # fds 1 and 2 are the log pipe. Code that closes them (a daemon-style
    # detach) would make every later print of the worker's invocations
    # fail with EBADF, on every retry too. The worker keeps a copy and puts
    # the pipe back on a closed one before the next invocation: restoring
    # needs neither a new worker nor anything from Go, and the check is
    # free, as the lifeline's poll before each invocation reports a closed
    # registered descriptor (POLLNVAL; events 0 asks for nothing else). A
    # descriptor the function pointed elsewhere (dup2) is its own choice,
    # as sys.stdout is. Best effort: the lowest open_files leaves no room
    # for the copy.
    try:
        log_fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, high)
        lifeline.register(1, 0)
        lifeline.register(2, 0)
    except OSError:
        log_fd = -1

    # A child a handler forks (os.fork, multiprocessing) shares this loop's
    # code but must never speak for it: it loses the protocol pipes at once,
    # and one that returns from the handler exits instead of reading the
    # next request or answering this one (see the end of the loop).
    worker_pid = os.getpid()

    def lose_pipes():
        for fd in (req_fd, resp_fd, life_fd, log_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    os.register_at_fork(after_in_child=lose_pipes)

    # print() goes to the logs, never to the protocol.
    sys.stdout = sys.stderr

    # The id of the request being answered; every response frame starts
    # with it, so Go never takes a frame for another request's answer.
    request_id = b""

    def send(kind, payload=b""):
        data = memoryview(bytes((kind,)) + pack(">I", len(request_id) + len(payload)) + request_id + payload)
        while data:
            data = data[os.write(resp_fd, data):]

    def send_json(kind, obj):
        send(kind, dumps(obj).encode("ascii"))

    def flush_stdio():
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass

    def log_barrier():
        # Everything printed so far goes to the log pipe before the answer
        # that follows: Go logs what the pipe holds once it has the answer.
        flush_stdio()

    def type_name(exc):
        cls = type(exc)
        mod = getattr(cls, "__module__", "") or ""
        name = getattr(cls, "__qualname__", cls.__name__)
        # Both are writable: whatever a class set there, the failure is
        # still reported (cls.__name__ is always a str).
        if not isinstance(name, str):
            name = cls.__name__
        if not isinstance(mod, str) or mod in ("builtins", "__main__"):
            return name
        return mod + "." + name

    def message_of(exc):
        try:
            text = str(exc)
        except Exception:
            text = "<unprintable %s>" % type(exc).__name__
        if len(text) > max_message:
            text = text[:max_message] + "..."
        return text

    def is_terminal(exc):
        return any(c.__name__ == "TerminalError" for c in type(exc).__mro__)

    def terminal_code(exc):
        # The code of a terminal failure, as the runtime and Restate take
        # it: an int from 1 to 65535 (an IntEnum such as HTTPStatus too);
        # anything else is no code, and the failure gets 500. The Restate
        # Python SDK's TerminalError keeps it as status_code.
        for attr in ("code", "status_code"):
            code = getattr(exc, attr, None)
            if not isinstance(code, bool) and isinstance(code, int) and 1 <= code <= 65535:
                return int(code)
        return None

    def print_traceback():
        # One log record at warn, not a line per frame at info: a filter on
        # the level keeps it whole, beside the failure it explains. The
        # first frame, the worker's call of the handler, is left out.
        try:
            exc_type, exc, tb = sys.exc_info()
            if tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
                tb = tb.tb_next
            text = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip("\n")
            if len(text) > 12000:  # well inside a log line's bound, as JSON
                text = text[:2000] + "\n  [... %d characters ...]\n" % (len(text) - 11000) + text[-9000:]
            # To the log pipe itself: an earlier invocation may have
            # replaced sys.stderr (an io.StringIO), which would swallow it.
            stream = sys.__stderr__ or sys.stderr
            stream.write(dumps({"level": "warn", "message": text}) + "\n")
            stream.flush()
        except Exception:
            pass

    # The fnbridge module handlers import. It is injected before the handler
    # module is imported, so it wins over any file of the same name.
    # set_output belongs to the invocation whose context it runs in (the
    # handler, its coroutines, asyncio.to_thread, contextvars.copy_context):
    # a thread that outlives its invocation cannot add to a later one.
    child_stub = (
        '"""fnbridge in a process the function started (a multiprocessing child):\n'
        'the names import, context calls raise: they work only in the worker."""\n'
        "\n"
        "\n"
        "class TerminalError(Exception):\n"
        "    def __init__(self, message=\"\", code=500, *, status_code=None):\n"
        "        Exception.__init__(self, message)\n"
        "        self.message = message\n"
        "        self.code = code if status_code is None else status_code\n"
        "\n"
        "    @property\n"
        "    def status_code(self):\n"
        "        return self.code\n"
        "\n"
        "\n"
        "class Suspended(BaseException):\n"
        "    pass\n"
        "\n"
        "\n"
        "class _Outside(object):\n"
        "    def __init__(self, name):\n"
        "        self._name = name\n"
        "\n"
        "    def __getattr__(self, name):\n"
        "        return _Outside(self._name + \".\" + name)\n"
        "\n"
        "    def __call__(self, *args, **kwargs):\n"
        "        raise RuntimeError(\"fnbridge.%s: context calls work only in the function's worker \"\n"
        "                           \"process, not in a process it started (a multiprocessing child)\" % self._name)\n"
        "\n"
        "\n"
        "def __getattr__(name):\n"
        "    if name.startswith(\"__\"):\n"
        "        raise AttributeError(name)\n"
        "    return _Outside(name)\n"
    )
    state = {"outputs": {}, "invocation": 0, "env": {}}
    # The names a per-invocation environment ('N' frame) may set; Go checks
    # them too (functionruntime.InvocationEnvNames).
    invocation_env_names = ("FNBRIDGE_KEY", "TRACEPARENT", "TRACESTATE")
    invocation = contextvars.ContextVar("fnbridge_invocation", default=0)
    api = types.ModuleType("fnbridge")
    api.__doc__ = ("fnbridge handler API: TerminalError, set_output, key, and the durable steps API "
                   "(run, sleep, call, ..., state, awakeable, promise, cancel).")

    class TerminalError(Exception):
        """Raise to fail the invocation (or a step) without retries."""

        def __init__(self, message="", code=500, *, status_code=None):
            # status_code: the Restate Python SDK's name for the code.
            Exception.__init__(self, message)
            self.message = message
            self.code = code if status_code is None else status_code

        @property
        def status_code(self):
            return self.code

    TerminalError.__module__ = "fnbridge"
    TerminalError.__qualname__ = "TerminalError"

    def set_output(key, value):
        """Record an output key/value pair of the current invocation."""
        if not isinstance(key, str):
            raise TypeError("fnbridge.set_output: key must be str, not %s" % type(key).__name__)
        if not isinstance(value, str):
            raise TypeError("fnbridge.set_output: value must be str, not %s" % type(value).__name__)
        if invocation.get() == 0 or invocation.get() != state["invocation"]:
            raise RuntimeError(
                "fnbridge.set_output(%r) called outside its invocation: call it from the handler "
                "(or a thread run with contextvars.copy_context()) while the invocation runs" % key
            )
        state["outputs"][key] = value

    api.TerminalError = TerminalError
    api.set_output = set_output

    def lone_surrogate(outputs):
        # The first key or value of outputs with no UTF-8 form, named, or None.
        for key, value in outputs.items():
            for what, text in (("key %r" % key, key), ("the value of %r" % key, value)):
                if not text.isascii():
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError:
                        return what
        return None

    def traceparent():
        """The W3C traceparent of the current invocation, or None without one."""
        # Like set_output, only the invocation's own context may ask: a
        # thread left over from an earlier invocation gets None, never the
        # trace of the one running now.
        if invocation.get() == 0 or invocation.get() != state["invocation"]:
            return None
        return state["env"].get("TRACEPARENT")

    api.traceparent = traceparent

    # Durable steps (durability: steps). The 'C' frame before an 'I' gives
    # the invocation its context endpoint; every call below is one request
    # to it, made strictly one at a time. Without a context (durability:
    # function) they all refuse.
    class Suspended(BaseException):
        """The attempt is over (suspended, or ended by a failed step): stop.

        A BaseException, so ``except Exception`` in the function does not
        swallow it; Restate resumes the invocation in a new attempt."""

    Suspended.__module__ = "fnbridge"
    Suspended.__qualname__ = "Suspended"

    class _Steps(object):
        def __init__(self, n, address, token, live, ordered):
            self.invocation = n
            self.address = address
            self.token = token
            # The endpoint takes a start sent ahead with its number, and
            # serves the processes its step starts after it (an older
            # bridge refuses the number: then neither).
            self.ordered = ordered
            # The replay is over (a fresh attempt; or a run/start answered
            # "live"): every step executes, so its run/start is sent ahead
            # (send_ahead) and its closure runs without waiting for the
            # answer, which is read with the step's run/complete.
            self.live = live
            self.ahead = None  # the run/start frame sent ahead, as sent, until answered
            self.ahead_answer = None  # its answer, read by exchange for request_body
            self.ahead_seq = 0  # run/starts sent ahead in this attempt: each names its number
            self.open_step = False  # a run started whose run/complete is not sent yet
            self.conn = None
            self.preface = None  # sent with the first request of conn
            self.reused = False  # conn was kept from an earlier attempt, and has not answered yet
            self.lock = _thread.allocate_lock()
            self.owner = None  # thread making the call in flight
            self.op = None  # its API name
            self.step = None  # name of the run step executing
            self.ended = None  # why the attempt is over, once it is
            self.broken = None  # why the endpoint cannot be used
            self.invocation_id = None
            self.id_lock = _thread.allocate_lock()  # see invocation_id

    steps = {"ctx": None}
    sockets = {}  # the socket module, imported at the first context call

    def current(api_name):
        # The context of the invocation running in this thread's context,
        # if it can take a call; enter() also takes the channel.
        n = invocation.get()
        if n == 0 or n != state["invocation"]:
            raise RuntimeError(
                "fnbridge.%s called outside its invocation: call it from the function "
                "(or a thread run with contextvars.copy_context(), e.g. "
                "executor.submit(contextvars.copy_context().run, fn)) while the invocation runs" % api_name
            )
        ctx = steps["ctx"]
        if ctx is None:
            raise RuntimeError(
                "fnbridge.%s needs durability: steps: this handler runs with durability: function "
                "(the default), where the whole invocation is one journaled run and there is no "
                "step context; set durability: steps on the handler to use it" % api_name
            )
        if ctx.ended is not None:
            raise Suspended(ctx.ended)
        if ctx.broken is not None:
            raise RuntimeError(ctx.broken)
        return ctx

    def enter(api_name):
        ctx = current(api_name)
        if not ctx.lock.acquire(False):
            me, owner, step = _thread.get_ident(), ctx.owner, ctx.step
            if owner == me and step is not None:
                raise RuntimeError(
                    "fnbridge.%s called inside step %r: a step's function cannot make context "
                    "calls (a replay skips it); make them before or after fnbridge.run" % (api_name, step)
                )
            if step is not None:
                # A thread of the step's function (an async def step, a pool
                # it started) or one beside the step: which, no one knows.
                raise RuntimeError(
                    "fnbridge.%s called from thread %d while step %r runs in thread %d: a step's function "
                    "cannot make context calls (a replay skips it), in any of its threads, and beside a "
                    "step none can be made (calls are journaled one at a time)" % (api_name, me, step, owner)
                )
            raise RuntimeError(
                "fnbridge.%s called from thread %d while fnbridge.%s is in flight in thread %d: "
                "context calls are journaled in order and must be made one at a time"
                % (api_name, me, ctx.op, ctx.owner)
            )
        ctx.owner = _thread.get_ident()
        ctx.op = api_name
        return ctx

    def leave(ctx):
        ctx.owner = ctx.op = ctx.step = None
        ctx.lock.release()

    # The connection of the worker's last attempt that ended normally, kept
    # for the next one: a new preface moves it to the next attempt's token
    # (see bridge/stepctx, "Framed protocol"), so an attempt costs no
    # connect and the bridge no accept.
    kept = {"conn": None, "address": None}

    def close_quietly(conn):
        try:
            conn.close()
        except Exception:
            pass

    def connection(ctx):
        # One framed connection per attempt: a preface with the token, then
        # length-prefixed frames (see bridge/stepctx, "Framed protocol").
        if ctx.conn is not None:
            return ctx.conn
        # The preface travels with the first request, in one send. A
        # process a step's function started (a fork) names the start its
        # parent sent ahead: the endpoint serves it after that start, so
        # its calls are never journaled ahead of the step.
        after = b""
        parent, _, k = environ.get("FNBRIDGE_CONTEXT_AFTER", "").partition(":")
        if k.isascii() and k.isdigit() and len(k) <= 18 and k.strip("0") and parent != str(os.getpid()):
            after = b" after=" + k.encode("ascii")
        ctx.preface = b"FNBRIDGE/1 " + ctx.token.encode("ascii") + after + b"\n"
        conn, kept["conn"] = kept["conn"], None
        if conn is not None:
            if kept["address"] == ctx.address and still_open(conn):
                ctx.conn, ctx.reused = conn, True
                return conn
            close_quietly(conn)
        socket = sockets.get("m")
        if socket is None:
            import socket
            sockets["m"] = socket
        conn = None
        try:
            if ctx.address.startswith("unix://"):
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.connect(ctx.address[len("unix://"):])
            else:
                host, _, port = ctx.address[len("tcp://"):].rpartition(":")
                conn = socket.create_connection((host.strip("[]"), int(port)))
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        ctx.conn, ctx.reused = conn, False
        return conn

    def still_open(conn):
        # Whether a kept connection can carry the next attempt's requests:
        # the bridge closes one idle past its bound (or restarts), and over
        # TCP a request sent on it then is lost without an error (a unix
        # socket refuses the send), a step's start sent ahead included.
        # Nothing is owed on it, so any byte to read, or its end, says no.
        socket = sockets["m"]
        try:
            conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            pass
        return False

    def drop_connection(ctx):
        conn, ctx.conn = ctx.conn, None
        ctx.ahead = None
        left[0] = 0
        if conn is not None:
            close_quietly(conn)

    def keep_connection(ctx):
        # At the end of an invocation: keep its connection for the next
        # attempt, unless the attempt is over early (its connection was
        # dropped) or a call may still be in flight on it (a thread of the
        # function inside one holds the lock). The lock stays taken: this
        # context is never used again.
        conn = ctx.conn
        if conn is None:
            return
        if ctx.ended is None and ctx.broken is None and ctx.ahead is None and left[0] == 0 and ctx.lock.acquire(False):
            ctx.conn = None
            kept["conn"], kept["address"] = conn, ctx.address
            return
        drop_connection(ctx)

    # Answers are read into one buffer, reused by every call of the worker
    # (calls are made one at a time): no allocation per recv, and only the
    # answer's body is copied out, as the str json.loads takes.
    answer_buf = bytearray(65536)
    answer_view = memoryview(answer_buf)
    # Compact encoders made once (json.dumps with arguments builds one per
    # call); same output as json.dumps(..., separators=(",", ":")).
    compact_ascii = json.JSONEncoder(separators=(",", ":")).encode
    quote = json.encoder.encode_basestring_ascii

    scan_json = json.JSONDecoder().scan_once

    def load_answer(text):
        # The endpoint answers compact JSON: the scanner alone parses it,
        # without json.loads' layers; anything else (and every error) goes
        # through json.loads.
        try:
            value, end = scan_json(text, 0)
            if end == len(text):
                return value
        except (StopIteration, ValueError, RecursionError):
            pass
        try:
            return loads(text)
        except (ValueError, RecursionError):
            # Valid JSON that json.loads refuses by default: an integer of
            # more digits than int_max_str_digits (another service's
            # output), or a step's value nested near the recursion limit,
            # which the answer wraps in two more levels. Journaled, it comes
            # back on every replay: read it without those bounds (anything
            # else fails again, as it should).
            return load_unbounded(text)

    def load_unbounded(text):
        digits = getattr(sys, "get_int_max_str_digits", None)  # 3.11+
        saved = digits() if digits else 0
        limit = sys.getrecursionlimit()
        try:
            if digits:
                sys.set_int_max_str_digits(0)
            sys.setrecursionlimit(limit + 100)
            return loads(text)
        finally:
            sys.setrecursionlimit(limit)
            if digits:
                sys.set_int_max_str_digits(saved)

    # How many bytes at the start of answer_buf belong to the next answer:
    # a run/start sent ahead and the request after it are answered back to
    # back, so one recv may bring both answers.
    left = [0]

    def read_answer(conn):
        buf, view = answer_buf, answer_view
        n, left[0] = left[0], 0
        while n < 4:
            got = conn.recv_into(view[n:])
            if not got:
                raise ConnectionError("the context endpoint closed the connection")
            n += got
        total = 4 + unpack_from(">I", buf)[0]
        if total > len(buf):
            buf = bytearray(total)
            buf[:n] = view[:n]
            view = memoryview(buf)
        while n < total:
            got = conn.recv_into(view[n:total])
            if not got:
                raise ConnectionError("the context endpoint closed the connection")
            n += got
        nl = buf.find(b"\n", 4, total)
        if nl < 0:
            raise ValueError("an answer frame without a status line")
        answer = int(buf[4:nl]), str(view[nl + 1:total], "utf-8")
        if n > total:
            # Only with answer_buf itself: a larger buffer was read to total.
            answer_buf[:n - total] = buf[total:n]
            left[0] = n - total
        return answer

    def send_ahead(ctx, frame):
        # Sends a run/start without reading its answer; the next request's
        # exchange reads it first.
        try:
            conn = connection(ctx)
            if ctx.preface is not None:
                frame, ctx.preface = ctx.preface + frame, None
            try:
                conn.sendall(frame)
            except OSError:
                if not ctx.reused:
                    raise
                # A kept connection the bridge closed (a unix socket says
                # so at once): it read nothing of it; a fresh one.
                drop_connection(ctx)
                conn = connection(ctx)
                ctx.preface = None  # frame has it
                conn.sendall(frame)
            ctx.ahead = frame
        except BaseException as exc:
            broken(ctx, "run", exc)

    def exchange(ctx, frame):
        conn = connection(ctx)
        if ctx.preface is not None:
            frame, ctx.preface = ctx.preface + frame, None
        reused, ctx.reused = ctx.reused, False
        ahead, ctx.ahead = ctx.ahead, None
        try:
            conn.sendall(frame)
            if ahead is not None:
                ctx.ahead_answer = read_answer(conn)
                reused = False  # the bridge has read the connection's requests
            return read_answer(conn)
        except OSError:
            if not reused:
                raise
            # The connection kept from an earlier attempt was closed by the
            # bridge meanwhile. It answers every request it reads, so it read
            # none of this one (nor the run/start sent ahead): send them
            # again, preface included, on a fresh connection.
            drop_connection(ctx)
            conn = connection(ctx)
            ctx.preface = None
            if ahead is not None:
                frame = ahead + frame
            conn.sendall(frame)
            if ahead is not None:
                ctx.ahead_answer = read_answer(conn)
            return read_answer(conn)

    def request(ctx, api_name, op, fields, raw=None):
        # raw is (field, JSON bytes) spliced in as sent, so the journal gets
        # exactly the compact encoding.
        body = compact_ascii(fields).encode("ascii")
        if raw is not None:
            body = body[:-1] + (b"," if fields else b"") + quote(raw[0]).encode("ascii") + b":" + raw[1] + b"}"
        return request_body(ctx, api_name, op.encode("ascii") + b"\n", body)

    def broken(ctx, api_name, exc):
        # A request failed on the way: whether it reached the journal is
        # unknown, and its answer may still come. The connection is dropped
        # (a later request must never read this one's answer) and nothing
        # more of this attempt may be journaled.
        drop_connection(ctx)
        if isinstance(exc, (OSError, ValueError)):
            ctx.broken = "fnbridge: the context endpoint at %s is unreachable: %s: %s" % (
                ctx.address, type_name(exc), message_of(exc))
            raise RuntimeError(ctx.broken)
        # Interrupted (a signal handler's exception, KeyboardInterrupt):
        # the interruption goes on; later calls say why they cannot.
        ctx.broken = ("fnbridge.%s was interrupted by %s before the context endpoint answered; "
                      "this attempt can make no more context calls" % (api_name, type_name(exc)))
        raise exc

    def request_body(ctx, api_name, op_line, body):
        # op_line is b"<operation>\n"; body the request's JSON, encoded.
        if op_line == b"run/complete\n":
            ctx.open_step = False
        try:
            status, data = exchange(ctx, pack(">I", len(op_line) + len(body)) + op_line + body)
        except BaseException as exc:
            broken(ctx, api_name, exc)
        refused = False
        if ctx.ahead_answer is not None and op_line == b"run/complete\n":
            ahead, ctx.ahead_answer = ctx.ahead_answer, None
            if not (ahead[0] == 200 and ahead[1].startswith('{"execute":')):
                # The run/start sent ahead did not start the run (the
                # attempt ended, the invocation was cancelled): its answer
                # is the step's outcome; this completion was refused too.
                status, data = ahead
                refused = True
        try:
            answer = load_answer(data)
            message = answer.get("error", "") if status != 200 else ""
        except (ValueError, AttributeError, RecursionError):
            raise RuntimeError("fnbridge.%s: the context endpoint at %s sent an unreadable answer (HTTP %d): %r"
                               % (api_name, ctx.address, status, data[:200]))
        if status == 200:
            if "failure" in answer:
                # This call alone failed terminally (refused, a promise
                # completed before, or interrupted by the invocation's
                # cancellation: 409); the attempt goes on.
                f = answer["failure"] or {}
                raise TerminalError(f.get("message", ""), f.get("code", 500))
            if refused:
                raise RuntimeError("fnbridge.run: the context endpoint at %s answered the step's start with %r, "
                                   "which neither starts nor refuses it" % (ctx.address, data[:200]))
            return answer
        if status == 410:
            ctx.ended = message or "the attempt is over"
            drop_connection(ctx)
            raise Suspended(ctx.ended)
        if op_line == b"run/complete\n" and not refused:
            # The step's run stays open at the bridge, and no later step
            # may be taken beside it (nor its completion mistaken for
            # another's): the connection goes, which fails the step.
            drop_connection(ctx)
            ctx.broken = ("fnbridge.%s: the context endpoint refused the step's completion (HTTP %d): %s; "
                          "the step fails and this attempt can make no more context calls" % (api_name, status, message))
            raise RuntimeError(ctx.broken)
        raise RuntimeError("fnbridge.%s: %s (HTTP %d)" % (api_name, message, status))

    def result_of(r):
        if "failure" in r:
            f = r["failure"]
            raise TerminalError(f.get("message", ""), f.get("code", 500))
        if "value" in r:
            return r["value"]
        import base64

        data = base64.b64decode(r.get("bytes", ""))
        return data if data else None

    def bytes_field(field, value):
        # Bytes go as they are: base64 in field, which the endpoint
        # decodes (a JSON "value" would be written as JSON text).
        import base64

        return (field, quote(base64.b64encode(bytes(value)).decode("ascii")).encode("ascii"))

    def encode_input(api_name, value):
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray)):
            return bytes_field("input_bytes", value)
        try:
            return ("input", encode(value))
        except _Unserializable as wrapped:
            exc = wrapped.args[0]
            raise TypeError("fnbridge.%s: input is not JSON-serializable: %s: %s"
                            % (api_name, type_name(exc), message_of(exc)))

    def millis(api_name, what, seconds):
        if hasattr(seconds, "total_seconds"):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError("fnbridge.%s: %s must be a number of seconds or a timedelta, not %s"
                            % (api_name, what, type(seconds).__name__))
        if not seconds >= 0 or seconds == float("inf"):
            raise ValueError("fnbridge.%s: %s must be a finite number of seconds >= 0, not %r" % (api_name, what, seconds))
        ms = int(seconds * 1000)
        if ms > max_millis:
            raise ValueError("fnbridge.%s: %s must be at most %d seconds (about 292 years), not %r"
                             % (api_name, what, max_millis // 1000, seconds))
        return ms

    # The longest sleep or delay the endpoint takes, in milliseconds (the
    # longest Go duration, (2**63 - 1) ns).
    max_millis = ((1 << 63) - 1) // 1000000

    def check_text(api_name, what, value):
        # A lone surrogate (bytes decoded with surrogateescape, as in
        # os.environ or a file name) has no UTF-8 form: JSON would turn it
        # into U+FFFD, so two different keys or names would reach Restate
        # as one.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("fnbridge.%s: %s %r is not valid Unicode text (a lone surrogate): "
                             "Restate takes text as UTF-8 only" % (api_name, what, value)) from None

    def check_str(api_name, what, value, optional=False):
        if optional and value is None:
            return ""
        if not isinstance(value, str) or not value:
            raise TypeError("fnbridge.%s: %s must be a non-empty str, not %r" % (api_name, what, value))
        if not value.isascii():
            check_text(api_name, what, value)
        return value

    def call_fields(api_name, service, handler, key, idempotency_key, headers):
        fields = {
            "service": check_str(api_name, "service", service),
            "handler": check_str(api_name, "handler", handler),
            "key": check_str(api_name, "key", key, True),
            "idempotency_key": check_str(api_name, "idempotency_key", idempotency_key, True),
        }
        if headers:
            if not hasattr(headers, "items") or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
                raise TypeError("fnbridge.%s: headers must be a mapping of str to str, not %r" % (api_name, headers))
            fields["headers"] = dict(headers.items())
            for k, v in fields["headers"].items():
                check_text(api_name, "header", k)
                check_text(api_name, "header %s" % k, v)
        return fields

    class _Unawaitable(Exception):
        pass

    def settle(name, value):
        # A step's fn that is an async def (or returns another awaitable):
        # the step is the awaited result. The handler's own event loop, if
        # one runs in this thread, is blocked in this synchronous call, so
        # the awaitable runs on a loop of its own in a thread, with the
        # invocation's context (set_output works there).
        import asyncio
        import threading

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(_await(value))
        if isinstance(value, asyncio.Future):
            value.cancel()
            raise _Unawaitable("fn returned %s, which belongs to the handler's event loop; fnbridge.run "
                               "blocks that loop until the step ends, so the step cannot wait for it: "
                               "pass the async function itself (fnbridge.run(name, fetch)), or a "
                               "coroutine, not a task or future" % type(value).__name__)
        box = {}

        def target():
            try:
                box["value"] = asyncio.run(_await(value))
            except BaseException as exc:
                box["error"] = exc

        worker = threading.Thread(target=contextvars.copy_context().run, args=(target,),
                                  name="fnbridge step %s" % name, daemon=True)
        worker.start()
        worker.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def end_step(ctx):
        # Taken with the lock invocation_id() holds while it asks the
        # endpoint from a step's thread: once the step is over, no such
        # request is on the channel.
        with ctx.id_lock:
            ctx.step = None

    def run(name, fn, /, *args, **kwargs):
        """Run fn(*args, **kwargs) as the journaled step name and return its result.

        A step recorded by an earlier attempt returns its journaled result
        without calling fn. fn's return value must be JSON-serializable.
        fnbridge.TerminalError raised by fn is journaled as the step's
        failure and raised on this and every later attempt; any other
        exception fails the attempt (Restate retries it, completed steps
        stay journaled) and is raised again here."""
        check_str("run", "name", name)
        if len(name) > 4096 and len(name.encode("utf-8")) > 16384:
            # The endpoint's bound (bridge/stepctx MaxRunNameBytes), checked
            # here too: a start sent ahead is refused only after fn ran.
            raise ValueError("fnbridge.run: the step name is %d bytes; a step name may have at most 16384"
                             % len(name.encode("utf-8")))
        if not callable(fn):
            raise TypeError("fnbridge.run(%r): fn must be callable, not %s" % (name, type(fn).__name__))
        ctx = enter("run")
        try:
            body = b'{"name":' + quote(name).encode("ascii") + b"}"
            if ctx.live:
                # Nothing left to replay, so the step executes: its start
                # goes out, and fn runs without waiting for the answer (read
                # with the completion, which then names no handle). The
                # start is numbered, and the processes fn starts inherit
                # the number (FNBRIDGE_CONTEXT_AFTER), so that their calls
                # wait for it.
                ctx.open_step = True
                if ctx.ordered:
                    ctx.ahead_seq += 1
                    body = body[:-1] + b',"ahead":' + str(ctx.ahead_seq).encode("ascii") + b"}"
                send_ahead(ctx, pack(">I", 10 + len(body)) + b"run/start\n" + body)
                if ctx.ordered:
                    environ["FNBRIDGE_CONTEXT_AFTER"] = "%d:%d" % (os.getpid(), ctx.ahead_seq)
                handle = {}
            else:
                started = request_body(ctx, "run", b"run/start\n", body)
                if "recorded" in started:
                    return result_of(started["recorded"])
                handle = {"handle": started["execute"]}
                ctx.open_step = True
                if started.get("live") is True:
                    ctx.live = True
            ctx.step = name
            try:
                try:
                    value = fn(*args, **kwargs)
                    if hasattr(value, "__await__"):
                        value = settle(name, value)
                finally:
                    end_step(ctx)
            except _Unawaitable as exc:
                # A retry could only repeat it: journaled as a terminal failure.
                done = request(ctx, "run", "run/complete", dict(handle, failure={
                    "code": 500, "message": "fnbridge.run(%r): %s" % (name, message_of(exc))}))
                return result_of(done["result"])
            except Exception as exc:
                if is_terminal(exc):
                    code = terminal_code(exc) or 500
                    message = getattr(exc, "message", None)
                    if not isinstance(message, str):
                        message = message_of(exc)
                    done = request(ctx, "run", "run/complete",
                                   dict(handle, failure={"code": code, "message": message}))
                    return result_of(done["result"])
                request(ctx, "run", "run/complete", dict(handle, retryable={
                    "message": "%s: %s" % (type_name(exc), message_of(exc))}))
                ctx.ended = "step %r failed and will be retried: %s: %s" % (name, type_name(exc), message_of(exc))
                raise
            except BaseException as exc:
                # SystemExit, KeyboardInterrupt, a signal handler's
                # BaseException: the step cannot complete, so it fails
                # retryably and the attempt ends with it; the exception
                # goes on. (Suspended comes only from an attempt already over.)
                if ctx.ended is None and ctx.broken is None:
                    text = "%s: %s" % (type_name(exc), message_of(exc))
                    try:
                        request(ctx, "run", "run/complete", dict(handle, retryable={"message": text}))
                    except BaseException:
                        pass  # the endpoint ends the attempt with the connection anyway
                    if ctx.ended is None:
                        ctx.ended = "step %r was interrupted and will be retried: %s" % (name, text)
                raise
            try:
                encoded = encode(value, readback=True)
            except _Unserializable as wrapped:
                # A retry could only repeat it: journaled as a terminal failure.
                exc = wrapped.args[0]
                done = request(ctx, "run", "run/complete", dict(handle, failure={
                    "code": 500, "message": "fnbridge.run(%r): the step's return value is not JSON-serializable: %s: %s"
                    % (name, type_name(exc), message_of(exc))}))
                return result_of(done["result"])
            if handle:
                body = b'{"handle":' + quote(handle["handle"]).encode("ascii") + b',"value":' + encoded + b"}"
            else:
                body = b'{"value":' + encoded + b"}"
            done = request_body(ctx, "run", b"run/complete\n", body)
            return result_of(done["result"])
        finally:
            if ctx.open_step:
                # Something raised after the step started and before its
                # outcome was sent (a value whose encoding failed oddly, a
                # signal handler's exception): its run stays open in the
                # journal, and with a start sent ahead the connection has an
                # answer owed. Closing the connection fails the step
                # retryably at the bridge; nothing more of this attempt may
                # be journaled.
                ctx.open_step = False
                if ctx.conn is not None and ctx.ended is None and ctx.broken is None:
                    drop_connection(ctx)
                    ctx.broken = ("fnbridge.run(%r) ended before its outcome was sent; the step fails and "
                                  "this attempt can make no more context calls" % (name,))
            leave(ctx)

    class Future(object):
        """A pending durable result (a timer or a call) of this attempt.

        result() waits for it; it may be awaited long after it was created,
        in any order, any number of times."""

        __slots__ = ("_ctx", "_handle", "_what", "_done", "_value", "_failure")

        def __init__(self, ctx, handle, what):
            self._ctx, self._handle, self._what = ctx, handle, what
            self._done, self._value, self._failure = False, None, None

        def __repr__(self):
            return "<fnbridge.Future %s %s%s>" % (self._what, self._handle, " done" if self._done else "")

        def _settle(self, r):
            self._done = True
            try:
                self._value = result_of(r)
            except TerminalError as exc:
                self._failure = (exc.message, exc.code)

        def result(self):
            """The result; raises TerminalError if it failed terminally."""
            if not self._done:
                await_all("Future.result", (self,))
            elif current("Future.result") is not self._ctx:
                # Settled in an earlier attempt or invocation (a future kept
                # in a global): its value was journaled there, not here.
                raise RuntimeError("fnbridge.Future.result: %r belongs to another invocation attempt" % self)
            if self._failure is not None:
                raise TerminalError(*self._failure)
            return self._value

    Future.__module__ = "fnbridge"
    Future.__qualname__ = "Future"

    def check_futures(api_name, ctx, futures):
        if not futures:
            raise TypeError("fnbridge.%s needs at least one Future" % api_name)
        for f in futures:
            if not isinstance(f, Future):
                raise TypeError("fnbridge.%s takes Futures as separate arguments (%s(*futures)), not %s"
                                % (api_name, api_name, type(f).__name__))
            if f._ctx is not ctx:
                raise RuntimeError("fnbridge.%s: %r belongs to another invocation attempt" % (api_name, f))

    def wait_all(*futures):
        """Wait for every future; return their results in order.

        Raises the TerminalError of the first future (in order) that failed;
        no futures: []."""
        await_all("wait_all", futures)
        return [f.result() for f in futures]

    def await_all(api_name, futures):
        # Settles every future of futures (wait_all, Future.result).
        ctx = enter(api_name)
        try:
            if not futures:
                return
            check_futures(api_name, ctx, futures)
            pending = []
            for f in futures:
                if not f._done and f not in pending:
                    pending.append(f)
            if pending:
                answer = request(ctx, api_name, "await", {"handles": [f._handle for f in pending], "mode": "all"})
                results = answer.get("results") or []
                if len(results) != len(pending):
                    raise RuntimeError("fnbridge.%s: the context endpoint answered %d results for %d futures"
                                       % (api_name, len(results), len(pending)))
                for f, r in zip(pending, results):
                    f._settle(r)
        finally:
            leave(ctx)

    def wait_any(*futures):
        """Wait until one of futures completes and return that Future: the
        first whose completion arrived, even if another was awaited before."""
        ctx = enter("wait_any")
        try:
            check_futures("wait_any", ctx, futures)
            # Always the endpoint's answer: only the journal knows which
            # completion arrived first (and it answers the same on replay).
            answer = request(ctx, "wait_any", "await", {"handles": [f._handle for f in futures], "mode": "any"})
            i = answer.get("index")
            if not isinstance(i, int) or not 0 <= i < len(futures):
                raise RuntimeError("fnbridge.wait_any: the context endpoint answered no valid index: %r" % (i,))
            futures[i]._settle(answer["result"])
            return futures[i]
        finally:
            leave(ctx)

    def sleep_op(api_name, seconds, asynchronous):
        ms = millis(api_name, "seconds", seconds)
        ctx = enter(api_name)
        try:
            answer = request(ctx, api_name, "sleep", {"millis": ms, "async": asynchronous})
            if asynchronous:
                return Future(ctx, answer["handle"], "sleep")
            result_of(answer["result"])
        finally:
            leave(ctx)

    def sleep(seconds):
        """Sleep durably: a journaled timer (seconds, or a timedelta)."""
        sleep_op("sleep", seconds, False)

    def sleep_async(seconds):
        """Start a durable timer and return its Future."""
        return sleep_op("sleep_async", seconds, True)

    def call_op(api_name, service, handler, input, key, idempotency_key, headers, asynchronous):
        fields = call_fields(api_name, service, handler, key, idempotency_key, headers)
        fields["async"] = asynchronous
        raw = encode_input(api_name, input)
        ctx = enter(api_name)
        try:
            answer = request(ctx, api_name, "call", fields, raw)
            if asynchronous:
                return Future(ctx, answer["handle"], "call %s/%s" % (service, handler))
            return result_of(answer["result"])
        finally:
            leave(ctx)

    def call(service, handler, input=None, *, key=None, idempotency_key=None, headers=None):
        """Call another handler durably and return its result: its output
        decoded from JSON, bytes when the output is not JSON (a Bash
        handler's plain text), None when it is empty.

        A terminal failure of the callee raises TerminalError with its code
        and message."""
        return call_op("call", service, handler, input, key, idempotency_key, headers, False)

    def call_async(service, handler, input=None, *, key=None, idempotency_key=None, headers=None):
        """Call another handler durably and return the Future of its result."""
        return call_op("call_async", service, handler, input, key, idempotency_key, headers, True)

    def send_call(service, handler, input=None, *, key=None, delay=None, idempotency_key=None, headers=None):
        """Send a one-way call (after delay seconds); return the callee's invocation id."""
        fields = call_fields("send", service, handler, key, idempotency_key, headers)
        fields["delay_millis"] = 0 if delay is None else millis("send", "delay", delay)
        raw = encode_input("send", input)
        ctx = enter("send")
        try:
            return request(ctx, "send", "send", fields, raw)["invocation_id"]
        finally:
            leave(ctx)

    def invocation_id():
        """The id of this invocation (inv_...), the same on every attempt.

        Also inside a step's function (an idempotency key for what the
        step calls), where no other context call may be made."""
        ctx = current("invocation_id")
        if ctx.invocation_id is not None:
            return ctx.invocation_id
        with ctx.id_lock:
            if ctx.invocation_id is None and ctx.step is not None:
                # Inside a step's fn, from its thread or any other (a pool
                # fanning out requests): the step holds the channel with
                # nothing in flight on it, the endpoint takes this one
                # request while a run executes, and id_lock keeps two of
                # them, or the step's end, from overlapping.
                ctx.invocation_id = request(ctx, "invocation_id", "invocation-id", {})["invocation_id"]
            if ctx.invocation_id is not None:
                return ctx.invocation_id
        ctx = enter("invocation_id")
        try:
            if ctx.invocation_id is None:
                ctx.invocation_id = request(ctx, "invocation_id", "invocation-id", {})["invocation_id"]
            return ctx.invocation_id
        finally:
            leave(ctx)

    def random():
        """A float in [0, 1); the n-th call returns the same on every attempt."""
        ctx = enter("random")
        try:
            return request(ctx, "random", "random", {})["float"]
        finally:
            leave(ctx)

    def uuid4():
        """A random uuid.UUID (version 4); the n-th call returns the same on every attempt."""
        ctx = enter("uuid4")
        try:
            text = request(ctx, "uuid4", "uuid", {})["uuid"]
        finally:
            leave(ctx)
        import uuid

        return uuid.UUID(text)

    # Keyed services (virtual objects, workflows) and awakeables.
    def key():
        """The virtual object key or workflow id of this invocation.

        Works in both durability modes; a plain service's invocations have
        none (RuntimeError)."""
        n = invocation.get()
        if n == 0 or n != state["invocation"]:
            raise RuntimeError(
                "fnbridge.key called outside its invocation: call it from the function "
                "(or a thread run with contextvars.copy_context()) while the invocation runs")
        k = state["env"].get("FNBRIDGE_KEY")
        if k is None:
            raise RuntimeError(
                "fnbridge.key(): this handler's service is a plain service (type: service), whose "
                "invocations have no key; keys belong to services of type virtual_object or workflow")
        return k

    def encode_value(api_name, value):
        try:
            return ("value", encode(value, readback=True))
        except _Unserializable as wrapped:
            exc = wrapped.args[0]
            raise TypeError("fnbridge.%s: the value is not JSON-serializable: %s: %s"
                            % (api_name, type_name(exc), message_of(exc)))

    def context_op(api_name, op, fields, raw=None):
        ctx = enter(api_name)
        try:
            return request(ctx, api_name, op, fields, raw)
        finally:
            leave(ctx)

    class _State(object):
        """The durable key/value state of a virtual object or workflow.

        Values are JSON (bytes for a value that is not); reads see this
        invocation's writes.
        Shared handlers read it; writing from one raises TerminalError."""

        __slots__ = ()

        def __repr__(self):
            return "<fnbridge.state>"

        def get(self, name, default=None):
            """The value of state key name, or default when it has none."""
            check_str("state.get", "name", name)
            answer = context_op("state.get", "state/get", {"name": name})
            if not answer.get("found"):
                return default
            r = answer["result"]
            if "value" not in r and "failure" not in r:
                # Raw bytes, empty ones included: a key that holds an
                # empty value has a value, unlike an empty call result.
                import base64

                return base64.b64decode(r.get("bytes", ""))
            return result_of(r)

        def set(self, name, value):
            """Set state key name to value: JSON-encodable, or bytes written
            as they are (for readers that do not take JSON)."""
            check_str("state.set", "name", name)
            if isinstance(value, (bytes, bytearray)):
                raw = bytes_field("bytes", value)
            else:
                raw = encode_value("state.set", value)
            context_op("state.set", "state/set", {"name": name}, raw)

        def clear(self, name):
            """Remove state key name."""
            check_str("state.clear", "name", name)
            context_op("state.clear", "state/clear", {"name": name})

        def clear_all(self):
            """Remove every state key."""
            context_op("state.clear_all", "state/clear-all", {})

        def keys(self):
            """The state keys, a sorted list of str."""
            return list(context_op("state.keys", "state/keys", {}).get("keys") or [])

    def awakeable():
        """Create an awakeable: (awakeable_id, future).

        Hand the id to whoever completes it (another handler with
        resolve_awakeable, or Restate's ingress:
        POST /restate/awakeables/<id>/resolve); future.result() waits for
        its value (suspending like any wait) and raises TerminalError when
        it is rejected. The ids are the same on every attempt."""
        ctx = enter("awakeable")
        try:
            answer = request(ctx, "awakeable", "awakeable", {})
            return answer["id"], Future(ctx, answer["handle"], "awakeable")
        finally:
            leave(ctx)

    def resolve_awakeable(awakeable_id, value):
        """Complete the awakeable awakeable_id with value (JSON-encodable).

        An id that is not an awakeable id raises TerminalError (400)."""
        check_str("resolve_awakeable", "awakeable_id", awakeable_id)
        raw = encode_value("resolve_awakeable", value)
        context_op("resolve_awakeable", "awakeable/resolve", {"id": awakeable_id}, raw)

    def check_code(api_name, code):
        if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 65535:
            raise TypeError("fnbridge.%s: code must be an int from 1 to 65535, not %r" % (api_name, code))
        return code

    def reject_awakeable(awakeable_id, message, code=500):
        """Fail the awakeable awakeable_id: its waiter gets TerminalError(message, code).

        An id that is not an awakeable id raises TerminalError (400)."""
        check_str("reject_awakeable", "awakeable_id", awakeable_id)
        if not isinstance(message, str):
            raise TypeError("fnbridge.reject_awakeable: message must be str, not %s" % type(message).__name__)
        check_text("reject_awakeable", "message", message)
        context_op("reject_awakeable", "awakeable/reject",
                   {"id": awakeable_id, "message": message, "code": check_code("reject_awakeable", code)})

    class Promise(object):
        """A durable promise of a workflow, named and shared by its handlers."""

        __slots__ = ("name",)

        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return "<fnbridge.Promise %r>" % self.name

        def get(self):
            """Wait for the promise (suspending like any wait) and return its value.

            Raises TerminalError when it was rejected."""
            return result_of(context_op("promise.get", "promise/get", {"name": self.name})["result"])

        def get_async(self):
            """A Future of the promise, for wait_any / wait_all (e.g. with a timer)."""
            ctx = enter("promise.get_async")
            try:
                answer = request(ctx, "promise.get_async", "promise/get", {"name": self.name, "async": True})
                return Future(ctx, answer["handle"], "promise")
            finally:
                leave(ctx)

        def peek(self):
            """The promise's value, or None while it is unresolved (raises TerminalError when rejected)."""
            answer = context_op("promise.peek", "promise/peek", {"name": self.name})
            if not answer.get("found"):
                return None
            return result_of(answer["result"])

        def resolve(self, value):
            """Resolve the promise with value (JSON-encodable); TerminalError if it was completed before."""
            raw = encode_value("promise.resolve", value)
            context_op("promise.resolve", "promise/resolve", {"name": self.name}, raw)

        def reject(self, message, code=500):
            """Reject the promise: its waiters get TerminalError(message, code)."""
            if not isinstance(message, str):
                raise TypeError("fnbridge.promise.reject: message must be str, not %s" % type(message).__name__)
            check_text("promise.reject", "message", message)
            context_op("promise.reject", "promise/reject",
                       {"name": self.name, "message": message, "code": check_code("promise.reject", code)})

    Promise.__module__ = "fnbridge"
    Promise.__qualname__ = "Promise"

    def promise(name):
        """The workflow promise name (a workflow's handlers only)."""
        check_str("promise", "name", name)
        return Promise(name)

    def cancel(invocation_id):
        """Ask Restate to cancel the invocation invocation_id (inv_...).

        An id that is not an invocation id raises TerminalError (400)."""
        check_str("cancel", "invocation_id", invocation_id)
        context_op("cancel", "cancel", {"invocation_id": invocation_id})

    def forget_connection_in_child():
        # A forked child must not share the parent's connection, nor what
        # the parent owes on it: a run/start sent ahead whose answer the
        # child's first call would otherwise take for its own, and the
        # bytes of an answer already read.
        ctx = steps["ctx"]
        if ctx is not None:
            ctx.conn = None
            ctx.ahead = ctx.ahead_answer = None
            ctx.reused = False
        left[0] = 0
        kept["conn"] = None

    os.register_at_fork(after_in_child=forget_connection_in_child)

    send_call.__name__ = send_call.__qualname__ = "send"
    for api_fn in (run, sleep, sleep_async, call, call_async, send_call, wait_all, wait_any, invocation_id, random, uuid4,
                   key, awakeable, resolve_awakeable, reject_awakeable, promise, cancel):
        setattr(api, api_fn.__name__, api_fn)
    api.state = _State()
    api.Promise = Promise
    api.Future = Future
    api.Suspended = Suspended
    modules["fnbridge"] = api

    def add_child_stub():
        # multiprocessing's spawn and forkserver start a fresh interpreter
        # that imports the handler's module, and with it fnbridge, which
        # exists only in this process's sys.modules. A stub on sys.path
        # (after the handler's own directories; here the injected module
        # wins) lets the child load it; its context calls raise there, as
        # outside an invocation. Best effort: without a writable scratch
        # directory a child cannot import fnbridge, as before.
        if not outputs_base:
            return
        lib = os.path.join(os.path.dirname(outputs_base), "lib")
        try:
            os.mkdir(lib, 0o700)
            with open(os.path.join(lib, "fnbridge.py"), "w") as f:
                f.write(child_stub)
        except OSError:
            return
        sys.path.append(lib)

    def check_inside(name):
        # Find (without running it) every module of the dotted name, outermost
        # first, and refuse one whose file is not beneath the working
        # directory once symlinks are resolved: a symlink out of it, an
        # interpreter module, or one the worker had already imported. Each
        # parent is checked before find_spec of its child imports it.
        import importlib.util

        root = os.path.realpath(workdir)
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            loaded = sys.modules.get(sub)
            if loaded is not None:
                origin = getattr(loaded, "__file__", None)
                locations = list(getattr(loaded, "__path__", None) or [])
            else:
                spec = importlib.util.find_spec(sub)
                if spec is None:
                    raise ModuleNotFoundError("No module named %r" % sub, name=sub)
                origin = spec.origin if spec.has_location else None
                locations = list(spec.submodule_search_locations or [])
            paths = [origin] if origin else locations
            if not paths:
                raise ImportError("module %r is built into the interpreter, not a file in the working directory" % sub)
            for path in paths:
                real = os.path.realpath(path)
                if os.path.commonpath([root, real]) != root:
                    local = os.path.join(root, *parts[:i])
                    for mine in (local + ".py", local):
                        if os.path.exists(mine) and os.path.commonpath([root, os.path.realpath(mine)]) == root:
                            # json.py beside the handler loses to the json
                            # the interpreter found first: said so, not
                            # "outside" (a symlink out of the directory is).
                            raise ImportError(
                                "module %r is %s, not the %s in the working directory %s: the interpreter's own "
                                "module of that name comes first; rename yours"
                                % (sub, real, os.path.basename(mine) + ("" if mine.endswith(".py") else "/"), root),
                                name=sub,
                            )
                    raise ImportError(
                        "module %r is %s, outside the working directory %s" % (sub, real, root), name=sub
                    )

    # logging.getLogger(__name__).info(...) reaches the logs as print()
    # does; Python would drop it (the root logger and its last-resort
    # handler both start at WARNING). Set up as logging is first imported,
    # so a worker whose function never logs pays nothing for it; a function
    # that configures logging (basicConfig, dictConfig, its own handlers)
    # gets what it configures, from INFO unless it sets a level.
    def configure_logging(logging):
        class ToStderr(logging.StreamHandler):
            # The stream of the moment, as Python's own last resort uses.
            @property
            def stream(self):
                return sys.stderr

            @stream.setter
            def stream(self, _):
                pass

        root = logging.getLogger()
        if root.level == logging.WARNING and not root.handlers:
            root.setLevel(logging.INFO)
        last = ToStderr()
        last.setLevel(logging.INFO)
        last.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        logging.lastResort = last

    class LoggingHook:
        # A meta path finder that only watches for logging being loaded: it
        # finds it through the finders after it, as the import would, and
        # configures the module once it has run. A find_spec that loads
        # nothing (a probe) leaves it in place; any surprise leaves the
        # import to the other finders, untouched.
        def find_spec(self, name, path=None, target=None):
            if name != "logging":
                return None
            try:
                spec = None
                for finder in [f for f in sys.meta_path if f is not self]:
                    find = getattr(finder, "find_spec", None)
                    spec = find(name, path, target) if find is not None else None
                    if spec is not None:
                        break
                if getattr(spec and spec.loader, "exec_module", None) is None:
                    return None
                spec.loader = ConfiguringLoader(spec.loader, self)
                return spec
            except Exception:
                return None

    class ConfiguringLoader:
        # The loader logging was found with, unchanged (it may be shared),
        # wrapped: it runs the module, then configures it.
        def __init__(self, loader, hook):
            self.loader, self.hook = loader, hook

        def __getattr__(self, name):
            return getattr(self.loader, name)

        def exec_module(self, module):
            self.loader.exec_module(module)
            if self.hook in sys.meta_path:
                sys.meta_path.remove(self.hook)
            try:
                configure_logging(module)
            except Exception:
                pass

    if "logging" in sys.modules:
        configure_logging(sys.modules["logging"])
    else:
        sys.meta_path.insert(0, LoggingHook())

    def check_signature(name, fn):
        # What a handler takes: the decoded input, or nothing (a handler
        # without a parameter, as Restate's SDKs allow). One that needs more
        # could only fail on every invocation: its registration fails. A
        # plain function's code says it; anything else (a decorated
        # function, a callable object, a partial) is read by inspect, and
        # one it cannot read gets the input.
        target, offset = fn, 0
        if hasattr(target, "__func__"):
            target, offset = target.__func__, 1
        code = getattr(target, "__code__", None)
        if code is None or hasattr(target, "__wrapped__") or not isinstance(getattr(code, "co_argcount", None), int):
            return check_signature_inspect(name, fn)
        positional = code.co_argcount - offset
        defaults = len(getattr(target, "__defaults__", None) or ())
        names = code.co_varnames[offset:code.co_argcount]
        required = names[:max(0, positional - defaults)]
        kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
        missing = [k for k in kwonly if k not in (getattr(target, "__kwdefaults__", None) or {})]
        refuse_signature(name, required, missing)
        return positional > 0 or bool(code.co_flags & 0x04)

    def check_signature_inspect(name, fn):
        # What is called is the callable itself (own): its signature says
        # what it can take, and a refusal is its alone. A wrapper that
        # takes anything (*args, as functools.wraps decorators do, or no
        # signature at all, as lru_cache) defers to the function it wraps
        # (inner) on whether the input is passed.
        import inspect

        def params(**kw):
            try:
                return list(inspect.signature(fn, **kw).parameters.values())
            except (TypeError, ValueError):
                return None

        P = inspect.Parameter
        positional = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
        own, inner = params(follow_wrapped=False), params()
        check = own if own is not None else inner
        if check is None:
            return True
        refuse_signature(name, [p.name for p in check if p.kind in positional and p.default is P.empty],
                         [p.name for p in check if p.kind == P.KEYWORD_ONLY and p.default is P.empty])
        if own is not None and not any(p.kind == P.VAR_POSITIONAL for p in own):
            return any(p.kind in positional for p in own)
        if inner is None:
            return True
        return any(p.kind in positional or p.kind == P.VAR_POSITIONAL for p in inner)

    def refuse_signature(name, required, missing):
        needs = []
        if len(required) > 1:
            needs.append("%d positional arguments (%s)" % (len(required), ", ".join(required)))
        if missing:
            needs.append("the keyword-only arguments %s" % ", ".join(missing))
        if needs:
            raise TypeError("%s needs %s; a handler is called with one argument, the decoded input "
                            "(or with none when it takes no parameter)" % (name, " and ".join(needs)))

    # Load the handler once. No bytecode cache is written: a cached .pyc is
    # trusted while the source keeps its size and modification second, so
    # a quick edit would start the old code under the new digest.
    sys.dont_write_bytecode = True
    sys.path.insert(0, workdir)
    add_child_stub()
    stage = "import module %r" % module_name
    try:
        import importlib

        check_inside(module_name)
        module = importlib.import_module(module_name)
        stage = "resolve function %r" % function_name
        if not hasattr(module, function_name):
            raise AttributeError(
                "module %r (%s) has no attribute %r"
                % (module_name, getattr(module, "__file__", None) or "built-in", function_name)
            )
        handler = getattr(module, function_name)
        if not callable(handler):
            raise TypeError(
                "%s.%s is not callable (it is a %s)" % (module_name, function_name, type(handler).__name__)
            )
        takes_input = check_signature(module_name + "." + function_name, handler)
    except BaseException as exc:
        print_traceback()
        log_barrier()
        send_json(ord("X"), {"stage": stage, "type": type_name(exc), "message": message_of(exc)})
        sys.exit(1)
    log_barrier()
    send_json(
        ord("K"),
        {"python": sys.version.split()[0], "file": getattr(module, "__file__", None) or ""},
    )

    def new_outputs_file(n):
        # Every invocation gets a path of its own in FNBRIDGE_OUTPUTS
        # (children started from now on inherit it), so a late write to an
        # earlier invocation's file is never read. The file is created by
        # whoever writes it first: creating one per invocation costs more
        # than the rest of a warm call on some file systems.
        if not outputs_base:
            return ""
        # Random too, not only counted: a process an invocation left
        # behind cannot name the next invocation's file.
        path = "%s.%d.%s" % (outputs_base, n, os.urandom(8).hex())
        environ["FNBRIDGE_OUTPUTS"] = path
        return path

    def take_outputs_file(path):
        # Usually the handler wrote none: asking first costs half of a
        # failed open, which raises as well.
        if not path or not os.access(path, os.F_OK):
            return b""
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return b""
        with f:
            os.unlink(path)
            return f.read(max_outputs_file + 1)

    # Made once: json.dumps with arguments builds an encoder per call.
    encode_text = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    encode_ascii = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode

    def fast_encoder():
        # What JSONEncoder.encode runs for these settings, without its
        # Python layers (a step's value is encoded on every run): the C
        # encoder, made per call with fresh circular-reference markers.
        # Used only when it exists and agrees with encode_text.
        make = getattr(json.encoder, "c_make_encoder", None)
        if make is None:
            return encode_text
        default, text = json.JSONEncoder().default, json.encoder.encode_basestring
        join = "".join

        def encode_fast(value):
            return join(make({}, default, text, None, ":", ",", False, False, False)(value, 0))

        try:
            sample = {"a": [1, 2.5, None, True, "\u00e9\n"], "b": {"c": -3}}
            if encode_fast(sample) == encode_text(sample) and encode_fast("x") == encode_text("x"):
                return encode_fast
        except Exception:
            pass
        return encode_text

    encode_text = fast_encoder()

    def encode(value, readback=False):
        # readback: a value journaled for this handler to read back inside
        # an answer (a step's, a state value), which wraps it in more
        # levels; one nested near the interpreter's limit could then not be
        # read, which from Python 3.12 on no recursion limit setting helps.
        # Such a value is refused like any that cannot be encoded; the
        # check costs a second encoding of a large, bracket-rich value
        # only, and only there (a function's output is read elsewhere).
        try:
            text = encode_text(value)
            if readback and len(text) > 1000 and text.count("[") + text.count("{") > 500:
                encode_text([[[[value]]]])
            try:
                return text.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: escape them instead
                return encode_ascii(value).encode("ascii")
        except (TypeError, ValueError, RecursionError) as exc:
            raise _Unserializable(exc)

    class _Unserializable(Exception):
        pass

    def failure(exc, terminal=None, message=None):
        f = {
            "type": type_name(exc),
            "message": message if message is not None else message_of(exc),
            "terminal": is_terminal(exc) if terminal is None else terminal,
        }
        # A TerminalError's code is the invocation's failure code (the
        # runtime checks its range); other exceptions carry none.
        code = terminal_code(exc) if f["terminal"] else None
        if code is not None:
            f["code"] = code
        return f

    def read_request():
        header = requests.read(5)
        if not header:
            sys.exit(0)  # the server closed the request pipe
        if len(header) < 5 or header[0] not in (ord("I"), ord("C"), ord("N")):
            sys.exit(3)
        (size,) = unpack_from(">I", header, 1)
        rid = requests.read(8)
        data = requests.read(size - 8) if size > 8 else b""
        if size < 8 or len(rid) < 8 or len(data) < size - 8:
            sys.exit(3)
        return header[0], rid, data

    def return_home(after):
        """Changes back to workdir; returns why it could not, or None."""
        try:
            os.chdir(workdir)
            return None
        except OSError as exc:
            return ("the worker could not return to its working directory %s after %s (%s: %s); "
                    "the function does not run until it can" % (workdir, after, type_name(exc), message_of(exc)))

    def not_json(name):
        raise ValueError("%s is not a JSON value" % name)

    # Strict JSON: Python's decoder alone also takes NaN and Infinity.
    input_decoder = json.JSONDecoder(parse_constant=not_json)

    n = 0
    # Why the worker is not in workdir (None: it is). The first invocation
    # starts there too, whatever the module's import did with os.chdir.
    lost_dir = return_home("the module's import")
    while True:
        request_id = b""
        kind, request_id, payload = read_request()
        invocation_env = {}
        if kind == ord("N"):
            # The per-invocation environment of the invocation whose 'I'
            # follows: names of the fixed allow-list only.
            try:
                invocation_env = loads(payload.decode("utf-8"))
                if not isinstance(invocation_env, dict) or not all(
                        k in invocation_env_names and isinstance(v, str) and "\0" not in v
                        for k, v in invocation_env.items()):
                    raise ValueError("not an allowed environment")
            except ValueError:
                sys.exit(3)
            kind, rid, payload = read_request()
            if rid != request_id:
                sys.exit(3)
        context = None
        if kind == ord("C"):
            # The step context of the invocation whose 'I' follows.
            try:
                context = loads(payload.decode("utf-8"))
                context = (str(context["address"]), str(context["token"]), context.get("fresh") is True,
                           context.get("ordered") is True)
            except (ValueError, KeyError, TypeError):
                sys.exit(3)
            kind, rid, payload = read_request()
            if rid != request_id:
                sys.exit(3)
        if kind != ord("I"):
            sys.exit(3)
        # A request the server wrote just before it died must not run: the
        # lifeline only becomes readable at its end, and the guardian may
        # not have struck yet.
        ready = lifeline.poll(0)
        if ready:
            for fd, _ in ready:
                if fd == life_fd:
                    os.killpg(0, signal.SIGKILL)
                    os._exit(1)
            for fd, events in ready:
                if events & select.POLLNVAL:  # fd 1 or 2, closed (see log_fd)
                    try:
                        os.dup2(log_fd, fd)
                    except OSError:
                        pass
        if lost_dir is not None:
            # Never run a function outside its working directory: each
            # invocation tries again, and fails retryably while it cannot.
            try:
                os.chdir(workdir)
                lost_dir = None
            except OSError:
                send_json(ord("E"), {"type": "WorkingDirectoryLost", "message": lost_dir, "terminal": False})
                continue

        n += 1
        os.environ = environ
        modules["fnbridge"] = api
        state["outputs"] = {}
        state["invocation"] = n
        outputs_path = ""
        invocation.set(n)
        error = None
        output = None
        discard = False
        ctx = None
        if context is not None:
            ctx = steps["ctx"] = _Steps(n, *context)
            environ["FNBRIDGE_CONTEXT"], environ["FNBRIDGE_CONTEXT_TOKEN"] = context[0], context[1]
        # Set for this invocation only; whatever the registration gave those
        # names comes back afterwards.
        saved_env = {}
        for name, value in invocation_env.items():
            saved_env[name] = environ.get(name)
            environ[name] = value
        state["env"] = invocation_env
        try:
            outputs_path = new_outputs_file(n)
            try:
                argument = input_decoder.decode(payload.decode("utf-8")) if payload else None
            except (ValueError, RecursionError) as exc:
                what = "nests too deeply" if isinstance(exc, RecursionError) else "is not valid JSON"
                error = {"type": "InvalidInput", "message": "input %s: %s" % (what, message_of(exc)),
                         "terminal": True, "code": 400}
            else:
                result = handler(argument) if takes_input else handler()
                if hasattr(result, "__await__"):
                    import asyncio

                    result = asyncio.run(_await(result))
                output = encode(result)
                if len(output) > max_output:
                    error = {"type": "OutputTooLarge", "terminal": True,
                             "message": "return value encodes to %d bytes of JSON, more than the %d allowed"
                             % (len(output), max_output)}
        except _Unserializable as wrapped:
            exc = wrapped.args[0]
            error = {"type": "UnserializableOutput", "terminal": True,
                     "message": "return value is not JSON-serializable: %s: %s" % (type_name(exc), message_of(exc))}
        except BaseException as exc:
            if not isinstance(exc, Suspended):
                print_traceback()
            error = failure(exc)
        if os.getpid() != worker_pid:
            flush_stdio()
            os._exit(0)  # a forked child returned from the handler
        invocation.set(0)
        state["invocation"] = 0
        state["env"] = {}
        for name, value in saved_env.items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value
        # The next invocation starts in the registered working directory
        # too, whatever this one did with os.chdir (a Bash invocation's
        # subshell gives it the same).
        lost_dir = return_home("an earlier invocation")
        if ctx is not None:
            steps["ctx"] = None
            # A thread of the function still inside a context call (a step
            # it runs in the background) when the function ended: no code
            # of an ended attempt may run on (beside its retry, or in the
            # invocations this worker serves next, where its late answers
            # would share the connection's buffers), and a thread cannot be
            # stopped, so Go ends this worker once it has the answer.
            in_flight = ctx.lock.locked()
            what, owner = ctx.op, ctx.owner
            keep_connection(ctx)
            environ.pop("FNBRIDGE_CONTEXT", None)
            environ.pop("FNBRIDGE_CONTEXT_TOKEN", None)
            environ.pop("FNBRIDGE_CONTEXT_AFTER", None)
            # An attempt that is over has no result: whatever the function
            # did after that (caught Suspended, returned) is discarded, and
            # a retry must follow, never a terminal failure.
            over = ctx.ended or ctx.broken
            if over is not None and (error is None or error["terminal"] or error["type"] == "fnbridge.Suspended"):
                error = {"type": "fnbridge.Suspended" if ctx.ended else "RuntimeError", "message": over,
                         "terminal": False}
            if in_flight and error is not None:
                error["discard"] = True
            elif in_flight:
                discard = True
                sys.stderr.write(
                    "fnbridge: the function returned while fnbridge.%s was still in flight in thread %s: "
                    "the worker is ended to stop it (no code of an ended attempt runs on), and nothing "
                    "more of it is journaled; wait for a background step before returning\n" % (what, owner))

        extra = []
        try:
            data = take_outputs_file(outputs_path)
            if data:
                extra.append((ord("F"), data))
        except Exception as exc:
            if error is None:
                error = failure(exc, terminal=False, message="reading FNBRIDGE_OUTPUTS: %s" % message_of(exc))
        if state["outputs"]:
            bad = lone_surrogate(state["outputs"])
            if bad is not None and error is None:
                # JSON would carry it as \udXXX, which the bridge reads as
                # U+FFFD: another value than the one set, so refused, as a
                # bound is.
                error = {"type": "InvalidOutputs", "terminal": True,
                         "message": "fnbridge.set_output: %s is not valid Unicode text (a lone surrogate): "
                                    "outputs are UTF-8" % bad}
            data = dumps(state["outputs"]).encode("ascii")
            if len(data) > max_outputs_file and error is None:
                error = {"type": "InvalidOutputs", "terminal": True,
                         "message": "fnbridge.set_output: outputs total %d bytes, more than the %d allowed "
                         "(far past the bounds on the outputs' count and sizes)"
                         % (len(data), max_outputs_file)}
            extra.append((ord("O"), data))

        log_barrier()
        if error is not None:
            if discard:
                # Found after the function returned (its outputs): the
                # thread in flight is stopped all the same.
                error["discard"] = True
            send_json(ord("E"), error)
            continue
        if discard:
            send(ord("D"))
        for kind, data in extra:
            send(kind, data)
        send(ord("R"), output)


async def _await(awaitable):
    return await awaitable


_fnbridge_worker()
