package stepctx_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
)

// Rule: a client with blocking I/O (the Bash step agent's) takes and
// replays steps like any other, and a stale token is refused on it too.
func TestClientBlockingIO(t *testing.T) {
	srv, addr, _ := stepctxtest.Serve(t)
	ctx := context.Background()
	j := &stepctxtest.Journal{}
	step := func(a *stepctx.Attempt, value string) (recorded *stepctx.Result) {
		t.Helper()
		c, err := stepctx.NewClient(addr, a.Token())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.UseBlockingIO()
		rec, h, err := c.RunStart(ctx, "s1")
		if err != nil {
			t.Fatalf("run/start: %v", err)
		}
		if rec != nil {
			return rec
		}
		if err := c.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte(value)}}); err != nil {
			t.Fatalf("run/complete: %v", err)
		}
		return nil
	}
	a, err := srv.Open("", j)
	if err != nil {
		t.Fatal(err)
	}
	if rec := step(a, "one"); rec != nil {
		t.Fatalf("first attempt: recorded %+v, want the step executed", rec)
	}
	a.Close()
	if en := j.Entries(); len(en) != 1 || en[0].Name != "s1" || string(en[0].Result.Value) != "one" {
		t.Fatalf("journal = %+v, want s1=one", en)
	}

	// The stale token of the closed attempt changes nothing.
	c, err := stepctx.NewClient(addr, a.Token())
	if err != nil {
		t.Fatal(err)
	}
	c.UseBlockingIO()
	var e *stepctx.Error
	if _, _, err := c.RunStart(ctx, "s1"); !errors.As(err, &e) || (e.Status != http.StatusUnauthorized && e.Status != http.StatusForbidden) {
		t.Fatalf("stale token: %v, want 401 or 403", err)
	}
	c.Close()

	j.Restart()
	b, err := srv.Open("", j)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if rec := step(b, "two"); rec == nil || string(rec.Value) != "one" {
		t.Fatalf("replay: recorded %+v, want s1=one", rec)
	}
}
