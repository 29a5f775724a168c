package bridge

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// localJournal is the Journal of `bridge invoke` for a steps-mode
// handler: one run of the function with no Restate behind it. Every step
// executes and nothing is recorded, sleeps really wait, and what only
// Restate can do (calls to other handlers, sends) fails with
// NeedsRestateError.
type localJournal struct {
	id    string
	seed  uint64
	state map[string][]byte
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

// NeedsRestateError is why a context call failed under `bridge invoke`.
type NeedsRestateError struct {
	// Op names the operation, in both languages' spelling where it has one.
	Op string
}

func (e *NeedsRestateError) Error() string {
	return fmt.Sprintf("%s needs Restate: run it through `bridge serve` and invoke it via Restate (`bridge invoke` runs the function alone, without Restate)", e.Op)
}

// localRun is the future of an executing run; localTimer of a sleep.
type (
	localRun   struct{ name string }
	localTimer struct{ at time.Time }
)

func (j *localJournal) RunStart(_ context.Context, name string) (*stepctx.Result, stepctx.Future, error) {
	return nil, &localRun{name: name}, nil
}

func (j *localJournal) RunComplete(context.Context, stepctx.Future, stepctx.RunOutcome) error {
	return nil
}

func (j *localJournal) Sleep(_ context.Context, d time.Duration) (stepctx.Future, error) {
	return &localTimer{at: time.Now().Add(d)}, nil
}

func (j *localJournal) Call(context.Context, stepctx.CallRequest) (stepctx.Future, error) {
	return nil, &NeedsRestateError{Op: "a durable call (fnbridge.call in Python, fnbridge call in Bash)"}
}

func (j *localJournal) Send(context.Context, stepctx.SendRequest) (string, error) {
	return "", &NeedsRestateError{Op: "a one-way call (fnbridge.send in Python, fnbridge send in Bash)"}
}

// Await waits for the timers' real deadlines (the last one for AwaitAll,
// the first for AwaitAny); it never suspends.
func (j *localJournal) Await(ctx context.Context, futures []stepctx.Future, mode stepctx.AwaitMode, _ time.Duration) ([]*stepctx.Result, error) {
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
	if d := time.Until(until); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
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

// State under `bridge invoke` lives in memory for the one run: it starts
// empty and is gone afterwards (only Restate keeps state). Awakeables,
// promises and cancelling need Restate.

func (j *localJournal) GetState(_ context.Context, name string) ([]byte, bool, error) {
	v, ok := j.state[name]
	return v, ok, nil
}

func (j *localJournal) StateKeys(context.Context) ([]string, error) {
	keys := make([]string, 0, len(j.state))
	for k := range j.state {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

func (j *localJournal) SetState(_ context.Context, name string, value []byte) error {
	if j.state == nil {
		j.state = map[string][]byte{}
	}
	j.state[name] = value
	return nil
}

func (j *localJournal) ClearState(_ context.Context, name string) error {
	delete(j.state, name)
	return nil
}

func (j *localJournal) ClearAllState(context.Context) error {
	clear(j.state)
	return nil
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
