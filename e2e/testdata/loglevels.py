import logging
import sys


def run(request):
    print("a plain line")                      # info
    logging.warning("low disk")                # WARNING:root:low disk: warn
    print('{"level": "error", "msg": "a JSON error", "code": 7}', file=sys.stderr)
    return {"ok": True}
