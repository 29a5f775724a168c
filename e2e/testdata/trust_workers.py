# Handlers of e2e/trust_workers_test.go: each tries to get a result or an
# output attributed to an invocation it does not belong to, or fails in a
# way a retry can only repeat. Inputs they do not dispatch on are echoed,
# with the worker's PID, so a test sees the next invocation's own answer.
import os, struct, threading
import fnbridge


def response_fd():
    # The worker's response pipe as a handler finds it: the one pipe above
    # stderr this process holds write-only, other than its copy of the log
    # pipe (stdout's).
    log = os.readlink("/proc/self/fd/1")
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd < 3:
            continue
        try:
            target = os.readlink("/proc/self/fd/%d" % fd)
            if not target.startswith("pipe:") or target == log:
                continue
            with open("/proc/self/fdinfo/%d" % fd) as f:
                flags = int([l for l in f if l.startswith("flags:")][0].split()[1], 8)
        except (OSError, IndexError):
            continue
        if flags & os.O_ACCMODE == os.O_WRONLY:
            return fd
    raise RuntimeError("no response pipe found")


def fork(event):
    if event == "fork":
        pid = os.fork()
        if pid == 0:
            return {"in": event, "from": "child"}
        os.waitpid(pid, 0)
        return {"in": event, "from": "parent"}
    return {"in": event, "pid": os.getpid()}


def forge(event):
    # While the gate file exists, every attempt writes a response frame
    # with a guessed (random) request id to the worker's pipe before
    # returning.
    if event == "guess" and os.path.exists("forge-gate"):
        with open("forge-attempts", "a") as f:
            f.write("%d\n" % os.getpid())
        payload = os.urandom(8) + b'"forged"'
        os.write(response_fd(), b"R" + struct.pack(">I", len(payload)) + payload)
    return {"in": event, "pid": os.getpid()}


go = threading.Event()
done = threading.Event()
late_errors = []


def late_outputs(event):
    if event == "start":
        path = os.environ["FNBRIDGE_OUTPUTS"]
        opened = open(path, "a")
        fnbridge.set_output("own_start", "1")

        def late():
            go.wait(20)
            opened.write("late_open=1\n")
            opened.flush()
            with open(path, "a") as f:
                f.write("late_path=1\n")
            try:
                fnbridge.set_output("late_api", "1")
            except RuntimeError as exc:
                late_errors.append(str(exc))
            done.set()

        threading.Thread(target=late, daemon=True).start()
        return "started"
    if event == "trigger":
        go.set()
        done.wait(20)
        fnbridge.set_output("own_trigger", "1")
        return late_errors
    return event


def echo(x):
    return {"echo": x}


def unserializable(_):
    with open("unserializable-calls", "a") as f:
        f.write("1\n")
    return {"a set": {1, 2}}
