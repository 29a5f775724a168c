import os

def work(request):
    with open("calls.log", "a") as f:
        f.write("%d\n" % os.getpid())
    return {"order": request["order"], "pid": os.getpid()}
