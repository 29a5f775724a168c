# An awakeable awaited by a Python function (durability: steps), for
# TestKeyed. Every attempt appends a line to TAG.attempts (code outside
# steps runs again on each attempt); the step "announce" appends the
# awakeable's id to TAG.id once, for the test to resolve or reject it
# through Restate's ingress. A rejection (or a cancellation) raises
# TerminalError, which the function answers with. stop cancels the
# invocation its input names. call_park calls the Bash park of the
# service its input names and waits for it: cancelling call_park cancels
# that call too.
import os

import fnbridge


def _append(path, text):
    with open(path, "a") as f:
        f.write(text + "\n")
    return True


def park(request):
    tag = request["tag"]
    with open(tag + ".attempts", "a") as f:
        f.write("attempt %d\n" % os.getpid())
    awakeable_id, future = fnbridge.awakeable()
    fnbridge.run("announce", _append, tag + ".id", awakeable_id)
    try:
        value = future.result()
    except fnbridge.TerminalError as e:
        return {"rejected": str(e), "type": type(e).__name__, "code": getattr(e, "code", None)}
    return {"value": value}


def stop(request):
    # Cancels another invocation (a Restate CANCEL signal, journaled).
    fnbridge.cancel(request["id"])
    return {"cancelled": request["id"]}


def call_park(request):
    try:
        return {"child": fnbridge.call(request["service"], "sh", {"tag": request["tag"]})}
    except fnbridge.TerminalError as e:
        return {"parent": str(e), "code": getattr(e, "code", None)}
