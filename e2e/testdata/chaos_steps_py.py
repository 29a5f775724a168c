# The steps-mode Python function of TestChaos (durability: steps): three
# journaled steps, each appending "start ID STEP PID NS TOKEN" to
# CHAOS_STEPS_MARKER when it begins and "end ID STEP PID NS TOKEN" when its
# work is done (O_APPEND, one write per line). A step's value names its
# execution (TOKEN); a recorded step returns its journaled value without
# running, so the output names the execution of each step Restate journaled.
import os, time

import fnbridge

MARKER = os.environ["CHAOS_STEPS_MARKER"]
STEPS = ("s1", "s2", "s3")


def _append(line):
    fd = os.open(MARKER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _step(cid, step, k, n, sleep):
    pid, t = os.getpid(), time.time_ns()
    token = "%d-%d" % (pid, t)
    _append("start %s %s %d %d %s\n" % (cid, step, pid, t, token))
    time.sleep(sleep)
    _append("end %s %s %d %d %s\n" % (cid, step, pid, time.time_ns(), token))
    return {"part": n * k, "exec": token}


def work(inp):
    cid, n, sleep = inp["id"], inp["n"], float(inp["sleep"]) / len(STEPS)
    parts, execs = 0, []
    for k, step in enumerate(STEPS, 1):
        v = fnbridge.run(step, _step, cid, step, k, n, sleep)
        parts += v["part"]
        execs.append(v["exec"])
    return {"id": cid, "total": parts, "runtime": "python", "steps": execs}
