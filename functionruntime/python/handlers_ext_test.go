package python_test

import (
	"strings"

	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
)

// handlerPy is the test module h.py. Each function serves one behaviour
// under test; lifecycle dispatches on its input (see
// adaptertest.Adapter.Lifecycle).
const handlerPy = `
import json, logging, os, subprocess, sys, time
import fnbridge

print("importing h.py", file=sys.stderr)

calls = 0

def echo(event):
    return {"got": event}

def count(event):
    global calls
    calls += 1
    return calls

def vanish(event):
    if event == "remove":
        import shutil
        shutil.rmtree(os.getcwd())
        return "gone"
    return "here" if os.getcwd() == sys.path[0] else os.getcwd()

def env(event):
    return dict(os.environ)

def cwd(event):
    out = {"cwd": os.getcwd(), "path0": sys.path[0]}
    if event:
        os.chdir(event)  # the next invocation must not start there
    return out

def chatty(event):
    print("hello from print")
    logging.warning("hello from logging")
    print(json.dumps({"level": "ERROR", "msg": "a structured line", "attempt": 2}), file=sys.stderr)
    sys.stderr.write("partial line without newline")
    return "quiet"

def boom(event):
    raise ValueError("bad value: %s" % event)

def terminal(event):
    raise fnbridge.TerminalError("do not retry me")

def terminal_code(event):
    raise fnbridge.TerminalError("no such order", code=404)

class TerminalError(Exception):
    pass

def custom_terminal(event):
    raise TerminalError("my own terminal class")

class SDKTerminalError(TerminalError):
    # As the Restate Python SDK's: the code is status_code.
    def __init__(self, message, status_code=500):
        super().__init__(message)
        self.status_code = status_code

def sdk_terminal(event):
    raise SDKTerminalError("not found", status_code=404)

def unserializable(event):
    return {"s": {1, 2}}

def nan(event):
    return float("nan")

def outputs(event):
    if event.get("set"):
        fnbridge.set_output("from_api", "api")
        fnbridge.set_output("both", "api wins")
    if event.get("file") is not None:
        with open(os.environ["FNBRIDGE_OUTPUTS"], "a") as f:
            f.write(event["file"])
    return "ok"

def outputs_file(event):
    with open(os.environ["FNBRIDGE_OUTPUTS"], "a") as f:
        f.write(event)
    return "ok"

def huge_outputs(event):
    for i in range(2048):
        fnbridge.set_output("k%d" % i, "v" * 1024)
    return "too much"

def bad_output_value(event):
    fnbridge.set_output("n", 3)

def bigline(event):
    sys.stderr.write("x" * event + "\n")
    sys.stderr.flush()
    return "done"

def unicode(event):
    return {"text": "héllo ✓", "in": event}

async def coro(event):
    return {"async": event}

def lifecycle(event):
    if event == "pid":
        return os.getpid()
    if event == "pgid":
        return os.getpgid(0)
    if event == "crash":
        os._exit(3)
    if event == "sigkill":
        os.kill(os.getpid(), 9)
        time.sleep(10)
    if event == "spawn":
        child = subprocess.Popen(["sleep", "300"])
        return child.pid
    if event == "spawn_inherit":
        child = subprocess.Popen(["sleep", "300"], close_fds=False)
        return child.pid
    if event == "spawn_orphan":
        # a grandchild whose parent exits at once: it is orphaned right away
        out = subprocess.check_output(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
        return int(out)
    if event == "sleep":
        open("sleeping", "w").close()  # tells the test the handler is running
        time.sleep(60)
        return "slept"
    if event == "ignore_term":
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open("sleeping", "w").close()
        time.sleep(300)
    return event
`

// brokenModules are handler modules that cannot be loaded, with the text
// the registration's fatal error must carry.
var brokenModules = []adaptertest.StartFailure{
	broken("syntax error", "bad.handle", "bad.py", "def handle(event)\n    return 1\n", "SyntaxError"),
	broken("missing module", "nosuchmodule.handle", "", "", "ModuleNotFoundError: No module named 'nosuchmodule'"),
	broken("missing function", "h.nosuch", "h.py", "def handle(e):\n    return e\n", "has no attribute 'nosuch'"),
	broken("not callable", "h.handle", "h.py", "handle = 42\n", "h.handle is not callable (it is a int)"),
	broken("raises at import", "h.handle", "h.py", "raise RuntimeError('config missing')\ndef handle(e): pass\n", "RuntimeError: config missing"),
	broken("exits at import", "h.handle", "h.py", "import sys\nsys.exit(7)\n", "SystemExit: 7"),
	broken("missing submodule", "pkg.nosuch.handle", "pkg/__init__.py", "", "ModuleNotFoundError: No module named 'pkg.nosuch'"),
	// A handler gets one argument (or none): one that needs more could
	// only fail on every invocation.
	broken("two parameters", "h.handle", "h.py", "def handle(a, b):\n    return a\n",
		"h.handle needs 2 positional arguments (a, b); a handler is called with one argument, the decoded input (or with none when it takes no parameter)"),
	broken("keyword-only parameter", "h.handle", "h.py", "def handle(a, *, must):\n    return a\n",
		"h.handle needs the keyword-only arguments must"),
	broken("callable object with two parameters", "h.handle", "h.py", "class C:\n    def __call__(self, a, b):\n        return a\nhandle = C()\n",
		"h.handle needs 2 positional arguments (a, b)"),
}

// broken is a handler whose one file (if any) cannot be loaded.
func broken(name, handler, file, content, want string) adaptertest.StartFailure {
	files := map[string]string{}
	if file != "" {
		files[file] = content
	}
	return adaptertest.StartFailure{Name: name, Handler: adaptertest.Handler{Handler: handler, Files: files}, Want: []string{want}}
}

// longDotted is a handler string over the length bound.
var longDotted = strings.Repeat("a.", 300) + "b"

// orphanPy is the handler of the server-death test (see
// adaptertest.Adapter.Orphans); the worker runs the function itself, so
// it is its own "subshell".
const orphanPy = `
import os, subprocess

def run(event):
    child = subprocess.Popen(["sleep", "60"])
    pids = "%d %d %d" % (os.getpid(), os.getpid(), child.pid)
    if event == "bg":
        return pids
    with open("long.tmp", "w") as f:
        f.write(pids)
    os.rename("long.tmp", "long")
    child.wait()
`
