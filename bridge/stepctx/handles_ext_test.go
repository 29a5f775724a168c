package stepctx_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
)

// handleOf is the n-th handle ("run-" or "fut-" prefix) the server mints
// in an attempt of invocation id: the tag is the first 4 bytes of the
// SHA-256 of the id, in hex, so every attempt of one invocation mints the
// same handles and another invocation's never match.
func handleOf(prefix, invocationID string, n int) string {
	sum := sha256.Sum256([]byte(invocationID))
	return prefix + hex.EncodeToString(sum[:4]) + "-" + strconv.Itoa(n)
}

var handleFormat = regexp.MustCompile(`^(fut|run)-[0-9a-f]{8}-[1-9][0-9]*$`)

// A handle printed in one invocation and used in another (a Bash script
// that saved `fnbridge sleep --async` output, say) is refused: it used to
// name the other invocation's n-th future, so an await returned when
// that one completed, and a run/complete completed another step.
func TestHandleOfAnotherInvocationIsRefused(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	j1 := &stepctxtest.Journal{ID: "inv_one", HoldSleeps: true}
	j2 := &stepctxtest.Journal{ID: "inv_two"}
	_, c1 := open(t, s, addr, j1)
	a2, c2 := open(t, s, addr, j2)

	long, err := c1.SleepAsync(ctx, 1000*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !handleFormat.MatchString(long) || long != handleOf("fut-", "inv_one", 1) {
		t.Errorf("handle %q, want %q", long, handleOf("fut-", "inv_one", 1))
	}
	if _, err := c2.SleepAsync(ctx, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, err = c2.Await(ctx, long)
	wantStatus(t, err, http.StatusBadRequest, "issued to another invocation")

	_, r1, err := c1.RunStart(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	_, r2, err := c2.RunStart(ctx, "two")
	if err != nil {
		t.Fatal(err)
	}
	err = c2.RunComplete(ctx, r1, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("1")}})
	wantStatus(t, err, http.StatusBadRequest, "issued to another invocation")
	if err := c2.RunComplete(ctx, r2, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("2")}}); err != nil {
		t.Fatalf("completing its own run: %v", err)
	}
	_, err = c2.Await(ctx, r1)
	wantStatus(t, err, http.StatusBadRequest, "issued to another invocation")

	// What is merely unknown or malformed stays "unknown handle".
	for _, h := range []string{"fut-99", "run-1", "fut-", "fut-0123456-1", "fut-0123456789-1", "fut-zzzzzzzz-1", "fut-01234567-", "fut-01234567-x", handleOf("fut-", "inv_two", 99), "sign_1nope"} {
		_, err = c2.Await(ctx, h)
		wantStatus(t, err, http.StatusBadRequest, "unknown handle")
	}
	err = c2.RunComplete(ctx, handleOf("run-", "inv_two", 99), stepctx.RunOutcome{})
	wantStatus(t, err, http.StatusBadRequest, "unknown handle")

	if a2.Err() != nil {
		t.Errorf("refused handles ended the attempt: %v", a2.Err())
	}
	if e := j2.Entries(); len(e) != 2 || e[1].Result == nil || string(e[1].Result.Value) != "2" {
		t.Errorf("journal of the second invocation %+v: want its sleep and its own run's value", e)
	}
}

// Every attempt of one invocation replays its journal and mints the same
// handles (a recorded run counts as the one that executed), so a handle
// stays valid in the invocation's later attempts.
func TestHandlesAreTheSameOnEveryAttempt(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	j := &stepctxtest.Journal{ID: "inv_same"}
	mint := func() (run, fut string) {
		a, c := open(t, s, addr, j)
		defer a.Close()
		rec, run, err := c.RunStart(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if rec == nil {
			if err := c.RunComplete(ctx, run, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("1")}}); err != nil {
				t.Fatal(err)
			}
		}
		fut, err = c.SleepAsync(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Await(ctx, fut); err != nil {
			t.Fatalf("await %s in its own attempt: %v", fut, err)
		}
		return run, fut
	}
	run1, fut1 := mint()
	if run1 != handleOf("run-", "inv_same", 1) || fut1 != handleOf("fut-", "inv_same", 2) {
		t.Errorf("handles %q %q, want %q %q", run1, fut1, handleOf("run-", "inv_same", 1), handleOf("fut-", "inv_same", 2))
	}
	j.Restart()
	if _, fut2 := mint(); fut2 != fut1 {
		t.Errorf("the replaying attempt minted %q for the timer the first minted %q", fut2, fut1)
	}
}
