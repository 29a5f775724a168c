package functionruntime_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// A drain under way is cut short by a later request that asks for less
// waiting: the tests below start a drain of ten minutes and expect the
// later request to end it. await bounds every wait, so a drain that is not
// cut short fails the test instead of hanging it.

// await returns what errc delivers, failing the test when nothing comes
// within 10 s (the drain under way lasts ten minutes).
func await(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s: the drain under way was not cut short", what)
		return nil
	}
}

// draining is a READY registration with an invocation held in flight
// (its error on invErr) and an UnregisterFunction of ten minutes' drain
// under way (its error on first).
type draining struct {
	g      *gate
	ad     *fakeAdapter
	h      *harness
	ref    *executorv1.FunctionRegistration
	invErr <-chan error
	first  <-chan error
}

func startDraining(t *testing.T) *draining {
	t.Helper()
	g := newGate()
	t.Cleanup(g.open)
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	invErr := h.hold(t, g, ref)
	return &draining{g: g, ad: ad, h: h, ref: ref, invErr: invErr, first: h.drainLong(t, ref)}
}

// pending is a request whose error arrives on errc.
type pending struct {
	what string
	errc <-chan error
}

// wantCut checks that a drain was cut short: the in-flight invocation
// (its error on invErr) ends Aborted, each request then returns without
// error, in order, and the registration's worker is closed.
func wantCut(t *testing.T, ad *fakeAdapter, invErr <-chan error, reqs ...pending) {
	t.Helper()
	wantCode(t, await(t, "the in-flight invocation to be cancelled", invErr), codes.Aborted, functionruntime.ReasonInvocationAborted)
	for _, r := range reqs {
		if err := await(t, r.what, r.errc); err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
	}
	if !ad.allWorkers()[0].closed.Load() {
		t.Error("worker not closed")
	}
}

// drainLong starts an UnregisterFunction of ref with a ten-minute drain and
// waits until the registration is DRAINING; its error arrives on the
// channel.
func (h *harness) drainLong(t *testing.T, ref *executorv1.FunctionRegistration) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := h.unregister(ref, false, 600000)
		errc <- err
	}()
	proctest.Eventually(t, 10*time.Second, "DRAINING", func() bool {
		_, err := h.status(ref)
		return functionruntime.ErrorInfo(err).GetReason() == functionruntime.ReasonRegistrationDraining
	})
	return errc
}

// "With cancel_in_flight=true, it cancels immediately, then releases
// registration-local state" — also when another Unregister is already
// draining the registration; a shorter drain_timeout_millis likewise
// shortens that drain. The first Unregister still completes the teardown.
func TestLaterUnregisterCutsADrainUnderWay(t *testing.T) {
	for _, tt := range []struct {
		name        string
		cancel      bool
		drainMillis int64
	}{
		{"cancel_in_flight=true", true, 0},
		{"shorter drain_timeout_millis", false, 50},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := startDraining(t)
			h, ad, ref, invErr, first := d.h, d.ad, d.ref, d.invErr, d.first

			second := make(chan error, 1)
			go func() {
				_, err := h.unregister(ref, tt.cancel, tt.drainMillis)
				second <- err
			}()
			wantCut(t, ad, invErr, pending{"the second UnregisterFunction", second}, pending{"the first UnregisterFunction", first})
			_, err := h.status(ref)
			wantCode(t, err, codes.NotFound, functionruntime.ReasonRegistrationNotFound)
		})
	}
}

// Shutdown "drains every registration for at most" its context, then
// cancels in-flight invocations: a registration another Unregister is
// already draining for longer is cut short too.
func TestShutdownCutsADrainUnderWay(t *testing.T) {
	d := startDraining(t)
	h, ad, invErr, first := d.h, d.ad, d.invErr, d.first

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- h.srv.Shutdown(ctx) }()
	wantCut(t, ad, invErr, pending{"Shutdown", shut}, pending{"the UnregisterFunction", first})
}

// A higher registration attempt tears the older registration down, its
// in-flight invocation cancelled, before the new worker starts — also when
// an Unregister is already draining the older one.
func TestHigherAttemptCutsADrainUnderWay(t *testing.T) {
	d := startDraining(t)
	h, ad, g, invErr, first := d.h, d.ad, d.g, d.invErr, d.first

	type result struct {
		resp *executorv1.RegisterFunctionResponse
		err  error
	}
	reg := make(chan result, 1)
	go func() {
		resp, err := h.register("run-1", 2, digest("run-1"))
		reg <- result{resp, err}
	}()
	wantCode(t, await(t, "the in-flight invocation to be cancelled", invErr), codes.Aborted, functionruntime.ReasonInvocationAborted)
	var res result
	select {
	case res = <-reg:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for RegisterFunction of attempt 2: the drain under way was not cut short")
	}
	if res.err != nil || res.resp.GetState() != stateReady {
		t.Fatalf("attempt 2: %v, %v", res.resp.GetState(), res.err)
	}
	if err := await(t, "the UnregisterFunction of attempt 1", first); err != nil {
		t.Fatalf("UnregisterFunction: %v", err)
	}
	workers := ad.allWorkers()
	if len(workers) != 2 || !workers[0].closed.Load() || workers[1].closed.Load() {
		t.Fatalf("%d workers; want the old one closed and the new one open", len(workers))
	}
	g.open()
	if _, err := h.invoke(res.resp.GetRegistration(), "inv-new", "{}"); err != nil {
		t.Fatalf("invoke on attempt 2: %v", err)
	}
}
