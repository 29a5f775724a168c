import os
import sys

import venvlib  # only the test's virtual environment has it


def run(request):
    return {
        "greeting": venvlib.greet(request["name"]),
        "prefix": sys.prefix,
        "virtual_env": os.environ.get("VIRTUAL_ENV"),
        "path0": os.environ["PATH"].split(":")[0],
    }
