package bridge

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// localJournal is the Journal of `bridge invoke` for a steps-mode
// handler: no Restate behind it, the journal held in memory. What only
// Restate can do (calls to other handlers, sends) fails with
// NeedsRestateError. Every call is recorded in order, so that a new
// attempt against the same journal (InvokeLocal, after a suspension)
// replays the recorded results as Restate would: steps return their
// values without running, sleeps keep their wake-up times.
type localJournal struct {
	id    string
	seed  uint64
	state map[string][]byte

	// suspends: a wait not complete within the suspension budget ends
	// the attempt with *localSuspended (InvokeLocal); otherwise every
	// wait blocks the one attempt (Invoke).
	suspends bool
	// suspendAfter is the budget when Await is passed none.
	suspendAfter time.Duration

	entries []*localEntry
	pos     int // the entry the attempt's next call replays; reset per attempt

	// held counts the bytes recorded (names and values); maxHeld bounds
	// it as max_journal_bytes bounds a journal under Restate, so a
	// function that outgrows it fails here too rather than growing the
	// process without end. 0: no bound.
	held, maxHeld int
}

// localEntry is one recorded journal call.
type localEntry struct {
	what string // the call as a mismatch message names it
	// A run's result, once it completed with a value or terminal failure.
	done bool
	res  stepctx.Result
	// A sleep's timer; a state read's answer; a state write's value.
	timer *localTimer
	value []byte
	found bool
	keys  []string
}

var _ stepctx.Journal = (*localJournal)(nil)

// newLocalJournal has a fresh invocation id, inv_local_ and 20 hex
// digits, and a random seed derived from it.
func newLocalJournal() *localJournal {
	var b [10]byte
	_, _ = rand.Read(b[:])
	id := "inv_local_" + hex.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(id))
	return &localJournal{id: id, seed: binary.BigEndian.Uint64(sum[:8])}
}

// MaxLocalAttempts bounds the attempts of one InvokeLocal. Every attempt
// after the first follows a suspension whose wait has completed, so each
// replays further; this many means a function that keeps waiting.
const MaxLocalAttempts = 1000

// LocalSuspension is one suspension of an InvokeLocal: the attempt ended,
// and the next one starts at Until.
type LocalSuspension struct {
	// Attempt is the number of the attempt that suspended, from 1.
	Attempt int
	// Until is when its wait completes, and the next attempt starts.
	Until time.Time
	// Waiting names what it waits for: "a durable sleep", "3 durable sleeps".
	Waiting string
	// SuspendAfter is the handler's suspend_after, which the wait outlasted
	// unless ByTimeout.
	SuspendAfter time.Duration
	// ByTimeout: the wait could not end in the first half of the attempt's
	// Timeout (which counts short waits too), and suspended sooner.
	ByTimeout bool
	Timeout   time.Duration
}

// InvokeLocal is InvokeKeyed as `bridge invoke` runs it. A steps-mode
// function whose wait is not complete within the handler's suspend_after
// suspends as under Restate: the attempt ends (the worker is released,
// the function's processes stopped), onSuspend (when not nil) is told,
// and once the wait is over a new attempt runs against the same
// in-memory journal, replaying it: recorded steps return their values
// without running. So the handler's timeout bounds each attempt's code,
// never a durable wait. It ends when an attempt returns or fails, when
// ctx ends, or at MaxLocalAttempts. Other handlers run as InvokeKeyed
// runs them.
func (b *Bridge) InvokeLocal(ctx context.Context, service, handler, key string, input []byte, onSuspend func(LocalSuspension)) (*Result, error) {
	p, ok := b.pools[service+"/"+handler]
	if !ok || !p.h.StepsMode() || key != "" && !b.keyed[p].keyed {
		return b.InvokeKeyed(ctx, service, handler, key, input)
	}
	return b.invokeLocalSteps(b.keyed[p].withKey(ctx, key), p, input, onSuspend)
}

