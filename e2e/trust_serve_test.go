package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
)

// A function that runs longer than restate-server's inactivity timeout
// completes once: the bridge advertises per-handler inactivity and abort
// timeouts derived from the handler's timeout, so Restate does not end the
// attempt mid-run and execute the function again. The server's defaults
// are lowered to 5s + 2s so that a 12 s function outlives them, as a 12 min
// one outlives restate-server's 1m + 10m.
func TestTrustServeLongFunctionCompletesOnce(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{ExtraEnv: []string{
		"RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT=5s",
		"RESTATE_WORKER__INVOKER__ABORT_TIMEOUT=2s",
	}})
	ws := newWorkspace(t, "trust_serve_long.py")
	cfg := ws.config(t, `services:
  - name: TrustLong
    handlers:
      - {name: work, runtime: python, dir: fn, handler: trust_serve_long.work, timeout: 30s}
`)
	b := startBridge(t, cfg, freeAddr(t))
	srv.Register(t, b.URI(), false)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id, err := srv.Send(ctx, "TrustLong", "work", []byte(`{"seconds": 12}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	status, out := invocationOutput(t, srv, id, 80*time.Second)
	if status != 200 {
		t.Fatalf("output of %s: status %d: %s (executions: %v)", id, status, out, ws.lines(t, "calls.log"))
	}
	assertJSON(t, "output", out, `{"slept": 12}`)
	if got := ws.lines(t, "calls.log"); len(got) != 1 {
		t.Fatalf("the function executed %d times, want once: %v", len(got), got)
	}
}
