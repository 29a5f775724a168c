# A durable sleep between two steps (durability: steps): the sleep's length
# comes from the input. Each step appends "<tag> <phase>" to sleep.log.
import time

import fnbridge


def _mark(tag, phase):
    with open("sleep.log", "a") as f:
        f.write("%s %s\n" % (tag, phase))
    return time.time()


def nap(request):
    tag = request["tag"]
    before = fnbridge.run("before", _mark, tag, "before")
    fnbridge.sleep(request["seconds"])
    after = fnbridge.run("after", _mark, tag, "after")
    return {"tag": tag, "slept": after - before}
