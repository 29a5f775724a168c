# fnbridge python worker bootstrap. It is embedded in the fnbridge binary and
# run as:
#
#   python3 -I -u -c <this file> MODULE FUNCTION WORKDIR MARKER MAX_OUTPUT
#
# The wire protocol is described in the Go package documentation
# (functionruntime/python). Everything lives inside _fnbridge_worker so the
# __main__ namespace stays clean for handlers that inspect it.


def _fnbridge_worker():
    import contextvars
    import fcntl
    import json
    import os
    import select
    import signal
    import struct
    import sys
    import traceback
    import types

    module_name, function_name, workdir, marker, max_output = sys.argv[1:6]
    marker = marker.encode("ascii") + b"\n"
    max_output = int(max_output)
    outputs_base = os.environ.get("FNBRIDGE_OUTPUTS", "")
    max_outputs_file = 1 << 20
    max_message = 8192

    # Close whatever descriptors the server may have leaked to us, then move
    # the protocol pipes and a copy of the lifeline off fds 3 to 5 and make
    # them close-on-exec, so neither the handler's own files nor its
    # children ever hold them.
    os.closerange(6, os.sysconf("SC_OPEN_MAX"))
    req_fd = fcntl.fcntl(3, fcntl.F_DUPFD_CLOEXEC, 64)
    resp_fd = fcntl.fcntl(4, fcntl.F_DUPFD_CLOEXEC, 64)
    life_fd = fcntl.fcntl(5, fcntl.F_DUPFD_CLOEXEC, 64)
    os.close(3)
    os.close(4)

    # The guardian (see Go package proc): fd 5 is the lifeline, whose only
    # write end the server holds, so reading it ends exactly when the server
    # is gone; the guardian then kills this whole process group, the
    # handler's subprocesses included. It is a process of its own, so a
    # handler holding the GIL cannot delay it; it keeps nothing else open
    # and dies of the group SIGTERM like the rest. /bin/sh costs a few
    # hundred KiB where a forked copy of this interpreter would keep its
    # whole heap alive; the copy is only the fallback.
    try:
        os.posix_spawn(
            "/bin/sh",
            ["fnbridge-python-guardian", "-c", "read x <&5; kill -9 0"],
            {},
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0),
                (os.POSIX_SPAWN_DUP2, 0, 1),
                (os.POSIX_SPAWN_DUP2, 0, 2),
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

    # A child a handler forks (os.fork, multiprocessing) shares this loop's
    # code but must never speak for it: it loses the protocol pipes at once,
    # and one that returns from the handler exits instead of reading the
    # next request or answering this one (see the end of the loop).
    worker_pid = os.getpid()

    def lose_pipes():
        for fd in (req_fd, resp_fd, life_fd):
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
        data = memoryview(bytes((kind,)) + struct.pack(">I", len(request_id) + len(payload)) + request_id + payload)
        while data:
            data = data[os.write(resp_fd, data):]

    def send_json(kind, obj):
        send(kind, json.dumps(obj, ensure_ascii=True).encode("ascii"))

    def flush_stdio():
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass

    def log_barrier():
        # Everything printed so far is now on the log pipe; the marker tells
        # the Go side it has seen all of it.
        flush_stdio()
        os.write(2, marker)

    def type_name(exc):
        cls = type(exc)
        mod = getattr(cls, "__module__", "") or ""
        name = getattr(cls, "__qualname__", cls.__name__)
        if mod in ("builtins", "__main__"):
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

    def print_traceback():
        try:
            traceback.print_exc()
        except Exception:
            pass

    # The fnbridge module handlers import. It is injected before the handler
    # module is imported, so it wins over any file of the same name.
    # set_output belongs to the invocation whose context it runs in (the
    # handler, its coroutines, asyncio.to_thread, contextvars.copy_context):
    # a thread that outlives its invocation cannot add to a later one.
    state = {"outputs": {}, "invocation": 0}
    invocation = contextvars.ContextVar("fnbridge_invocation", default=0)
    api = types.ModuleType("fnbridge")
    api.__doc__ = "fnbridge handler API: TerminalError and set_output."

    class TerminalError(Exception):
        """Raise to fail the invocation without retries."""

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
    sys.modules["fnbridge"] = api

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
                    raise ImportError(
                        "module %r is %s, outside the working directory %s" % (sub, real, root), name=sub
                    )

    # Load the handler once.
    sys.path.insert(0, workdir)
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
        path = "%s.%d" % (outputs_base, n)
        os.environ["FNBRIDGE_OUTPUTS"] = path
        return path

    def take_outputs_file(path):
        if not path:
            return b""
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return b""
        with f:
            os.unlink(path)
            return f.read(max_outputs_file + 1)

    def encode(value):
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            try:
                return text.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: escape them instead
                return json.dumps(value, allow_nan=False, separators=(",", ":")).encode("ascii")
        except (TypeError, ValueError, RecursionError) as exc:
            raise _Unserializable(exc)

    class _Unserializable(Exception):
        pass

    def failure(exc, terminal=None, message=None):
        return {
            "type": type_name(exc),
            "message": message if message is not None else message_of(exc),
            "terminal": is_terminal(exc) if terminal is None else terminal,
        }

    n = 0
    while True:
        request_id = b""
        header = requests.read(5)
        if not header:
            sys.exit(0)  # the server closed the request pipe
        if len(header) < 5 or header[0] != ord("I"):
            sys.exit(3)
        (size,) = struct.unpack(">I", header[1:])
        request_id = requests.read(8)
        payload = requests.read(size - 8) if size > 8 else b""
        if size < 8 or len(request_id) < 8 or len(payload) < size - 8:
            sys.exit(3)
        # A request the server wrote just before it died must not run: the
        # lifeline only becomes readable at its end, and the guardian may
        # not have struck yet.
        if lifeline.poll(0):
            os.killpg(0, signal.SIGKILL)
            os._exit(1)

        n += 1
        state["outputs"] = {}
        state["invocation"] = n
        outputs_path = ""
        invocation.set(n)
        error = None
        output = None
        try:
            outputs_path = new_outputs_file(n)
            try:
                argument = json.loads(payload) if payload else None
            except (ValueError, RecursionError) as exc:
                what = "nests too deeply" if isinstance(exc, RecursionError) else "is not valid JSON"
                error = {"type": "InvalidInput", "message": "input %s: %s" % (what, message_of(exc)),
                         "terminal": True}
            else:
                result = handler(argument)
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
            print_traceback()
            error = failure(exc)
        if os.getpid() != worker_pid:
            flush_stdio()
            os._exit(0)  # a forked child returned from the handler
        invocation.set(0)
        state["invocation"] = 0

        extra = []
        try:
            data = take_outputs_file(outputs_path)
            if data:
                extra.append((ord("F"), data))
        except Exception as exc:
            if error is None:
                error = failure(exc, terminal=False, message="reading FNBRIDGE_OUTPUTS: %s" % message_of(exc))
        if state["outputs"]:
            data = json.dumps(state["outputs"], ensure_ascii=True).encode("ascii")
            if len(data) > max_outputs_file and error is None:
                error = {"type": "InvalidOutputs", "terminal": False,
                         "message": "fnbridge.set_output: outputs total %d bytes, more than the %d allowed"
                         % (len(data), max_outputs_file)}
            extra.append((ord("O"), data))

        log_barrier()
        if error is not None:
            send_json(ord("E"), error)
            continue
        for kind, data in extra:
            send(kind, data)
        send(ord("R"), output)


async def _await(awaitable):
    return await awaitable


_fnbridge_worker()
