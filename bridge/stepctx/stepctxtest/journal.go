// Package stepctxtest provides an in-memory stepctx.Journal for tests of
// the context endpoint and of its clients (the fnbridge command, the
// Python module): no restate-server, no time.
package stepctxtest

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
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
	// State is the invocation's durable state (nil: empty); state writes
	// apply to it, as Restate applies journaled writes.
	State map[string][]byte
	// Lazy marks reads as lazy round trips (the Entry says so); without it
	// they are eager. The values are State's either way.
	Lazy bool
	// CancelNextWait makes the next Await fail with the invocation's
	// cancellation (stepctx.Cancelled), once, as Restate's CANCEL does to
	// a handler that takes it as a failure.
	CancelNextWait bool
	// RunStartError, when set, is what RunStart returns (after
	// BeforeRunStart), journaling nothing: stepctx.Cancelled() fails the
	// step alone, stepctx.ErrSuspended ends the attempt.
	RunStartError error
	// AlwaysReplaying makes Replaying true whatever is recorded, as for
	// an attempt whose journal holds entries this Journal does not model:
	// the function then waits for the answer of every run/start.
	AlwaysReplaying bool

	mu           sync.Mutex
	entries      []*Entry
	cursor       int
	attempt      int
	sends        int
	suspendAfter []time.Duration
	failures     []string
	awakeables   int                       // created in this attempt
	signals      map[string]*Entry         // awakeables by id, across attempts
	promises     map[string]stepctx.Result // completed workflow promises
}

// Entry is one journaled command.
type Entry struct {
	// Kind is "run", "sleep", "call", "send", "state-get", "state-keys",
	// "state-set", "state-clear", "state-clear-all", "complete-awakeable",
	// "promise-get", "promise-peek", "promise-complete" or "cancel"; an
	// awakeable's Future (never journaled) is an Entry of kind
	// "awakeable".
	Kind string
	// Name is a run's name, a state key, a promise's name, an awakeable's
	// id or the cancelled invocation's id.
	Name string
	// Value is a state write's value; Keys a listing's keys.
	Value []byte
	Keys  []string
	// Lazy marks a state read or listing that was a lazy round trip.
	Lazy bool
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
	// Done reports whether a timer, call, awakeable or promise is
	// complete, a state read found a value, a peek found the promise
	// completed, or a promise completion was the first.
	Done bool
	// StartedDone marks a run started through RunStartDone: its closure
	// had run when the start was served (stepctx.DoneRunStarter).
	StartedDone bool
}

var _ stepctx.Journal = (*Journal)(nil)

// Restart begins the next attempt: commands replay from the start.
func (j *Journal) Restart() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cursor = 0
	j.attempt++
	j.awakeables = 0
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
	case "sleep", "state-keys", "state-clear-all":
		return e.Kind
	}
	return fmt.Sprintf("%s %q", e.Kind, e.Name)
}

