package functionruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

func (h *harness) unregister(ref *executorv1.FunctionRegistration, cancel bool, drainMillis int64) (*executorv1.UnregisterFunctionResponse, error) {
	return h.cli.UnregisterFunction(context.Background(), &executorv1.UnregisterFunctionRequest{
		Registration: ref, CancelInFlight: cancel, DrainTimeoutMillis: drainMillis,
	})
}

// hold starts an invocation of ref that g holds in the adapter and waits
// until it is there; the invocation's error arrives on the channel.
func (h *harness) hold(t *testing.T, g *gate, ref *executorv1.FunctionRegistration) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := h.invoke(ref, "held", "{}")
		errc <- err
	}()
	g.waitEntered(t)
	return errc
}

// "UnregisterFunction first moves the registration to DRAINING, rejecting
// new invokes. With cancel_in_flight=false, it waits no longer than
// drain_timeout_millis for the active invocation. With cancel_in_flight=true,
// it cancels immediately, then releases registration-local state."
func TestUnregisterDrainsThenRemoves(t *testing.T) {
	tests := []struct {
		name        string
		cancel      bool
		drainMillis int64
		finish      bool // let the held invocation finish during the drain
		wantInvoke  codes.Code
	}{
		{"cancel_in_flight=false waits for the active invocation", false, 10000, true, codes.OK},
		{"cancel_in_flight=false waits no longer than drain_timeout_millis", false, 50, false, codes.Aborted},
		{"cancel_in_flight=true cancels immediately", true, 60000, false, codes.Aborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate()
			defer g.open()
			ad := &fakeAdapter{invoke: g.invoke}
			h := newHarness(t, ad, functionruntime.Limits{}, nil)
			ref := h.mustReady("run-1", 1)
			invErr := h.hold(t, g, ref)

			start := time.Now()
			unreg := make(chan error, 1)
			go func() {
				resp, err := h.unregister(ref, tt.cancel, tt.drainMillis)
				if err == nil && resp.GetRegistration().GetRegistrationId() != ref.GetRegistrationId() {
					t.Errorf("unregister response = %v", resp)
				}
				unreg <- err
			}()
			proctest.Eventually(t, 10*time.Second, "DRAINING rejects new invokes", func() bool {
				_, err := h.invoke(ref, "", "{}")
				switch functionruntime.ErrorInfo(err).GetReason() {
				case functionruntime.ReasonRegistrationDraining:
					return true
				case functionruntime.ReasonRegistrationNotFound:
					// A cancel, or a 50 ms drain on a loaded host, can
					// finish the teardown before the poll sees DRAINING;
					// rejected either way. Only the drain the held
					// invocation ends must still be DRAINING.
					return !tt.finish
				}
				return false
			})
			if tt.finish {
				g.open()
			}
			err := <-invErr
			if tt.wantInvoke == codes.OK {
				if err != nil {
					t.Fatalf("drained invocation: %v", err)
				}
			} else {
				wantCode(t, err, tt.wantInvoke, functionruntime.ReasonInvocationAborted)
				if c := functionruntime.Classify(err); c != functionruntime.ClassAborted {
					t.Errorf("Classify = %v, want aborted", c)
				}
			}
			if err := <-unreg; err != nil {
				t.Fatalf("UnregisterFunction: %v", err)
			}
			if tt.cancel && time.Since(start) > 5*time.Second {
				t.Errorf("cancel_in_flight=true took %v", time.Since(start))
			}
			if !ad.allWorkers()[0].closed.Load() {
				t.Error("worker not closed after unregister")
			}
			_, err = h.status(ref)
			wantCode(t, err, codes.NotFound, functionruntime.ReasonRegistrationNotFound)
			// The Run can register again afterwards.
			h.mustReady("run-1", 1)
		})
	}
}

// "Unregistering an absent registration succeeds."
func TestUnregisterAbsentSucceeds(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	ref := &executorv1.FunctionRegistration{RunUid: "never-registered", RegistrationId: "reg_01ABC"}
	resp, err := h.unregister(ref, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRegistration().GetRunUid() != "never-registered" {
		t.Errorf("response = %v", resp)
	}
	// Twice in a row, too.
	cur := h.mustReady("run-1", 1)
	for i := 0; i < 2; i++ {
		if _, err := h.unregister(cur, true, 0); err != nil {
			t.Fatalf("unregister %d: %v", i, err)
		}
	}
}

// "Unregistering a stale registration ID returns FailedPrecondition and
// cannot delete a newer registration for the same Run UID."
func TestUnregisterStaleIDCannotDeleteNewer(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	old := h.mustReady("run-1", 1)
	cur := h.mustReady("run-1", 2)
	_, err := h.unregister(old, true, 0)
	wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationStale)
	if s, err := h.status(cur); err != nil || s.GetState() != stateReady {
		t.Fatalf("newer registration after a stale unregister: %v, %v", s, err)
	}
	if _, err := h.invoke(cur, "", "{}"); err != nil {
		t.Fatal(err)
	}
}

