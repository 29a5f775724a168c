def square(request):
    with open("calls.log", "a") as f:
        f.write("call\n")
    return {"square": request["n"] * request["n"]}
