import os
import time

def busy(request):
    # Holds its registration until the test has seen the others refused
    # (it creates "release"), however slow the machine.
    with open("calls.log", "a") as f:
        f.write("%s\n" % request["n"])
    while not os.path.exists("release"):
        time.sleep(0.01)
    return {"n": request["n"]}
