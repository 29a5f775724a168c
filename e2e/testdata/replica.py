# The handler of e2e/replicas_test.go: it holds its registration for the
# requested time, so both replicas' invocations overlap, and names the
# worker process that ran it.
import os, time


def work(inp):
    time.sleep(float(inp["sleep"]))
    return {"n": inp["n"], "pid": os.getpid()}
