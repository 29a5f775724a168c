# Durable calls between handlers (durability: steps). The input names the
# peer service ("peer") where a handler calls another one.
import contextvars
import threading
import time

import fnbridge


def _log(line):
    with open("calls_py.log", "a") as f:
        f.write(line + "\n")


def _square(n):
    _log("square %d" % n)
    return n * n


def square(request):
    return {"square": fnbridge.run("square", _square, request["n"]), "lang": "python"}


def call_sh(request):
    doubled = fnbridge.call(request["peer"], "double", {"n": request["n"]})
    return {"from_bash": doubled}


def refuse(request):
    _log("refuse")
    raise fnbridge.TerminalError("python refuses order %s" % request["order"], code=422)


def through(request):
    # The callee's terminal failure raises TerminalError here; uncaught, it
    # ends this invocation terminally too.
    fnbridge.call(request["peer"], "refuse", request)
    return {"unexpected": "the call returned"}


def send_later(request):
    t0 = fnbridge.run("t0", time.time)
    callee = fnbridge.send(request["peer"], "stamp", {"tag": request["tag"]}, delay=request["delay"])
    return {"t0": t0, "callee": callee}


def stamp(request):
    now = time.time()
    with open("stamp.log", "a") as f:
        f.write("%s %f\n" % (request["tag"], now))
    return {"tag": request["tag"], "at": now}


def fanout(request):
    doubled = fnbridge.call_async(request["peer"], "double", {"n": 5})
    squared = fnbridge.call_async(request["self"], "square", {"n": 4})
    timer = fnbridge.sleep_async(60)
    first = fnbridge.wait_any(timer, doubled)
    return {
        "first": "call" if first is doubled else "timer",
        "first_value": first.result(),
        "all": fnbridge.wait_all(doubled, squared),
    }


def threads(request):
    # A context call from a second thread while this one's step is in
    # flight must be refused with a clear error, not journaled.
    def step():
        box = {}

        def other():
            try:
                fnbridge.random()
                box["error"] = None
            except RuntimeError as e:
                box["error"] = str(e)

        t = threading.Thread(target=contextvars.copy_context().run, args=(other,))
        t.start()
        t.join(30)
        return box.get("error", "the thread did not finish")

    return {"error": fnbridge.run("outer", step)}
