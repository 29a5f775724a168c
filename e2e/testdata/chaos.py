import os, time

MARKER = os.environ["CHAOS_MARKER"]


def _append(line):
    fd = os.open(MARKER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def work(inp):
    cid, pid, t = inp["id"], os.getpid(), time.time_ns()
    token = "%d-%d" % (pid, t)
    _append("start %s %d %d %s\n" % (cid, pid, t, token))
    time.sleep(float(inp["sleep"]))
    _append("end %s %d %d %s\n" % (cid, pid, time.time_ns(), token))
    return {"id": cid, "double": inp["n"] * 2, "runtime": "python", "exec": token}
