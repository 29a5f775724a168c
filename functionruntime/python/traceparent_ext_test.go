package python_test

import (
	"context"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
)

const traceparentPy = `import contextvars, os, threading
import fnbridge

gate = threading.Event()
seen = []

def later():
    gate.wait(10)
    seen.append(fnbridge.traceparent())

def tp(event):
    if event == "leave":
        # A thread that outlives this invocation, in its context.
        threading.Thread(target=contextvars.copy_context().run, args=(later,)).start()
    if event == "collect":
        gate.set()
        while not seen:
            threading.Event().wait(0.01)
    inner = []
    t = threading.Thread(target=contextvars.copy_context().run, args=(lambda: inner.append(fnbridge.traceparent()),))
    t.start()
    t.join()
    return {"tp": fnbridge.traceparent(), "env": os.environ.get("TRACEPARENT"), "thread": inner[0], "leftover": seen[0] if seen else "none"}
`

// fnbridge.traceparent() is the current invocation's TRACEPARENT (the
// per-invocation environment), None without one; a thread left over from
// an earlier invocation never gets a later invocation's.
func TestFnbridgeTraceparent(t *testing.T) {
	f := conformance.NewFixture(t, "tp.tp", map[string]string{"tp.py": traceparentPy})
	w := f.Start(t)
	invoke := func(input, traceparent string) string {
		t.Helper()
		inv := f.Invocation("inv-tp", []byte(input))
		if traceparent != "" {
			inv.Env = map[string]string{functionruntime.EnvTraceparent: traceparent}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := w.Invoke(ctx, inv)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Output)
	}
	const first, second = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if got, want := invoke(`"leave"`, first), `{"tp":"`+first+`","env":"`+first+`","thread":"`+first+`","leftover":"none"}`; got != want {
		t.Errorf("with TRACEPARENT: %s, want %s", got, want)
	}
	if got, want := invoke(`"collect"`, second), `{"tp":"`+second+`","env":"`+second+`","thread":"`+second+`","leftover":null}`; got != want {
		t.Errorf("second invocation (the leftover thread asks now): %s, want %s", got, want)
	}
	if got, want := invoke(`"plain"`, ""), `{"tp":null,"env":null,"thread":null,"leftover":null}`; got != want {
		t.Errorf("without TRACEPARENT: %s, want %s", got, want)
	}
}
