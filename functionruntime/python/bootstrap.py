# fnbridge python worker bootstrap. It is embedded in the fnbridge binary and
# run as:
#
#   python3 -I -u -c <this file> MODULE FUNCTION WORKDIR MARKER MAX_OUTPUT
#
# The wire protocol is described in the Go package documentation
# (functionruntime/python). Everything lives inside _fnbridge_worker so the
# __main__ namespace stays clean for handlers that inspect it.


def _fnbridge_worker():
    import fcntl
    import json
    import os
    import signal
    import struct
    import sys
    import traceback
    import types

    module_name, function_name, workdir, marker, max_output = sys.argv[1:6]
    marker = marker.encode("ascii") + b"\n"
    max_output = int(max_output)
    outputs_path = os.environ.get("FNBRIDGE_OUTPUTS", "")
    max_outputs_file = 1 << 20
    max_message = 8192

    # Close whatever descriptors the server may have leaked to us, then move
    # the protocol pipes off fds 3 and 4 and make them close-on-exec, so
    # neither the handler's own files nor its children ever hold them.
    os.closerange(6, os.sysconf("SC_OPEN_MAX"))
    req_fd = fcntl.fcntl(3, fcntl.F_DUPFD_CLOEXEC, 64)
    resp_fd = fcntl.fcntl(4, fcntl.F_DUPFD_CLOEXEC, 64)
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

    # print() goes to the logs, never to the protocol.
    sys.stdout = sys.stderr

    def send(kind, payload=b""):
        data = memoryview(bytes((kind,)) + struct.pack(">I", len(payload)) + payload)
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
    state = {"outputs": {}}
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

    def take_outputs_file():
        # The outputs file is emptied after every invocation, so each one
        # starts with a fresh, empty file.
        if not outputs_path:
            return b""
        try:
            size = os.stat(outputs_path).st_size
        except FileNotFoundError:
            open(outputs_path, "wb").close()
            return b""
        if size == 0:
            return b""
        with open(outputs_path, "r+b") as f:
            data = f.read(max_outputs_file + 1)
            f.truncate(0)
        return data

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

    while True:
        header = requests.read(5)
        if not header:
            sys.exit(0)  # the server closed the request pipe
        if len(header) < 5 or header[0] != ord("I"):
            sys.exit(3)
        (size,) = struct.unpack(">I", header[1:])
        payload = requests.read(size)
        if len(payload) < size:
            sys.exit(3)

        state["outputs"] = {}
        error = None
        output = None
        try:
            try:
                argument = json.loads(payload) if payload else None
            except ValueError as exc:
                error = {"type": "InvalidInput", "message": "input is not valid JSON: %s" % message_of(exc),
                         "terminal": True}
            else:
                result = handler(argument)
                if hasattr(result, "__await__"):
                    import asyncio

                    result = asyncio.run(_await(result))
                output = encode(result)
                if len(output) > max_output:
                    error = {"type": "OutputTooLarge", "terminal": False,
                             "message": "return value encodes to %d bytes of JSON, more than the %d allowed"
                             % (len(output), max_output)}
        except _Unserializable as wrapped:
            exc = wrapped.args[0]
            error = failure(exc, terminal=False,
                            message="return value is not JSON-serializable: %s" % message_of(exc))
        except BaseException as exc:
            print_traceback()
            error = failure(exc)

        extra = []
        try:
            data = take_outputs_file()
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
