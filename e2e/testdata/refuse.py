import fnbridge

def refuse(request):
    with open("calls_py.log", "a") as f:
        f.write("call\n")
    raise fnbridge.TerminalError("order %s not found" % request["order"])

def refuse_code(request):
    with open("calls_code.log", "a") as f:
        f.write("call\n")
    raise fnbridge.TerminalError("order %s is gone" % request["order"], code=410)
