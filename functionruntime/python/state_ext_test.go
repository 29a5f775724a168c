package python_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// carelessPy is function code that changes process state the worker's own
// mechanics use: each change is made by one invocation, and a later one
// on the same worker must run (and be journaled) as if it had not been.
const carelessPy = `
import json, os, subprocess, sys

def detach(event):
    if event == "close":
        # daemon-style code: detach from the terminal
        os.close(1)
        os.close(2)
        return "closed"
    print("printed after the detach")
    sys.__stdout__.write("written to sys.__stdout__\n")
    subprocess.run(["sh", "-c", "echo a child stdout line; echo a child stderr line >&2"], check=True)
    return "printed"

def patch_json(event):
    if event == "patch":
        # a library patching json for its own needs
        real_dumps, real_loads = json.dumps, json.loads

        def dumps(o, *a, **k):
            if isinstance(o, dict):
                o = dict(o, injected="by an earlier invocation", message="patched")
            return real_dumps(o, *a, **k)

        def loads(s, *a, **k):
            v = real_loads(s, *a, **k)
            return dict(v, FNBRIDGE_KEY="patched") if isinstance(v, dict) else v

        json.dumps, json.loads = dumps, loads
        return "patched"
    if event == "fail":
        raise ValueError("my own message")
    import fnbridge
    fnbridge.set_output("k", "v")
    # the function's own use of json sees its patch
    return [os.environ.get("FNBRIDGE_KEY"), json.dumps({})]

def forget(event):
    if event == "forget":
        # a test helper resetting sys.modules
        sys.modules.pop("fnbridge", None)
        return "forgot"
    import fnbridge
    fnbridge.set_output("k", event)
    return fnbridge.key()

def snapshot(event):
    if event == "snapshot":
        os.environ = dict(os.environ)  # careless: "snapshot" the environment
        return "snapshotted"
    # the README's way for a child process: append to $FNBRIDGE_OUTPUTS
    subprocess.run(["sh", "-c", 'echo "child=$FNBRIDGE_KEY $TRACEPARENT" >> "$FNBRIDGE_OUTPUTS"'], check=True)
    return [os.environ.get("FNBRIDGE_KEY"), os.environ.get("TRACEPARENT")]
`

var carelessFiles = map[string]string{"careless.py": carelessPy}

// A function that closes its stdout and stderr (fds 1 and 2, the log pipe)
// keeps its own result, and the next invocations on that worker print to
// the logs again, their children too: they failed with EBADF on every
// print, on every retry, for good.
func TestClosedStdoutAndStderrComeBack(t *testing.T) {
	f := conformance.NewFixture(t, "careless.detach", carelessFiles)
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, `"close"`).Output); got != `"closed"` {
		t.Fatalf("the invocation that closed them: output %s, want \"closed\"", got)
	}
	for i := 0; i < 2; i++ {
		res, err := f.Invoke(t, w, `"print"`)
		if err != nil {
			t.Fatalf("invocation %d after the detach: %v", i+1, err)
		}
		if string(res.Output) != `"printed"` {
			t.Fatalf("invocation %d after the detach: output %s", i+1, res.Output)
		}
	}
	for _, line := range []string{"printed after the detach", "written to sys.__stdout__", "a child stdout line", "a child stderr line"} {
		if recs := f.Logs.Records(line); len(recs) != 2 || recs[0]["invocation_id"] != "inv-1" {
			t.Errorf("%q: logged %v, want twice on the invocation (all: %v)", line, recs, f.Logs.Messages())
		}
	}
}

// The worker's own JSON (its answers, the outputs, the per-invocation
// environment) does not go through the json module's functions at call
// time: a function that patches json.dumps or json.loads changes its own
// calls, never a later invocation's journaled outputs or failure, nor
// the environment the worker gives it.
func TestPatchedJSONLeavesTheWorkersJSONAlone(t *testing.T) {
	f := conformance.NewFixture(t, "careless.patch_json", carelessFiles)
	w := f.Start(t)
	f.MustInvoke(t, w, `"patch"`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inv := f.Invocation("inv-1", []byte(`"outputs"`))
	inv.Env = map[string]string{functionruntime.EnvKey: "user-7"}
	res, err := w.Invoke(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"k": "v"}; !maps.Equal(res.Outputs, want) {
		t.Errorf("outputs %v, want %v", res.Outputs, want)
	}
	if got, want := string(res.Output), `["user-7","{\"injected\": \"by an earlier invocation\", \"message\": \"patched\"}"]`; got != want {
		t.Errorf("output %s, want %s (the key given, and the function's own json.dumps patched)", got, want)
	}
	_, err = f.Invoke(t, w, `"fail"`)
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "ValueError" || he.Message != "my own message" {
		t.Errorf("failure %v, want ValueError: my own message", err)
	}
}

// A function that removes fnbridge from sys.modules gets the worker's own
// module back at its next invocation: a later import fnbridge loaded the
// stand-in meant for multiprocessing children, whose calls all raised,
// blaming a child process.
func TestRemovedFnbridgeModuleComesBack(t *testing.T) {
	f := conformance.NewFixture(t, "careless.forget", carelessFiles)
	w := f.Start(t)
	f.MustInvoke(t, w, `"forget"`)
	for _, key := range []string{"a", "b"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		inv := f.Invocation("inv-1", []byte(jsonText(key)))
		inv.Env = map[string]string{functionruntime.EnvKey: key}
		res, err := w.Invoke(ctx, inv)
		cancel()
		if err != nil {
			t.Fatalf("import fnbridge after it was removed: %v", err)
		}
		if string(res.Output) != jsonText(key) || !maps.Equal(res.Outputs, map[string]string{"k": key}) {
			t.Fatalf("output %s, outputs %v, want key %q and k=%s", res.Output, res.Outputs, key, key)
		}
	}
}

// A function that rebinds os.environ (to a dict: a "snapshot") does not
// cut the worker's per-invocation environment off from the process's: the
// next invocations' children see their own FNBRIDGE_OUTPUTS, FNBRIDGE_KEY
// and TRACEPARENT (they saw an earlier invocation's, and their outputs
// were lost), and so does the function in os.environ.
func TestRebindingOsEnvironKeepsTheInvocationEnvironment(t *testing.T) {
	f := conformance.NewFixture(t, "careless.snapshot", carelessFiles)
	w := f.Start(t)
	f.MustInvoke(t, w, `"snapshot"`)
	for i, key := range []string{"k1", "k2"} {
		tp := "00-4bf92f3577b34da6a3ce929d0e0e473" + string(rune('0'+i)) + "-00f067aa0ba902b7-01"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		inv := f.Invocation("inv-1", []byte(`"run"`))
		inv.Env = map[string]string{functionruntime.EnvKey: key, functionruntime.EnvTraceparent: tp}
		res, err := w.Invoke(ctx, inv)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		if err := json.Unmarshal(res.Output, &seen); err != nil {
			t.Fatal(err)
		}
		if want := []string{key, tp}; strings.Join(seen, " ") != strings.Join(want, " ") {
			t.Errorf("invocation %d: the function sees %q, want %q", i+1, seen, want)
		}
		if want := map[string]string{"child": key + " " + tp}; !maps.Equal(res.Outputs, want) {
			t.Errorf("invocation %d: outputs %v, want %v (the child's)", i+1, res.Outputs, want)
		}
	}
}
