"""Example workflow for fnbridge (type: workflow, durability: steps).

run is the workflow: it executes once per signup id, creates the account,
then waits for a person's approval through an awakeable. The awakeable's id
is in the workflow's state, where the shared handler status shows it; the
approver answers through Restate's ingress:

    curl -X POST localhost:8080/restate/awakeables/<id>/resolve \\
         -H 'content-type: application/json' -d '{"by":"alice"}'

(or .../reject with a reason). While it waits longer than suspend_after the
invocation is suspended: no worker and no process is held.
"""
import logging

import fnbridge

log = logging.getLogger("signup")


def create_account(email):
    # A real one would call an API; as a step it runs once, and a retry
    # of the workflow gets this recorded result back.
    return "acct-" + email.split("@")[0]


def ask_for_approval(email, approval_id):
    log.warning("approve %s: POST /restate/awakeables/%s/resolve", email, approval_id)
    return True


def run(request):
    email = request["email"]
    account = fnbridge.run("create account", create_account, email)
    approval_id, approval = fnbridge.awakeable()
    fnbridge.state.set("stage", "waiting for approval")
    fnbridge.state.set("approval", approval_id)
    fnbridge.run("ask for approval", ask_for_approval, email, approval_id)
    try:
        decision = approval.result()  # raises TerminalError when rejected
    except fnbridge.TerminalError as e:
        fnbridge.state.set("stage", "rejected")
        raise fnbridge.TerminalError("signup of %s rejected: %s" % (email, e))
    fnbridge.state.set("stage", "approved")
    return {"signup": fnbridge.key(), "account": account, "approved_by": decision.get("by")}


def status(_):
    # A shared handler: it answers while run waits.
    return {"stage": fnbridge.state.get("stage", "starting"), "approval": fnbridge.state.get("approval")}
