# A 3-step durable function (durability: steps) with a durable sleep
# between steps 1 and 2, run by a remote `bridge runtime serve`. Each step
# appends "<tag> <step> <pid> <ancestor pids>" to remote_py.log when it
# executes (a replayed step writes nothing), so the test can count
# executions and see which process tree ran them.
import os

import fnbridge

LOG = "remote_py.log"


def _ancestors():
    out, pid = [], os.getpid()
    while pid > 1:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
        out.append(str(pid))
    return ",".join(out) or "-"


def _step(step, tag):
    with open(LOG, "a") as f:
        f.write("%s %s %d %s\n" % (tag, step, os.getpid(), _ancestors()))
    return "%s-%s-%d" % (tag, step, os.getpid())


def three(request):
    tag = request["tag"]
    s1 = fnbridge.run("step1", _step, "step1", tag)
    fnbridge.sleep(request["seconds"])
    s2 = fnbridge.run("step2", _step, "step2", tag)
    s3 = fnbridge.run("step3", _step, "step3", tag)
    return {"tag": tag, "steps": [s1, s2, s3]}
