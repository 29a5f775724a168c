"""Example Python handler for fnbridge: greeter.greet(input) -> JSON value."""
import logging
import os


def greet(request):
    # The decoded JSON input arrives as a Python value; print/logging go to
    # the bridge's logs, never into the output.
    name = request.get("name", "world") if isinstance(request, dict) else str(request)
    logging.getLogger("greeter").info("greeting %s", name)
    return {"greeting": f"{os.environ.get('GREETING', 'Hello')}, {name}!", "runtime": "python"}
