import os
import time

def slow(request):
    with open("calls.log", "a") as f:
        f.write("started %d\n" % os.getpid())
    time.sleep(1)
    with open("calls.log", "a") as f:
        f.write("done %d\n" % os.getpid())
    return {"job": request["job"], "pid": os.getpid()}
