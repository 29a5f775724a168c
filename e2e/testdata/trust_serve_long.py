import os
import time

def work(request):
    with open("calls.log", "a") as f:
        f.write("started %d\n" % os.getpid())
    time.sleep(request["seconds"])
    return {"slept": request["seconds"]}
