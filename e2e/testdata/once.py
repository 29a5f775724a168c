import uuid

def once(request):
    with open("calls.log", "a") as f:
        f.write("once\n")
    return {"order": request["order"], "nonce": uuid.uuid4().hex}
