package functionruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// manualClock moves only when the test advances it.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock { return &manualClock{t: time.Unix(1_700_000_000, 0)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newOrphanHarness is newHarness with reaping after grace (0: off).
func newOrphanHarness(t *testing.T, ad *fakeAdapter, grace time.Duration, now func() time.Time) *harness {
	t.Helper()
	return newHarnessWith(t, ad, functionruntime.Options{Now: now, OrphanGrace: grace})
}

const (
	orphanGrace = time.Minute
	// orphanAfter is when a registration of registerReq (idle_timeout_seconds
	// 300) with no contact is reaped.
	orphanAfter = 300*time.Second + orphanGrace
)

// wantReaped checks that ref's registration is gone, its worker closed,
// and the reason logged.
func (h *harness) wantReaped(ref *executorv1.FunctionRegistration, w *fakeWorker) {
	h.t.Helper()
	if !w.closed.Load() {
		h.t.Fatal("worker of the orphaned registration was not closed")
	}
	_, err := h.status(ref)
	// "NotFound means no registration has this Run UID."
	wantCode(h.t, err, codes.NotFound, functionruntime.ReasonRegistrationNotFound)
	_, err = h.invoke(ref, "", "{}")
	wantCode(h.t, err, codes.NotFound, functionruntime.ReasonRegistrationNotFound)
	if n := len(orphanLines(h.logs, ref.GetRunUid())); n != 1 {
		h.t.Fatalf("%d info lines saying run_uid %s was reaped as an orphan and why, want 1; logs:\n%s", n, ref.GetRunUid(), h.logs)
	}
}

// orphanLines returns the info lines about reaping an orphan of runUID
// ("": any) that give a reason.
func orphanLines(logs *syncBuffer, runUID string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		msg, _ := rec["message"].(string)
		reason, _ := rec["reason"].(string)
		if rec["level"] == "info" && strings.Contains(msg, "orphan") && strings.Contains(reason, "caller") &&
			(runUID == "" || rec["run_uid"] == runUID) {
			out = append(out, rec)
		}
	}
	return out
}

// wantKept checks that ref's registration is still READY with its worker.
func (h *harness) wantKept(ref *executorv1.FunctionRegistration, w *fakeWorker) {
	h.t.Helper()
	if w.closed.Load() {
		h.t.Fatal("worker closed; the registration should have been kept")
	}
	st, err := h.status(ref)
	if err != nil || st.GetState() != stateReady {
		h.t.Fatalf("FunctionStatus = %v, %v; want READY", st, err)
	}
}

// (a) A registration nobody calls is unregistered once neither its
// caller nor an invocation has touched it for idle_timeout_seconds plus
// the grace, and not a moment earlier.
func TestOrphanUnpolledRegistrationIsReaped(t *testing.T) {
	for _, invoked := range []bool{false, true} {
		name := map[bool]string{false: "idle since ready", true: "idle since its last invocation"}[invoked]
		t.Run(name, func(t *testing.T) {
			clock := newManualClock()
			ad := &fakeAdapter{}
			h := newOrphanHarness(t, ad, orphanGrace, clock.Now)
			ref := h.mustReady("run-orphan", 1)
			if invoked {
				clock.advance(4 * time.Minute)
				if _, err := h.invoke(ref, "", "{}"); err != nil {
					t.Fatal(err)
				}
			}
			w := ad.allWorkers()[0]

			clock.advance(orphanAfter - time.Nanosecond)
			if n := h.srv.ReapOrphans(); n != 0 || w.closed.Load() {
				t.Fatalf("reaped %d (worker closed %v) before the timeout", n, w.closed.Load())
			}
			clock.advance(time.Nanosecond)
			h.srv.ReapOrphans()
			h.wantReaped(ref, w)

			// The Run may register again afterwards.
			h.mustReady("run-orphan", 1)
		})
	}
}

// A FAILED registration has no activity time; without any call it is
// reaped a timeout after the server first saw it, not at once.
func TestOrphanFailedRegistrationIsReaped(t *testing.T) {
	clock := newManualClock()
	ad := &fakeAdapter{start: func(context.Context, functionruntime.WorkerSpec) error { return errors.New("import error") }}
	h := newOrphanHarness(t, ad, orphanGrace, clock.Now)
	resp, err := h.register("run-failed", 1, digest("run-failed"))
	if err != nil || resp.GetState() != stateFailed {
		t.Fatalf("RegisterFunction = %v, %v; want FAILED", resp, err)
	}
	h.srv.ReapOrphans()
	clock.advance(orphanAfter - time.Nanosecond)
	h.srv.ReapOrphans()
	if got := h.srv.ReapOrphans(); got != 0 {
		t.Fatalf("reaped %d before the timeout", got)
	}
	clock.advance(time.Nanosecond)
	h.srv.ReapOrphans()
	_, err = h.status(resp.GetRegistration())
	wantCode(t, err, codes.NotFound, functionruntime.ReasonRegistrationNotFound)
}

