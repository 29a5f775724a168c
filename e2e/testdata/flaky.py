def flaky(request):
    with open("calls.log", "a") as f:
        f.write("call\n")
    with open("calls.log") as f:
        n = sum(1 for line in f if line.strip())
    if n <= 2:
        raise RuntimeError("transient failure %d" % n)
    return {"order": request["order"], "attempt": n}
