import os
import time

# The first execution outlives any shutdown deadline; a retry is quick.
def slow(request):
    with open("calls.log", "a") as f:
        f.write("started %d\n" % os.getpid())
    with open("calls.log") as f:
        first = sum(1 for line in f if line.startswith("started")) == 1
    if first:
        time.sleep(120)
    with open("calls.log", "a") as f:
        f.write("done %d\n" % os.getpid())
    return {"job": request["job"], "pid": os.getpid()}