// invokeLocalSteps is InvokeLocal of a steps-mode handler, ctx carrying
// the key.
func (b *Bridge) invokeLocalSteps(ctx context.Context, p *pool, input []byte, onSuspend func(LocalSuspension)) (*Result, error) {
	j := newLocalJournal()
	j.suspends, j.suspendAfter = true, p.h.SuspendAfter.Std()
	// The input is journaled too, and every entry costs more than its
	// bytes: counted as localEntryBytes each.
	j.maxHeld, j.held = b.endpoint.MaxJournalBytes(), len(input)
	for attempt := 1; ; attempt++ {
		j.pos = 0
		res, _, err := b.runSteps(ctx, p, j, j.id, input, p.h.LocalInputContentType())
		var s *localSuspended
		if !errors.As(err, &s) {
			if err == nil && j.pos < len(j.entries) {
				err = &JournalMismatchError{Index: j.pos, Recorded: j.entries[j.pos].what}
			}
			return localOutcome(ctx, res, err)
		}
		if attempt == MaxLocalAttempts {
			return nil, &Error{Class: ClassPermanent, Cause: err, Message: fmt.Sprintf(
				"the function suspended %d times: bridge invoke stops here (under Restate it would resume at %s)", attempt, s.until.Format(time.RFC3339))}
		}
		if onSuspend != nil {
			waiting := "a durable sleep"
			if s.timers > 1 {
				waiting = fmt.Sprintf("%d durable sleeps", s.timers)
			}
			onSuspend(LocalSuspension{Attempt: attempt, Until: s.until, Waiting: waiting, SuspendAfter: j.suspendAfter,
				ByTimeout: s.budget < j.suspendAfter, Timeout: p.h.Timeout.Std()})
		}
		timer := time.NewTimer(time.Until(s.until))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, &Error{Class: ClassUnavailable, Cause: ctx.Err(), Message: fmt.Sprintf(
				"interrupted while suspended, before attempt %d: %v", attempt+1, context.Cause(ctx))}
		case <-timer.C:
		}
	}
}

// localOutcome is what `bridge invoke` reports for an attempt's end.
func localOutcome(ctx context.Context, res *Result, err error) (*Result, error) {
	var nr *NeedsRestateError
	var mm *JournalMismatchError
	var sf *stepctx.StepFailedError
	var tl *stepctx.StepTooLargeError
	var jl *LocalJournalTooLargeError
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		// Whatever the attempt's end reads as, ctx ended it.
		return nil, &Error{Class: ClassUnavailable, Cause: err, Message: fmt.Sprintf("interrupted: %v", context.Cause(ctx))}
	case errors.As(err, &nr):
		// Not the function's failure, nor one Restate would retry: the
		// error says what the function needs, without a class or code.
		return nil, nr
	case errors.As(err, &mm):
		return nil, &Error{Class: ClassPermanent, Message: mm.Error() + " (under Restate: a 570 journal mismatch)", Cause: err}
	case errors.As(err, &tl):
		return nil, &Error{Class: ClassPermanent, Message: tl.Error() + " (under Restate the invocation is paused)", Cause: err}
	case errors.As(err, &jl):
		return nil, &Error{Class: ClassPermanent, Message: jl.Error() + " (under Restate: 571, and the invocation is paused)", Cause: err}
	case errors.As(err, &sf):
		return nil, &Error{Class: ClassHandler, Message: sf.Error() + " (under Restate the attempt is retried)", Cause: err}
	}
	return nil, err
}

// NeedsRestateError is why a context call failed under `bridge invoke`.
type NeedsRestateError struct {
	// Op names the operation, in both languages' spelling where it has one.
	Op string
}

func (e *NeedsRestateError) Error() string {
	return fmt.Sprintf("%s needs Restate: run it through `bridge serve` and invoke it via Restate (`bridge invoke` runs the function alone, without Restate)", e.Op)
}

// JournalMismatchError is why an attempt of `bridge invoke` that replays
// the journal failed: the function made another context call than the
// one recorded at that position (under Restate, a 570 journal mismatch).
type JournalMismatchError struct {
	// Index is the position of the call in the journal, from 0.
	Index int
	// Recorded and Issued name the two calls; Issued is empty when the
	// function returned before making the recorded one.
	Recorded, Issued string
}

func (e *JournalMismatchError) Error() string {
	if e.Issued == "" {
		return fmt.Sprintf("journal mismatch: the function returned after %d context calls, but the journal recorded %s next (a replay must make the same calls in the same order)", e.Index, e.Recorded)
	}
	return fmt.Sprintf("journal mismatch at call %d: the journal recorded %s, the function made %s (a replay must make the same calls in the same order)", e.Index, e.Recorded, e.Issued)
}

// localSuspended is how Await ends an attempt that must suspend:
// ErrSuspended, with when the wait completes.
type localSuspended struct {
	until  time.Time
	timers int
	budget time.Duration // how long the wait was given
}

func (e *localSuspended) Error() string {
	return fmt.Sprintf("%v until %s", stepctx.ErrSuspended, e.until.Format(time.RFC3339Nano))
}