// (b) A live caller's poll (FunctionStatus) keeps an idle registration:
// idle unregistration is the caller's business, not the server's.
func TestOrphanPolledRegistrationIsKept(t *testing.T) {
	clock := newManualClock()
	ad := &fakeAdapter{}
	h := newOrphanHarness(t, ad, orphanGrace, clock.Now)
	ref := h.mustReady("run-polled", 1)
	w := ad.allWorkers()[0]
	for range 12 { // an hour of polls, each within the timeout of the last
		clock.advance(orphanAfter - time.Second)
		if _, err := h.status(ref); err != nil {
			t.Fatal(err)
		}
		if n := h.srv.ReapOrphans(); n != 0 {
			t.Fatalf("reaped %d polled registrations", n)
		}
	}
	h.wantKept(ref, w)

	// A call with a stale ID is not its caller's contact.
	clock.advance(orphanAfter)
	_, err := h.status(&executorv1.FunctionRegistration{RunUid: ref.GetRunUid(), RegistrationId: "reg_stale"})
	wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationStale)
	h.srv.ReapOrphans()
	h.wantReaped(ref, w)
}

// (c) A registration with an invocation in flight is never reaped, however
// long ago anyone called, and the invocation is not cancelled.
func TestOrphanInFlightRegistrationIsKept(t *testing.T) {
	clock := newManualClock()
	g := newGate()
	defer g.open()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newOrphanHarness(t, ad, orphanGrace, clock.Now)
	ref := h.mustReady("run-busy", 1)
	w := ad.allWorkers()[0]
	invErr := h.hold(t, g, ref)

	clock.advance(24 * time.Hour)
	if n := h.srv.ReapOrphans(); n != 0 {
		t.Fatalf("reaped %d registrations with an invocation in flight", n)
	}
	if w.closed.Load() {
		t.Fatal("worker closed under an in-flight invocation")
	}
	g.open()
	if err := <-invErr; err != nil {
		t.Fatalf("in-flight invocation: %v, want it to finish", err)
	}
	st, err := h.status(ref)
	if err != nil || st.GetState() != stateReady || st.GetInFlight() != 0 {
		t.Fatalf("FunctionStatus = %v, %v; want READY, idle", st, err)
	}

	// Once it has ended, the registration is an orphan like any other.
	clock.advance(orphanAfter)
	h.srv.ReapOrphans()
	h.wantReaped(ref, w)
}

// (d) Without OrphanGrace (the embedded runtime, whose bridge is alive by
// construction) nothing is reaped.
func TestOrphanReapingOff(t *testing.T) {
	clock := newManualClock()
	ad := &fakeAdapter{}
	h := newOrphanHarness(t, ad, 0, clock.Now)
	ref := h.mustReady("run-embedded", 1)
	w := ad.allWorkers()[0]
	clock.advance(365 * 24 * time.Hour)
	if n := h.srv.ReapOrphans(); n != 0 {
		t.Fatalf("reaped %d with reaping off", n)
	}
	h.wantKept(ref, w)
	if len(orphanLines(h.logs, "")) != 0 {
		t.Fatalf("reaping off, yet logs mention orphans:\n%s", h.logs)
	}
}

// The server sweeps by itself, on the real clock, without ReapOrphans.
func TestOrphanSweepRunsByItself(t *testing.T) {
	ad := &fakeAdapter{}
	h := newOrphanHarness(t, ad, 100*time.Millisecond, nil)
	req := h.registerReq("run-gone", 1, digest("run-gone"))
	req.IdleTimeoutSeconds = 0
	resp, err := h.cli.RegisterFunction(context.Background(), req)
	if err != nil || resp.GetState() != stateReady {
		t.Fatalf("RegisterFunction = %v, %v", resp, err)
	}
	ref := resp.GetRegistration()
	w := ad.allWorkers()[0]
	// Watch with a stale ID, which is no contact of its caller.
	stale := &executorv1.FunctionRegistration{RunUid: ref.GetRunUid(), RegistrationId: "reg_watcher"}
	proctest.Eventually(t, 10*time.Second, "the orphan to be reaped", func() bool {
		_, err := h.status(stale)
		return functionruntime.ErrorInfo(err).GetReason() == functionruntime.ReasonRegistrationNotFound
	})
	h.wantReaped(ref, w)
}
