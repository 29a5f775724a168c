def echo(x):
    return {"echo": x}
