import time

def busy(request):
    with open("calls.log", "a") as f:
        f.write("%s\n" % request["n"])
    time.sleep(1)
    return {"n": request["n"]}