func (e *localSuspended) Unwrap() error { return stepctx.ErrSuspended }

// replay returns the recorded entry of the attempt's next call, which
// must be what, or nil when the call is new (then record appends it).
func (j *localJournal) replay(what string) (*localEntry, error) {
	if j.pos == len(j.entries) {
		return nil, nil
	}
	e := j.entries[j.pos]
	if e.what != what {
		return nil, &JournalMismatchError{Index: j.pos, Recorded: e.what, Issued: what}
	}
	j.pos++
	return e, nil
}

// LocalJournalTooLargeError is why `bridge invoke` stopped a function
// whose journal outgrew max_journal_bytes.
type LocalJournalTooLargeError struct {
	// What is the call that brought the journal over Limit, to Size bytes.
	What        string
	Size, Limit int
}

func (e *LocalJournalTooLargeError) Error() string {
	return fmt.Sprintf("the invocation's journal exceeds max_journal_bytes, %d bytes: %s brings it to %d", e.Limit, e.What, e.Size)
}

// localEntryBytes is what one recorded call counts for beside its name and
// value: about what it costs in memory, and no less than its frame's
// header and fields in Restate's journal.
const localEntryBytes = 64

// hold accounts for n more bytes recorded by the call what.
func (j *localJournal) hold(what string, n int) error {
	j.held += n
	if j.maxHeld > 0 && j.held > j.maxHeld {
		return &LocalJournalTooLargeError{What: what, Size: j.held, Limit: j.maxHeld}
	}
	return nil
}

// record appends e, a new call, holding its name and value.
func (j *localJournal) record(e *localEntry) (*localEntry, error) {
	n := localEntryBytes + len(e.what) + len(e.value)
	for _, k := range e.keys {
		n += len(k)
	}
	if err := j.hold(e.what, n); err != nil {
		return nil, err
	}
	j.entries = append(j.entries, e)
	j.pos++
	return e, nil
}

// localRun is the future of an executing run; localTimer of a sleep.
type (
	localRun   struct{ e *localEntry }
	localTimer struct{ at time.Time }
)

func (j *localJournal) RunStart(_ context.Context, name string) (*stepctx.Result, stepctx.Future, error) {
	what := fmt.Sprintf("run %q", name)
	e, err := j.replay(what)
	switch {
	case err != nil:
		return nil, nil, err
	case e == nil:
		if e, err = j.record(&localEntry{what: what}); err != nil {
			return nil, nil, err
		}
	case e.done:
		res := e.res
		return &res, nil, nil
	}
	// New, or recorded without a result: it executes (again).
	return nil, &localRun{e: e}, nil
}

// RunComplete records a value or terminal failure; a retryable failure
// records nothing (the Server ends the attempt).
func (j *localJournal) RunComplete(_ context.Context, run stepctx.Future, out stepctx.RunOutcome) error {
	r, ok := run.(*localRun)
	if !ok {
		return fmt.Errorf("bridge invoke: future %T is not a run", run)
	}
	if out.Retryable == nil {
		n := len(out.Result.Value)
		if f := out.Result.Failure; f != nil {
			n = len(f.Message)
		}
		if err := j.hold(r.e.what+"'s result", n); err != nil {
			return err
		}
		r.e.done, r.e.res = true, out.Result
	}
	return nil
}

// Sleep records the timer's wake-up time; a replayed sleep keeps the
// recorded one, as Restate's does.
func (j *localJournal) Sleep(_ context.Context, d time.Duration) (stepctx.Future, error) {
	e, err := j.replay("sleep")
	if err != nil {
		return nil, err
	}
	if e == nil {
		if e, err = j.record(&localEntry{what: "sleep", timer: &localTimer{at: time.Now().Add(d)}}); err != nil {
			return nil, err
		}
	}
	return e.timer, nil
}

func (j *localJournal) Call(context.Context, stepctx.CallRequest) (stepctx.Future, error) {
	return nil, &NeedsRestateError{Op: "a durable call (fnbridge.call in Python, fnbridge call in Bash)"}
}

func (j *localJournal) Send(context.Context, stepctx.SendRequest) (string, error) {
	return "", &NeedsRestateError{Op: "a one-way call (fnbridge.send in Python, fnbridge send in Bash)"}
}

