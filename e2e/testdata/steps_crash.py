# A 4-step durable function (durability: steps). Each step appends a line
# to steps_py.log when it executes; step 3 then blocks until the file
# "release" exists (the e2e test SIGKILLs the bridge meanwhile). A recorded
# step is replayed, not executed, so its line is never written again.
import os
import time

import fnbridge

LOG = "steps_py.log"


def _mark(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


def _step(n, order):
    _mark("step%d %d" % (n, os.getpid()))
    if n == 3:
        deadline = time.time() + 60
        while not os.path.exists("release"):
            if time.time() > deadline:
                raise RuntimeError("step 3: no release file within 60s")
            time.sleep(0.02)
    return "%s-%d-%d" % (order, n, os.getpid())


def four(request):
    order = request["order"]
    results = [fnbridge.run("step%d" % n, _step, n, order) for n in (1, 2, 3, 4)]
    return {"order": order, "steps": results}