func TestUnregisterValidation(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	_, err := h.unregister(ref, false, -1)
	st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
	if !strings.HasPrefix(st.Message(), "drain_timeout_millis:") {
		t.Errorf("message %q", st.Message())
	}
	_, err = h.unregister(&executorv1.FunctionRegistration{RunUid: "run-1"}, false, 0)
	wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
	if _, err := h.status(ref); err != nil {
		t.Fatalf("registration affected by invalid unregister: %v", err)
	}
}

// Two concurrent unregisters of the same registration both succeed and the
// worker is closed once.
func TestUnregisterConcurrent(t *testing.T) {
	g := newGate()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	invErr := h.hold(t, g, ref)
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := h.unregister(ref, false, 10000)
			errs <- err
		}()
	}
	proctest.Eventually(t, 10*time.Second, "DRAINING", func() bool {
		_, err := h.status(ref)
		return functionruntime.ErrorInfo(err).GetReason() == functionruntime.ReasonRegistrationDraining
	})
	g.open()
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("unregister: %v", err)
		}
	}
	if err := <-invErr; err != nil {
		t.Fatal(err)
	}
}

// Shutdown drains every registration, closes every worker and refuses new
// registrations.
func TestShutdownClosesEverything(t *testing.T) {
	g := newGate()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	a := h.mustReady("run-a", 1)
	h.mustReady("run-b", 1)
	invErr := h.hold(t, g, a)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wantCode(t, <-invErr, codes.Aborted, functionruntime.ReasonInvocationAborted)
	for i, w := range ad.allWorkers() {
		if !w.closed.Load() {
			t.Errorf("worker %d not closed", i)
		}
	}
	_, err := h.register("run-c", 1, digest("run-c"))
	wantCode(t, err, codes.Unavailable, functionruntime.ReasonShuttingDown)
	_, err = h.status(a)
	wantCode(t, err, codes.NotFound, functionruntime.ReasonRegistrationNotFound)
}

// "Runtime logs are structured by Run UID and invocation ID": every line the
// server writes about a registration carries run_uid, and every line written
// during an invocation (including the adapter's, through Invocation.Logger)
// carries invocation_id.
func TestLogsCarryRunUIDAndInvocationID(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-log", 1)
	if _, err := h.invoke(ref, "inv-log", "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.unregister(ref, false, 0); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(h.logs.String()), "\n")
	if len(lines) < 5 {
		t.Fatalf("only %d log lines:\n%s", len(lines), h.logs.String())
	}
	var sawHandler, sawInvocation bool
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		// The process's one "worker limits" line (whichever test
		// starts a server first logs it) belongs to no registration.
		if m["run_uid"] != "run-log" && m["message"] != "worker limits" {
			t.Errorf("log line without run_uid: %s", line)
		}
		msg, _ := m["message"].(string)
		if strings.Contains(msg, "invocation") || msg == "fake handler running" {
			sawInvocation = true
			if m["invocation_id"] != "inv-log" {
				t.Errorf("invocation log line without invocation_id: %s", line)
			}
		}
		if msg == "fake handler running" {
			sawHandler = true
		}
		if strings.Contains(line, "{}") {
			t.Errorf("input written to the log: %s", line)
		}
	}
	if !sawHandler || !sawInvocation {
		t.Errorf("missing invocation lines (handler %v, server %v):\n%s", sawHandler, sawInvocation, h.logs.String())
	}
}

// Shutdown reports a worker that could not be closed cleanly, naming its
// Run; Unregister still removes the registration.
func TestShutdownReportsCloseErrors(t *testing.T) {
	ad := &fakeAdapter{closeErr: errors.New("process group survived SIGKILL")}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-a", 1)
	h.mustReady("run-b", 1)
	if _, err := h.unregister(ref, true, 0); err != nil {
		t.Fatalf("unregister with a failing Close: %v", err)
	}
	_, err := h.status(ref)
	wantCode(t, err, codes.NotFound, functionruntime.ReasonRegistrationNotFound)
	err = h.srv.Shutdown(context.Background())
	if err == nil || !strings.Contains(err.Error(), "run-b") || !strings.Contains(err.Error(), "survived SIGKILL") {
		t.Fatalf("Shutdown = %v, want the close error of run-b", err)
	}
}
