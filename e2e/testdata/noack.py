import fnbridge


def steps(_):
    # One step, whose result Restate never acknowledges in the test that
    # runs it: the function waits in fnbridge.run until its timeout.
    fnbridge.run("a", lambda: 1)
    return "unreachable"
