# A bag of state for TestKeyed's lazy-state case (type: virtual_object,
# durability: steps): fill writes three entries; read reads them back, a
# missing one with its default, then writes one more and reads it in the
# same attempt, and lists the keys.
import fnbridge


def fill(request):
    for name, value in sorted(request.items()):
        fnbridge.state.set(name, value)
    return {"filled": sorted(request)}


def read(_):
    s = fnbridge.state
    got = {name: s.get(name) for name in ("alpha", "beta", "gamma")}
    got["missing"] = s.get("missing", "default")
    s.set("delta", {"late": True})
    got["delta"] = s.get("delta")
    return {"values": got, "keys": s.keys()}