// RunStart implements stepctx.Journal.
func (j *Journal) RunStart(ctx context.Context, name string) (*stepctx.Result, stepctx.Future, error) {
	if j.BeforeRunStart != nil {
		j.BeforeRunStart(ctx, name)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if j.RunStartError != nil {
		return nil, nil, j.RunStartError
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

// RunStartDone implements stepctx.DoneRunStarter: RunStart, marking the
// run's Entry (StartedDone) when it executes.
func (j *Journal) RunStartDone(ctx context.Context, name string) (*stepctx.Result, stepctx.Future, error) {
	r, f, err := j.RunStart(ctx, name)
	if e, ok := f.(*Entry); ok {
		j.mu.Lock()
		e.StartedDone = true
		j.mu.Unlock()
	}
	return r, f, err
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
	if j.CancelNextWait {
		j.CancelNextWait = false
		return nil, stepctx.Cancelled()
	}
	out := make([]*stepctx.Result, len(futures))
	done := 0
	for i, f := range futures {
		e, ok := f.(*Entry)
		if !ok || e.Kind != "sleep" && e.Kind != "call" && e.Kind != "awakeable" && e.Kind != "promise-get" {
			return nil, fmt.Errorf("Await of %T, not a timer, call, awakeable or promise of this journal", f)
		}
		if e.Kind == "promise-get" && !e.Done {
			if r, ok := j.promises[e.Name]; ok {
				e.Result, e.Done = &r, true
			}
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

// Replaying implements stepctx.Journal: the attempt's next command
// replays a recorded one.
func (j *Journal) Replaying() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.AlwaysReplaying || j.cursor < len(j.entries)
}

// sameName matches a replayed entry by name.
func sameName(name string) func(*Entry) bool {
	return func(r *Entry) bool { return r.Name == name }
}

// GetState implements stepctx.Journal: a replayed read returns what was
// read when it was journaled.
func (j *Journal) GetState(_ context.Context, name string) ([]byte, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	v, found := j.State[name]
	e, err := j.next(&Entry{Kind: "state-get", Name: name, Value: v, Done: found, Lazy: j.Lazy}, sameName(name))
	if err != nil {
		return nil, false, err
	}
	return e.Value, e.Done, nil
}

// StateKeys implements stepctx.Journal.
func (j *Journal) StateKeys(context.Context) ([]string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	keys := make([]string, 0, len(j.State))
	for k := range j.State {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e, err := j.next(&Entry{Kind: "state-keys", Keys: keys, Lazy: j.Lazy}, func(*Entry) bool { return true })
	if err != nil {
		return nil, err
	}
	return e.Keys, nil
}

// write journals a state write and applies it when it is new.
func (j *Journal) write(e *Entry, apply func()) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	got, err := j.next(e, sameName(e.Name))
	if err == nil && got == e {
		if j.State == nil {
			j.State = map[string][]byte{}
		}
		apply()
	}
	return err
}

// SetState implements stepctx.Journal.
func (j *Journal) SetState(_ context.Context, name string, value []byte) error {
	return j.write(&Entry{Kind: "state-set", Name: name, Value: value}, func() { j.State[name] = value })
}

// ClearState implements stepctx.Journal.
func (j *Journal) ClearState(_ context.Context, name string) error {
	return j.write(&Entry{Kind: "state-clear", Name: name}, func() { delete(j.State, name) })
}

// ClearAllState implements stepctx.Journal.
func (j *Journal) ClearAllState(context.Context) error {
	return j.write(&Entry{Kind: "state-clear-all"}, func() { clear(j.State) })
}

// AwakeableID is the id of the n-th awakeable (from 0) an attempt creates:
// real-shaped (sign_1, base64url of a 24-byte invocation id and the
// signal index from 17), since the endpoint refuses any other.
func AwakeableID(n int) string {
	b := binary.BigEndian.AppendUint32([]byte("fnbridge-fake-invocation"), uint32(17+n))
	return "sign_1" + base64.RawURLEncoding.EncodeToString(b)
}

// Awakeable implements stepctx.Journal: ids follow creation order, the
// same on every attempt; ResolveAwakeable completes one.
func (j *Journal) Awakeable(context.Context) (string, stepctx.Future, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	id := AwakeableID(j.awakeables)
	j.awakeables++
	return id, j.signal(id), nil
}

// signal is the Future of awakeable id, made at its first mention.
// Callers hold j.mu.
func (j *Journal) signal(id string) *Entry {
	if j.signals == nil {
		j.signals = map[string]*Entry{}
	}
	e := j.signals[id]
	if e == nil {
		e = &Entry{Kind: "awakeable", Name: id}
		j.signals[id] = e
	}
	return e
}

// ResolveAwakeable completes the awakeable id (created in this or an
// earlier attempt, or not yet) with res, as the ingress would.
func (j *Journal) ResolveAwakeable(id string, res stepctx.Result) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e := j.signal(id)
	e.Result, e.Done = &res, true
}

// CompleteAwakeable implements stepctx.Journal.
func (j *Journal) CompleteAwakeable(_ context.Context, id string, res stepctx.Result) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := j.next(&Entry{Kind: "complete-awakeable", Name: id, Result: &res}, sameName(id))
	return err
}

// Promise implements stepctx.Journal: the Future completes once the
// promise is completed (CompletePromise, or ResolvePromise from outside).
func (j *Journal) Promise(_ context.Context, name string) (stepctx.Future, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next(&Entry{Kind: "promise-get", Name: name}, sameName(name))
}

// ResolvePromise completes the promise name, as another handler of the
// workflow would; false if it was completed already.
func (j *Journal) ResolvePromise(name string, res stepctx.Result) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.completePromise(name, res)
}

func (j *Journal) completePromise(name string, res stepctx.Result) bool {
	if _, done := j.promises[name]; done {
		return false
	}
	if j.promises == nil {
		j.promises = map[string]stepctx.Result{}
	}
	j.promises[name] = res
	return true
}

// PeekPromise implements stepctx.Journal: a replayed peek returns what
// was seen when it was journaled.
func (j *Journal) PeekPromise(_ context.Context, name string) (*stepctx.Result, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e := &Entry{Kind: "promise-peek", Name: name}
	if r, ok := j.promises[name]; ok {
		e.Result, e.Done = &r, true
	}
	got, err := j.next(e, sameName(name))
	if err != nil || !got.Done {
		return nil, err
	}
	r := *got.Result
	return &r, nil
}

// CompletePromise implements stepctx.Journal; completing a promise a
// second time fails with 409, as Restate answers.
func (j *Journal) CompletePromise(_ context.Context, name string, res stepctx.Result) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	e := &Entry{Kind: "promise-complete", Name: name, Result: &res}
	got, err := j.next(e, sameName(name))
	if err != nil {
		return err
	}
	if got == e {
		e.Done = j.completePromise(name, res)
	}
	if !got.Done {
		return &stepctx.CallFailedError{Failure: stepctx.Failure{Code: 409, Message: fmt.Sprintf("promise %q was completed already", name)}}
	}
	return nil
}

// CancelInvocation implements stepctx.Journal.
func (j *Journal) CancelInvocation(_ context.Context, id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := j.next(&Entry{Kind: "cancel", Name: id}, sameName(id))
	return err
}
