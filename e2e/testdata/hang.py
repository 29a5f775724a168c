import os
import time

# Records "started PID" before it hangs, so a test knows which worker to
# watch; every caller cuts it short (timeout, cancellation).
def hang(request):
    with open("calls.log", "a") as f:
        f.write("started %d\n" % os.getpid())
    time.sleep(120)
    return "never"
