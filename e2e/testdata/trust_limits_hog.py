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
