# The Python counter object of TestKeyed and TestChaos (type:
# virtual_object), the twin of counter.sh: add (exclusive, durability:
# steps) adds its input, a whole number, to the key's "count" state and
# answers the value before and after; get (shared) reads it; whoami
# (durability: function) answers the key, and how a state read fails there.
import os

import fnbridge


def add(n):
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise fnbridge.TerminalError("add wants a whole number, got: %r" % (n,))
    before = fnbridge.state.get("count", 0)
    after = before + n
    fnbridge.state.set("count", after)
    return {"key": fnbridge.key(), "before": before, "after": after, "runtime": "python"}


def get(_):
    return {"key": fnbridge.key(), "count": fnbridge.state.get("count", 0)}


def whoami(_):
    try:
        fnbridge.state.get("count")
        error = None
    except Exception as e:
        error = "%s: %s" % (type(e).__name__, e)
    return {"env": os.environ.get("FNBRIDGE_KEY"), "module": fnbridge.key(), "state_error": error}
