def handle(input):
    return {"command": input["command"], "upper": input["command"].upper(), "keys": sorted(input)}
