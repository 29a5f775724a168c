package functionruntime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// fakeClock advances one second each time it is read, so every recorded
// activity time is distinct and predictable.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func (c *fakeClock) last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// "last_activity_unix_nano is initialized when the registration becomes
// ready, then updated when an invocation starts or completes."
func TestStatusLastActivityAndInFlight(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	g := newGate()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, clock.Now)
	ref := h.mustReady("run-1", 1)
	readyAt := clock.last()

	s, err := h.status(ref)
	if err != nil {
		t.Fatal(err)
	}
	if s.GetLastActivityUnixNano() != readyAt.UnixNano() || s.GetInFlight() != 0 || s.GetState() != stateReady {
		t.Fatalf("after READY: %v; want last activity %d, nothing in flight", s, readyAt.UnixNano())
	}
	if s.GetRegistration().GetRegistrationId() != ref.GetRegistrationId() {
		t.Fatalf("registration = %v", s.GetRegistration())
	}
	if s.GetFatalError() != "" {
		t.Fatalf("fatal_error on a READY registration: %q", s.GetFatalError())
	}

	done := make(chan error, 1)
	go func() {
		_, err := h.invoke(ref, "inv", "{}")
		done <- err
	}()
	g.waitEntered(t)
	startedAt := clock.last()
	s, err = h.status(ref)
	if err != nil {
		t.Fatal(err)
	}
	if s.GetInFlight() != 1 || s.GetLastActivityUnixNano() != startedAt.UnixNano() {
		t.Fatalf("during invocation: in_flight %d, last activity %d; want 1, %d (invocation start)", s.GetInFlight(), s.GetLastActivityUnixNano(), startedAt.UnixNano())
	}
	if !startedAt.After(readyAt) {
		t.Fatal("clock did not advance")
	}
	g.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	completedAt := clock.last()
	s, err = h.status(ref)
	if err != nil {
		t.Fatal(err)
	}
	if s.GetInFlight() != 0 || s.GetLastActivityUnixNano() != completedAt.UnixNano() || !completedAt.After(startedAt) {
		t.Fatalf("after invocation: in_flight %d, last activity %d; want 0, %d (completion)", s.GetInFlight(), s.GetLastActivityUnixNano(), completedAt.UnixNano())
	}
}

// "NotFound means no registration has this Run UID; FailedPrecondition means
// its registration ID is stale, draining, or unready."
func TestStatusErrors(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	tests := []struct {
		name   string
		ref    *executorv1.FunctionRegistration
		code   codes.Code
		reason string
	}{
		{"NotFound means no registration has this Run UID", &executorv1.FunctionRegistration{RunUid: "run-2", RegistrationId: ref.GetRegistrationId()}, codes.NotFound, functionruntime.ReasonRegistrationNotFound},
		{"FailedPrecondition means its registration ID is stale", &executorv1.FunctionRegistration{RunUid: "run-1", RegistrationId: "reg_01OLD"}, codes.FailedPrecondition, functionruntime.ReasonRegistrationStale},
		{"a Runtime Server always requires a non-empty registration ID", &executorv1.FunctionRegistration{RunUid: "run-1"}, codes.InvalidArgument, functionruntime.ReasonInvalidArgument},
		{"registration must be set", nil, codes.InvalidArgument, functionruntime.ReasonInvalidArgument},
		{"run_uid must be valid", &executorv1.FunctionRegistration{RunUid: "a b", RegistrationId: "reg_x"}, codes.InvalidArgument, functionruntime.ReasonInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.status(tt.ref)
			wantCode(t, err, tt.code, tt.reason)
		})
	}
	if _, err := h.status(ref); err != nil {
		t.Fatalf("current registration: %v", err)
	}
}

// The in-process client honours an already-ended context like a network
// client does.
func TestLocalClientHonoursContext(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h.cli.FunctionStatus(ctx, &executorv1.FunctionStatusRequest{Registration: ref})
	wantCode(t, err, codes.Canceled, "")
	ctx, cancel = context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	_, err = h.cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: ref})
	wantCode(t, err, codes.DeadlineExceeded, "")
	if c := functionruntime.Classify(err); c != functionruntime.ClassTimeout {
		t.Errorf("Classify = %v, want timeout", c)
	}
}

// A caller may reuse its request after the call: the server works on a copy.
func TestLocalClientClonesRequests(t *testing.T) {
	inputs := make(chan []byte, 1)
	ad := &fakeAdapter{invoke: func(_ context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
		inputs <- inv.Input
		return functionruntime.Result{}, nil
	}}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	req := &executorv1.InvokeFunctionRequest{Registration: ref, Input: []byte("abc")}
	if _, err := h.cli.InvokeFunction(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := <-inputs
	req.Input[0] = 'X'
	if string(got) != "abc" {
		t.Fatalf("adapter input changed with the caller's request: %q", got)
	}
}
