import os
import fnbridge

def greet(request):
    with open("calls_py.log", "a") as f:
        f.write("greet\n")
    fnbridge.set_output("greeted", request["name"])
    return {"greeting": os.environ["GREETING"] + ", " + request["name"], "lang": "python"}
