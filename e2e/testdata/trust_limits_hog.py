import os
import time


def hog(x):
    """Allocates until the memory limit stops it."""
    chunks = []
    while True:
        chunks.append(bytearray(8 << 20))


def bomb(x):
    """Forks at most 500 sleepers: bounded even without a process limit."""
    kids = []
    for _ in range(500):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    return {"forked": len(kids)}


def hoard(x):
    """Four children of 48 MiB each: every one is under the per-process
    rlimit, together they are over the worker's memory cgroup."""
    kids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            data = b"x" * (48 << 20)
            time.sleep(5)
            os._exit(len(data) and 0)
        kids.append(pid)
    statuses = [os.waitpid(pid, 0)[1] for pid in kids]
    if any(os.WIFSIGNALED(s) for s in statuses):
        raise RuntimeError("a child was killed")
    return {"statuses": statuses}
