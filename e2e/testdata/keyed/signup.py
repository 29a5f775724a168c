# The Python side of the Signup workflow of TestKeyed (type: workflow,
# durability: steps). run, the workflow, records its stage in state and
# waits on the durable promise "approval", which a shared handler resolves
# (approve in signup.sh) or rejects (deny); status (shared) reads the stage
# and peeks at the promise without waiting.
import fnbridge


def run(request):
    fnbridge.state.set("stage", "waiting")
    try:
        approval = fnbridge.promise("approval").get()
    except fnbridge.TerminalError as e:
        fnbridge.state.set("stage", "denied")
        raise fnbridge.TerminalError("signup of %s denied: %s" % (request["email"], e))
    fnbridge.state.set("stage", "done")
    return {"id": fnbridge.key(), "email": request["email"], "approved_by": approval["by"]}


def status(_):
    return {"stage": fnbridge.state.get("stage"), "approval": fnbridge.promise("approval").peek()}
