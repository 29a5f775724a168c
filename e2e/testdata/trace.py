import os
import fnbridge

# Echoes the trace context this invocation got, both ways a function can
# read it.
def context(request):
    return {"traceparent": fnbridge.traceparent(), "env": os.environ.get("TRACEPARENT"),
            "tracestate": os.environ.get("TRACESTATE"), "child": os.popen("printenv TRACEPARENT").read().strip()}
