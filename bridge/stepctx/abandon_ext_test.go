package stepctx_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
)

// waitFramedConns waits until s serves n framed connections: the server
// is done with those whose clients closed them.
func waitFramedConns(t *testing.T, s *stepctx.Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.FramedConns() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server still serves %d framed connections after 10s, want %d", s.FramedConns(), n)
		}
	}
}

const abandoned = `step "x" was abandoned: the process running it went away before reporting its outcome; the attempt is retried`

// A process killed while its step runs (`timeout 1 fnbridge run x -- sleep
// 3`) closes the connection that started the step, and no completion can
// come any more: the attempt ends as a retryable failure of the step. The
// step used to stay open, refusing every later call with 409 "inside a
// run step", and a script that went on finished "ok" without it.
func TestClosedConnectionAbandonsItsRun(t *testing.T) {
	for _, client := range []string{"go", "framed"} {
		t.Run(client, func(t *testing.T) {
			s, addr := serve(t, "unix", stepctx.Config{})
			j := &stepctxtest.Journal{ID: "inv_x"}
			a, c := open(t, s, addr, j)
			ctx := context.Background()
			if client == "go" {
				if _, _, err := c.RunStart(ctx, "x"); err != nil {
					t.Fatal(err)
				}
				c.Close()
			} else {
				f := dialFramed(t, addr, a.Token())
				f.want("run/start", `{"name":"x"}`, 200, `"execute"`)
				f.c.Close()
			}
			select {
			case <-a.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the attempt is still open 10s after the connection running its step closed")
			}
			var sf *stepctx.StepFailedError
			if err := a.Err(); !errors.As(err, &sf) || sf.Name != "x" || err.Error() != abandoned {
				t.Fatalf("attempt ended with %v, want %s", err, abandoned)
			}
			other, _ := stepctx.NewClient(addr, a.Token())
			defer other.Close()
			_, err := other.Sleep(ctx, time.Second)
			if e := wantStatus(t, err, http.StatusGone, abandoned); e.Suspended {
				t.Error("an abandoned step reads as a suspension")
			}
			if got := j.Failures(); len(got) != 1 || !strings.Contains(got[0], "went away") {
				t.Errorf("Failures %q: want the step's retryable failure recorded", got)
			}
			if e := j.Entries(); len(e) != 1 || e[0].Kind != "run" || e[0].Result != nil {
				t.Errorf("journal %+v: want the run, nothing completed", e)
			}
		})
	}
}

// Only a run still open when the connection that started it closes is
// abandoned: not one completed (over any connection), not one another
// connection started, and never one started over HTTP, whose clients
// may use a connection per request.
func TestClosedConnectionEndsNothingElse(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{ID: "inv_x"}
	a, c1 := open(t, s, addr, j)
	ctx := context.Background()
	ok := func(status int, m map[string]any) map[string]any {
		t.Helper()
		if status != 200 || m["failure"] != nil {
			t.Fatalf("got %d %v, want 200", status, m)
		}
		return m
	}

	// Completed, then the connection closes.
	_, h, err := c1.RunStart(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	waitFramedConns(t, s, 0)

	// Started over one connection, completed over HTTP; another connection
	// starts the next run; then the first closes.
	c2, _ := stepctx.NewClient(addr, a.Token())
	defer c2.Close()
	_, h, err = c2.RunStart(ctx, "moved")
	if err != nil {
		t.Fatal(err)
	}
	r := newRaw(t, addr, a.Token())
	ok(r.post(http.MethodPost, stepctx.RouteRunComplete, `{"handle":"`+h+`","value":2}`))
	c3, _ := stepctx.NewClient(addr, a.Token())
	defer c3.Close()
	_, h3, err := c3.RunStart(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	waitFramedConns(t, s, 1)
	if err := a.Err(); err != nil {
		t.Fatalf("closing a connection whose run was completed elsewhere ended the attempt: %v", err)
	}
	if err := c3.RunComplete(ctx, h3, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("3")}}); err != nil {
		t.Fatal(err)
	}
	c3.Close()

	// Started over HTTP, whose connection closes; completed over another.
	h, _ = ok(r.post(http.MethodPost, stepctx.RouteRunStart, `{"name":"http"}`))["execute"].(string)
	r.hc.CloseIdleConnections()
	r = newRaw(t, addr, a.Token())
	ok(r.post(http.MethodPost, stepctx.RouteRunComplete, `{"handle":"`+h+`","value":4}`))
	waitFramedConns(t, s, 0)

	c4, _ := stepctx.NewClient(addr, a.Token())
	defer c4.Close()
	if _, err := c4.Sleep(ctx, time.Millisecond); err != nil {
		t.Fatalf("a call after every run completed: %v", err)
	}
	if err := a.Err(); err != nil {
		t.Fatalf("the attempt ended: %v", err)
	}
	if e := j.Entries(); len(e) != 5 {
		t.Errorf("journal %+v: want four completed runs and the sleep", e)
	}
	if f := j.Failures(); len(f) != 0 {
		t.Errorf("Failures %q: want none", f)
	}
}

// Shutdown closing a connection is not its client going away: the step
// may still be running, and the attempt ends as the bridge ends it.
func TestShutdownAbandonsNoRun(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	a, c := open(t, s, addr, &stepctxtest.Journal{})
	if _, _, err := c.RunStart(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if s.FramedConns() != 0 {
		t.Fatal("Shutdown returned before its connections were over")
	}
	if err := a.Err(); err != nil {
		t.Fatalf("Shutdown ended the attempt: %v", err)
	}
}
