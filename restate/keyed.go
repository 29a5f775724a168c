package restate

import (
	"sort"

	"github.com/fnbridge/fnbridge/journal"
)

// The durable operations of keyed services (state, workflow promises) and
// of every service (awakeables, cancelling another invocation). Like the
// other durable operations they are not safe for concurrent use, and
// ErrSuspended, ErrCancelled (without DeliverCancel) and ErrAttemptEnded
// end the attempt. Which handler may use which is the caller's to decide:
// the runtime refuses state in plain services and promises outside
// workflows, but only after the attempt journaled them.

// lookupResult waits for completion id (a runtime round trip: a lazy
// state read, a promise peek or completion) and returns its result.
func (inv *invocation) lookupResult(id uint32) (journal.Result, error) {
	res, st := inv.await(id)
	if st != journal.Ready {
		return journal.Result{}, inv.statusErr(st)
	}
	return res, nil
}

// GetState reads the state key name: from StartMessage's eager state when
// it is complete or holds the key (GetEagerStateCommand), else with a
// GetLazyStateCommand round trip. Writes of this invocation are seen.
// found is false when the key has no value.
func (c invocationContext) GetState(name string) (value []byte, found bool, err error) {
	inv := c.inv
	inv.mu.Lock()
	v, found, lazy, err := inv.m.GetState(name)
	inv.mu.Unlock()
	inv.flush()
	if err != nil {
		return nil, false, ErrAttemptEnded
	}
	if lazy == 0 {
		return v, found, nil
	}
	res, err := inv.lookupResult(lazy)
	if err != nil {
		return nil, false, err
	}
	if res.Void {
		return nil, false, nil
	}
	return res.Value, true, nil
}

// StateKeys lists the state keys, sorted: eagerly when the local view of
// the state is complete, else with a GetLazyStateKeysCommand round trip.
func (c invocationContext) StateKeys() ([]string, error) {
	inv := c.inv
	inv.mu.Lock()
	keys, lazy, err := inv.m.GetStateKeys()
	inv.mu.Unlock()
	inv.flush()
	if err != nil {
		return nil, ErrAttemptEnded
	}
	if lazy != 0 {
		res, err := inv.lookupResult(lazy)
		if err != nil {
			return nil, err
		}
		keys = res.StateKeys
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = string(k)
	}
	sort.Strings(out)
	return out, nil
}

// issue runs one completable command, flushes it and returns its
// completion id.
func (inv *invocation) issue(op func(m *journal.Machine) (uint32, error)) (uint32, error) {
	inv.mu.Lock()
	id, err := op(inv.m)
	inv.mu.Unlock()
	inv.flush()
	if err != nil {
		return 0, ErrAttemptEnded
	}
	return id, nil
}

// journaled runs one non-completable command and flushes it.
func (inv *invocation) journaled(op func(m *journal.Machine) error) error {
	inv.mu.Lock()
	err := op(inv.m)
	inv.mu.Unlock()
	inv.flush()
	if err != nil {
		return ErrAttemptEnded
	}
	return nil
}

// SetState sets the state key name to value (SetStateCommand).
func (c invocationContext) SetState(name string, value []byte) error {
	return c.inv.journaled(func(m *journal.Machine) error { return m.SetState(name, value) })
}

// ClearState removes the state key name (ClearStateCommand).
func (c invocationContext) ClearState(name string) error {
	return c.inv.journaled(func(m *journal.Machine) error { return m.ClearState(name) })
}

// ClearAllState removes every state key (ClearAllStateCommand).
func (c invocationContext) ClearAllState() error {
	return c.inv.journaled(func(m *journal.Machine) error { return m.ClearAllState() })
}

// Awakeable creates an awakeable: its id (sign_1...), which another
// invocation or an outside system completes (CompleteAwakeable, or the
// ingress's /restate/awakeables/{id}/resolve and /reject), and the Future
// of its result for Await. Creating one journals nothing.
func (c invocationContext) Awakeable() (string, Future, error) {
	inv := c.inv
	inv.mu.Lock()
	id, h, err := inv.m.Awakeable()
	inv.mu.Unlock()
	if err != nil {
		return "", nil, ErrAttemptEnded
	}
	return id, &future{inv: inv, m: inv.m, kind: awakeableFuture, h: h}, nil
}

// CompleteAwakeable resolves the awakeable id with out.Value, or rejects
// it with out.Failure (CompleteAwakeableCommand).
func (c invocationContext) CompleteAwakeable(id string, out Outcome) error {
	res := resultOfOutcome(out)
	return c.inv.journaled(func(m *journal.Machine) error { return m.CompleteAwakeable(id, res) })
}

func resultOfOutcome(out Outcome) journal.Result {
	if out.Failure != nil {
		return journal.Result{Failure: &journal.Failure{Code: orInternal(out.Failure.Code), Message: out.Failure.Message}}
	}
	return journal.Result{Value: out.Value}
}

// Promise returns the Future of the workflow promise name
// (GetPromiseCommand): it completes with the promise's value, or its
// failure when rejected.
func (c invocationContext) Promise(name string) (Future, error) {
	inv := c.inv
	id, err := inv.issue(func(m *journal.Machine) (uint32, error) { return m.GetPromise(name) })
	if err != nil {
		return nil, err
	}
	return &future{inv: inv, m: inv.m, kind: promiseFuture, id: id, h: journal.CompletionHandle(id)}, nil
}

// PeekPromise reads the workflow promise name without waiting for it to
// be completed (PeekPromiseCommand): nil while it is unresolved, else its
// value or failure.
func (c invocationContext) PeekPromise(name string) (*Outcome, error) {
	inv := c.inv
	id, err := inv.issue(func(m *journal.Machine) (uint32, error) { return m.PeekPromise(name) })
	if err != nil {
		return nil, err
	}
	res, err := inv.lookupResult(id)
	if err != nil {
		return nil, err
	}
	if res.Void {
		return nil, nil
	}
	return outcome(res), nil
}

// CompletePromise resolves (out.Value) or rejects (out.Failure) the
// workflow promise name (CompletePromiseCommand). A promise completed
// before cannot be completed again: the runtime's failure is returned as a
// *TerminalError.
func (c invocationContext) CompletePromise(name string, out Outcome) error {
	inv := c.inv
	res := resultOfOutcome(out)
	id, err := inv.issue(func(m *journal.Machine) (uint32, error) { return m.CompletePromise(name, res) })
	if err != nil {
		return err
	}
	done, err := inv.lookupResult(id)
	if err != nil {
		return err
	}
	if done.Failure != nil {
		return &TerminalError{Code: done.Failure.Code, Message: done.Failure.Message}
	}
	return nil
}

// CancelInvocation asks Restate to cancel the invocation id (a
// SendSignalCommand with the built-in CANCEL signal). It does not wait for
// the cancellation.
func (c invocationContext) CancelInvocation(id string) error {
	return c.inv.journaled(func(m *journal.Machine) error { return m.CancelInvocation(id) })
}