// Await waits for the timers' deadlines (the last one for AwaitAll, the
// first for AwaitAny). When the journal suspends and that is further off
// than suspendAfter, it waits suspendAfter, as Restate's journal does,
// and then suspends the attempt.
func (j *localJournal) Await(ctx context.Context, futures []stepctx.Future, mode stepctx.AwaitMode, suspendAfter time.Duration) ([]*stepctx.Result, error) {
	var until time.Time
	for i, f := range futures {
		t, ok := f.(*localTimer)
		if !ok {
			return nil, fmt.Errorf("bridge invoke: future %T cannot be awaited", f)
		}
		if i == 0 || mode == stepctx.AwaitAll && t.at.After(until) || mode == stepctx.AwaitAny && t.at.Before(until) {
			until = t.at
		}
	}
	if suspendAfter <= 0 {
		suspendAfter = j.suspendAfter
	}
	d := time.Until(until)
	suspend := j.suspends && d > suspendAfter
	if suspend {
		d = suspendAfter
	}
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
	if suspend {
		return nil, &localSuspended{until: until, timers: len(futures), budget: suspendAfter}
	}
	res := make([]*stepctx.Result, len(futures))
	for i, f := range futures {
		if !f.(*localTimer).at.After(until) {
			res[i] = &stepctx.Result{}
		}
	}
	return res, nil
}

func (j *localJournal) InvocationID() string { return j.id }

func (j *localJournal) RandomSeed() uint64 { return j.seed }

// Replaying: the attempt's next call replays a recorded entry.
func (j *localJournal) Replaying() bool { return j.pos < len(j.entries) }

// State under `bridge invoke` lives in memory for the one run: it starts
// empty and is gone afterwards (only Restate keeps state). Reads and
// writes are recorded like every call, so a replayed read returns what
// the first attempt read, not what was written after it. Awakeables,
// promises and cancelling need Restate.

func (j *localJournal) GetState(_ context.Context, name string) ([]byte, bool, error) {
	what := fmt.Sprintf("state get %q", name)
	e, err := j.replay(what)
	if err != nil {
		return nil, false, err
	}
	if e == nil {
		v, ok := j.state[name]
		if e, err = j.record(&localEntry{what: what, value: v, found: ok}); err != nil {
			return nil, false, err
		}
	}
	return e.value, e.found, nil
}

func (j *localJournal) StateKeys(context.Context) ([]string, error) {
	e, err := j.replay("state keys")
	if err != nil {
		return nil, err
	}
	if e == nil {
		keys := make([]string, 0, len(j.state))
		for k := range j.state {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if e, err = j.record(&localEntry{what: "state keys", keys: keys}); err != nil {
			return nil, err
		}
	}
	return slices.Clone(e.keys), nil
}

// write records a state write and applies it when it is new: a replayed
// one took effect in the attempt that recorded it.
func (j *localJournal) write(what string, value []byte, apply func()) error {
	e, err := j.replay(what)
	switch {
	case err != nil:
		return err
	case e == nil:
		if _, err := j.record(&localEntry{what: what, value: value}); err != nil {
			return err
		}
		apply()
	case !bytes.Equal(e.value, value):
		return &JournalMismatchError{Index: j.pos - 1, Recorded: what, Issued: what + " with another value"}
	}
	return nil
}

func (j *localJournal) SetState(_ context.Context, name string, value []byte) error {
	return j.write(fmt.Sprintf("state set %q", name), value, func() {
		if j.state == nil {
			j.state = map[string][]byte{}
		}
		j.state[name] = value
	})
}

func (j *localJournal) ClearState(_ context.Context, name string) error {
	return j.write(fmt.Sprintf("state clear %q", name), nil, func() { delete(j.state, name) })
}

func (j *localJournal) ClearAllState(context.Context) error {
	return j.write("state clear-all", nil, func() { clear(j.state) })
}

func (j *localJournal) Awakeable(context.Context) (string, stepctx.Future, error) {
	return "", nil, &NeedsRestateError{Op: "an awakeable"}
}

func (j *localJournal) CompleteAwakeable(context.Context, string, stepctx.Result) error {
	return &NeedsRestateError{Op: "completing an awakeable"}
}

func (j *localJournal) Promise(context.Context, string) (stepctx.Future, error) {
	return nil, &NeedsRestateError{Op: "a workflow promise"}
}

func (j *localJournal) PeekPromise(context.Context, string) (*stepctx.Result, error) {
	return nil, &NeedsRestateError{Op: "a workflow promise"}
}

func (j *localJournal) CompletePromise(context.Context, string, stepctx.Result) error {
	return &NeedsRestateError{Op: "a workflow promise"}
}

func (j *localJournal) CancelInvocation(context.Context, string) error {
	return &NeedsRestateError{Op: "cancelling an invocation"}
}
