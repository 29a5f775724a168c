// Package stepctxtest provides an in-memory stepctx.Journal for tests of
// the context endpoint and of its clients (the fnbridge command, the
// Python module): no restate-server, no time.
package stepctxtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// Journal is an in-memory journal that survives attempts: Restart begins
// the next attempt, which replays the recorded commands in order like
// Restate does (a recorded run's result is returned without executing; a
// different command at a recorded position is a journal mismatch).
//
// Timers and calls complete when journaled unless HoldSleeps or HoldCalls
// is set; an Await that cannot complete from what is already complete
// suspends at once (the fake has no clock to wait on).
type Journal struct {
	// ID is the invocation id; empty reads as "inv_fake".
	ID string
	// Seed is RandomSeed.
	Seed uint64
	// CallResult answers a call; nil echoes the input as the value.
	CallResult func(stepctx.CallRequest) stepctx.Result
	// HoldSleeps and HoldCalls leave new timers and calls pending until
	// Complete.
	HoldSleeps, HoldCalls bool
	// BeforeRunStart, when set, runs at the start of RunStart (tests block
	// in it to hold a request in flight).
	BeforeRunStart func(ctx context.Context, name string)

	mu           sync.Mutex
	entries      []*Entry
	cursor       int
	attempt      int
	sends        int
	suspendAfter []time.Duration
	failures     []string
}

// Entry is one journaled command.
type Entry struct {
	// Kind is "run", "sleep", "call" or "send".
	Kind string
	// Name is a run's name.
	Name string
	// Duration is a timer's duration.
	Duration time.Duration
	// Call is a call's or send's request.
	Call stepctx.CallRequest
	// Delay is a send's delay.
	Delay time.Duration
	// InvocationID is a send's callee invocation id.
	InvocationID string
	// Result is the completion; nil while pending (a run not completed).
	Result *stepctx.Result
	// Done reports whether a timer or call is complete.
	Done bool
}

var _ stepctx.Journal = (*Journal)(nil)

// Restart begins the next attempt: commands replay from the start.
func (j *Journal) Restart() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cursor = 0
	j.attempt++
}

// Entries returns a copy of the journal.
func (j *Journal) Entries() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Entry, len(j.entries))
	for i, e := range j.entries {
		out[i] = *e
	}
	return out
}

// Complete completes the pending timer or call at index i of the journal.
func (j *Journal) Complete(i int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries[i].Done = true
}

// SuspendAfter returns the budgets Await was called with, in order.
func (j *Journal) SuspendAfter() []time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]time.Duration(nil), j.suspendAfter...)
}

// Failures returns the messages of retryable run failures, in order.
func (j *Journal) Failures() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.failures...)
}

// next returns the recorded entry at the cursor (replay) after checking
// it is a kind command matching same, or appends e.
func (j *Journal) next(e *Entry, same func(*Entry) bool) (*Entry, error) {
	defer func() { j.cursor++ }()
	if j.cursor < len(j.entries) {
		r := j.entries[j.cursor]
		if r.Kind != e.Kind || !same(r) {
			return nil, fmt.Errorf("journal mismatch at command %d: recorded %s, got %s", j.cursor, describe(r), describe(e))
		}
		return r, nil
	}
	j.entries = append(j.entries, e)
	return e, nil
}

func describe(e *Entry) string {
	switch e.Kind {
	case "run":
		return fmt.Sprintf("run %q", e.Name)
	case "call", "send":
		return fmt.Sprintf("%s %s/%s", e.Kind, e.Call.Service, e.Call.Handler)
	}
	return e.Kind
}

// RunStart implements stepctx.Journal.
func (j *Journal) RunStart(ctx context.Context, name string) (*stepctx.Result, stepctx.Future, error) {
	if j.BeforeRunStart != nil {
		j.BeforeRunStart(ctx, name)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := j.next(&Entry{Kind: "run", Name: name}, func(r *Entry) bool { return r.Name == name })
	if err != nil {
		return nil, nil, err
	}
	if e.Result != nil {
		r := *e.Result
		return &r, nil, nil
	}
	return nil, e, nil
}

// RunComplete implements stepctx.Journal.
func (j *Journal) RunComplete(_ context.Context, run stepctx.Future, out stepctx.RunOutcome) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := run.(*Entry)
	if !ok || e.Kind != "run" {
		return fmt.Errorf("RunComplete of %T, not a run of this journal", run)
	}
	if out.Retryable != nil {
		j.failures = append(j.failures, out.Retryable.Message)
		return nil
	}
	r := out.Result
	e.Result = &r
	return nil
}

// Sleep implements stepctx.Journal.
func (j *Journal) Sleep(_ context.Context, d time.Duration) (stepctx.Future, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next(&Entry{Kind: "sleep", Duration: d, Result: &stepctx.Result{}, Done: !j.HoldSleeps},
		func(*Entry) bool { return true })
}

// Call implements stepctx.Journal.
func (j *Journal) Call(_ context.Context, req stepctx.CallRequest) (stepctx.Future, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	res := stepctx.Result{Value: req.Input}
	if j.CallResult != nil {
		res = j.CallResult(req)
	}
	return j.next(&Entry{Kind: "call", Call: req, Result: &res, Done: !j.HoldCalls},
		func(r *Entry) bool { return r.Call.Service == req.Service && r.Call.Handler == req.Handler })
}

// Send implements stepctx.Journal.
func (j *Journal) Send(_ context.Context, req stepctx.SendRequest) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.sends++
	e, err := j.next(&Entry{Kind: "send", Call: req.CallRequest, Delay: req.Delay, InvocationID: fmt.Sprintf("inv_send_%d", j.sends)},
		func(r *Entry) bool { return r.Call.Service == req.Service && r.Call.Handler == req.Handler })
	if err != nil {
		return "", err
	}
	return e.InvocationID, nil
}

// Await implements stepctx.Journal: it suspends at once when the futures
// are not complete enough.
func (j *Journal) Await(_ context.Context, futures []stepctx.Future, mode stepctx.AwaitMode, suspendAfter time.Duration) ([]*stepctx.Result, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.suspendAfter = append(j.suspendAfter, suspendAfter)
	out := make([]*stepctx.Result, len(futures))
	done := 0
	for i, f := range futures {
		e, ok := f.(*Entry)
		if !ok || e.Kind == "run" || e.Kind == "send" {
			return nil, fmt.Errorf("Await of %T, not a timer or call of this journal", f)
		}
		if e.Done {
			r := *e.Result
			out[i] = &r
			done++
		}
	}
	if done == len(futures) || mode == stepctx.AwaitAny && done > 0 {
		return out, nil
	}
	return nil, stepctx.ErrSuspended
}

// InvocationID implements stepctx.Journal.
func (j *Journal) InvocationID() string {
	if j.ID == "" {
		return "inv_fake"
	}
	return j.ID
}

// RandomSeed implements stepctx.Journal.
func (j *Journal) RandomSeed() uint64 { return j.Seed }
