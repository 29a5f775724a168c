# The gated handler of e2e/trust_wire_test.go: it says it started (a
# marker file named by its input) and returns once the test removes the
# gate file, so the test holds invocation streams open for as long as it
# needs, without timing guesses.
import os, time


def gated(x):
    open("started-%s" % x, "w").close()
    deadline = time.monotonic() + 30
    while os.path.exists("gate") and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"gated": x}
