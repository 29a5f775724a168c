# The Python gate object of TestKeyed (type: virtual_object, durability:
# steps), the twin of gate.sh: hold (exclusive) writes "phase" and the id
# of an awakeable it then waits on; peek (shared) reads both while hold
# waits; poke (shared) tries to write state and answers the error.
import fnbridge


def hold(_):
    fnbridge.state.set("phase", "holding")
    awakeable_id, future = fnbridge.awakeable()
    fnbridge.state.set("gate", awakeable_id)
    value = future.result()
    fnbridge.state.set("phase", "released")
    return {"released_with": value}


def peek(_):
    return {"phase": fnbridge.state.get("phase"), "gate": fnbridge.state.get("gate")}


def poke(_):
    try:
        fnbridge.state.set("phase", "poked")
    except fnbridge.TerminalError as e:
        return {"error": str(e), "type": type(e).__name__, "code": getattr(e, "code", None)}
    return {"error": None}
