package restate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/fnbridge/fnbridge/journal"
)

// Future is a pending result of a durable operation of one attempt: a run
// (RunStart), a timer (Sleep) or a call (Call). It is opaque, and valid
// only within the attempt that created it; Await rejects any other value.
type Future interface{}

// Outcome is a completed result: a value or a terminal failure.
type Outcome struct {
	Value []byte
	// Failure is nil on success.
	Failure *TerminalError
}

// AwaitMode says what completes an Await.
type AwaitMode int

const (
	// AwaitAll waits for every future (success or failure).
	AwaitAll AwaitMode = iota
	// AwaitAny waits for at least one future.
	AwaitAny
)

// CallRequest addresses a handler of another service.
type CallRequest struct {
	Service, Handler string
	// Key addresses a virtual object or workflow; empty for services.
	Key string
	// IdempotencyKey, when set, deduplicates the call at the runtime.
	IdempotencyKey string
	Headers        map[string]string
	Input          []byte
}

// SendRequest is a one-way call, run after Delay when it is positive.
type SendRequest struct {
	CallRequest
	Delay time.Duration
}

// ErrSuspended is returned when the attempt suspended: the
// SuspensionMessage is sent and Restate resumes the invocation in a new
// attempt once what it waits for arrived. No more operations are possible;
// the handler must return, and what it returns is ignored.
var ErrSuspended = errors.New("restate: the invocation suspended")

type futureKind uint8

const (
	runFuture futureKind = iota
	sleepFuture
	callFuture
	awakeableFuture
	promiseFuture
)

// future is the Future of this endpoint. m identifies the attempt (an
// invocation serves one stream, see release).
type future struct {
	inv   *invocation
	m     *journal.Machine
	kind  futureKind
	id    uint32         // completion id (runs, timers, calls, promises)
	h     journal.Handle // what an Await waits on
	name  string         // runs: for errors and the AfterRunJournaled hook
	index int            // runs: the RunCommand's index
	// proposed: RunComplete was called; a second call would propose twice.
	proposed bool
}

func (c invocationContext) futureOf(f Future) (*future, error) {
	ff, ok := f.(*future)
	if !ok || ff == nil || ff.inv != c.inv || ff.m != c.inv.m {
		return nil, fmt.Errorf("restate: %T is not a future of this invocation attempt", f)
	}
	return ff, nil
}

// statusErr maps an await that did not become Ready. A CANCEL the
// handler takes as a failure (DeliverCancel) is taken here: this wait
// returns ErrCancelled, later ones go on.
//
// The fields are read under inv.mu: a durable operation may run on a
// goroutine of its own (the bridge's context endpoint) that is still here
// when the handler has returned and the invocation was released.
func (inv *invocation) statusErr(st journal.Status) error {
	inv.mu.Lock()
	cancel, deliver := inv.cancel, inv.h != nil && inv.h.deliverCancel
	if st == journal.Cancelled && deliver && inv.m != nil {
		inv.m.TakeCancel()
	}
	inv.mu.Unlock()
	switch st {
	case journal.Cancelled:
		if !deliver && cancel != nil {
			cancel(ErrCancelled)
		}
		if deliver {
			if err := inv.cancelCalls(); err != nil {
				return err
			}
		}
		return ErrCancelled
	case journal.Suspended:
		// The handler's context ends with a cause saying so before the
		// Suspension reaches the runtime, whose closing the stream would
		// read as plain cancellation: code waiting elsewhere must tell a
		// suspension from a failure.
		if cancel != nil {
			cancel(ErrSuspended)
		}
		inv.flush()
		return ErrSuspended
	default:
		inv.mu.Lock()
		defer inv.mu.Unlock()
		if inv.m == nil {
			return ErrAttemptEnded
		}
		return inv.endedLocked()
	}
}

// cancelCalls sends Restate's CANCEL signal to every invocation this
// attempt called (request/response calls, not one-way calls), as the
// Restate SDKs do when a handler observes its own cancellation. It first
// waits for every callee's invocation id, then journals one
// SendSignalCommand per call in call order: a replay thus emits the same
// commands whatever had arrived when the original attempt got here. A
// wait that suspends or ends the attempt returns its error and journals
// nothing. It runs once: the cancellation is taken before it.
func (inv *invocation) cancelCalls() error {
	inv.mu.Lock()
	ids := inv.calls
	inv.calls = nil
	inv.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	targets := make([]string, 0, len(ids))
	for _, id := range ids {
		res, st := inv.await(id)
		if st != journal.Ready {
			return inv.statusErr(st)
		}
		targets = append(targets, res.InvocationID)
	}
	return inv.journaled(func(m *journal.Machine) error {
		for _, target := range targets {
			if err := m.CancelInvocation(target); err != nil {
				return err
			}
		}
		return nil
	})
}

func outcome(res journal.Result) *Outcome {
	if res.Failure != nil {
		return &Outcome{Failure: &TerminalError{Code: res.Failure.Code, Message: res.Failure.Message}}
	}
	return &Outcome{Value: res.Value}
}

// RunStart journals a RunCommand named name and flushes it to the runtime
// before returning, so the step shows in flight. A run recorded with its
// result returns (outcome, nil, nil) and its closure must not run;
// otherwise RunStart returns the run's Future, to be passed to RunComplete
// once the closure finished.
func (c invocationContext) RunStart(name string) (*Outcome, Future, error) {
	return c.runStart(name, true)
}

// RunStartDone is RunStart for a closure that has already run, its
// outcome at hand: the RunCommand is not flushed on its own but with the
// RunComplete that follows (or any later write), one write instead of
// two, as nothing is in flight to show.
func (c invocationContext) RunStartDone(name string) (*Outcome, Future, error) {
	return c.runStart(name, false)
}

func (c invocationContext) runStart(name string, flush bool) (*Outcome, Future, error) {
	inv := c.inv
	inv.mu.Lock()
	id, execute, err := inv.m.RunStart(name)
	index := inv.m.CommandIndex() - 1
	cancelled := inv.m.Cancelled()
	inv.mu.Unlock()
	if err != nil {
		inv.flush()
		return nil, nil, ErrAttemptEnded
	}
	if !execute {
		res, st := inv.await(id)
		if st != journal.Ready {
			return nil, nil, inv.statusErr(st)
		}
		return outcome(res), nil, nil
	}
	if cancelled && !inv.h.deliverCancel {
		return nil, nil, ErrCancelled
	}
	if flush {
		inv.flush()
	}
	return nil, &future{inv: inv, m: inv.m, kind: runFuture, id: id, h: journal.CompletionHandle(id), name: name, index: index}, nil
}

// RunComplete proposes the result of the run started by RunStart (a value,
// or out.Failure as its terminal failure) and returns once it is durable:
// acknowledged on v7, notified on v5 and v6. A retryable closure failure
// is not passed here: the handler returns a *RetryableError instead. After
// a CANCEL signal nothing is proposed and RunComplete returns ErrCancelled.
func (c invocationContext) RunComplete(run Future, out Outcome) error {
	return c.RunCompleteContext(context.Background(), run, out)
}

// RunCompleteContext is RunComplete that stops waiting for the result to
// be durable when ctx ends first, returning ctx's error: the proposal is
// on its way, and the caller ends the attempt (the bridge's, once the
// function it waited for was killed at its timeout), so the attempt's
// ErrorMessage is not held back by an acknowledgement that does not come.
func (c invocationContext) RunCompleteContext(ctx context.Context, run Future, out Outcome) error {
	f, err := c.futureOf(run)
	if err != nil {
		return err
	}
	if f.kind != runFuture {
		return errors.New("restate: RunComplete of a future that is not a run")
	}
	inv := c.inv
	var ferr error
	if out.Failure != nil {
		ferr = out.Failure
	}
	if f.proposed {
		return fmt.Errorf("restate: RunComplete called twice for run %q", f.name)
	}
	f.proposed = true
	inv.mu.Lock()
	err = inv.settleRun(f.id, f.index, f.name, out.Value, ferr, false)
	inv.mu.Unlock()
	if err != nil {
		inv.flush()
		return err
	}
	_, st := inv.awaitContext(ctx, f.id)
	if st == journal.Pending {
		return ctx.Err()
	}
	if st != journal.Ready {
		return inv.statusErr(st)
	}
	if inv.ep.cfg.AfterRunJournaled != nil {
		inv.ep.cfg.AfterRunJournaled(inv.m.InvocationID(), f.name)
	}
	return nil
}

// RunFail records a run closure's retryable failure; see Context.RunFail.
func (c invocationContext) RunFail(run Future, _ *RetryableError) error {
	f, err := c.futureOf(run)
	if err != nil {
		return err
	}
	if f.kind != runFuture {
		return errors.New("restate: RunFail of a future that is not a run")
	}
	if f.proposed {
		return fmt.Errorf("restate: RunFail after the result of run %q was proposed", f.name)
	}
	f.proposed = true
	c.inv.mu.Lock()
	c.inv.failedRun = &failedRun{index: f.index, name: f.name}
	c.inv.mu.Unlock()
	return nil
}

// epochMs is t in milliseconds since the Unix epoch, 0 before it.
func epochMs(t time.Time) uint64 {
	if ms := t.UnixMilli(); ms > 0 {
		return uint64(ms)
	}
	return 0
}

// Sleep journals a timer waking d from now (SleepCommand wake_up_time, in
// milliseconds since the epoch) and returns its Future, which completes
// with an empty value. A replayed timer keeps its recorded wake-up time.
func (c invocationContext) Sleep(d time.Duration) (Future, error) {
	inv := c.inv
	inv.mu.Lock()
	id, err := inv.m.Sleep(epochMs(time.Now().Add(max(d, 0))))
	inv.mu.Unlock()
	inv.flush()
	if err != nil {
		return nil, ErrAttemptEnded
	}
	return &future{inv: inv, m: inv.m, kind: sleepFuture, id: id, h: journal.CompletionHandle(id)}, nil
}

func targetOf(r CallRequest) journal.CallTarget {
	return journal.CallTarget{Service: r.Service, Handler: r.Handler, Key: r.Key, IdempotencyKey: r.IdempotencyKey,
		Headers: r.Headers, Parameter: r.Input}
}

// Call journals a request-response call (CallCommand) and returns the
// Future of the callee's result.
func (c invocationContext) Call(req CallRequest) (Future, error) {
	inv := c.inv
	inv.mu.Lock()
	calleeID, id, err := inv.m.Call(targetOf(req))
	if err == nil {
		inv.calls = append(inv.calls, calleeID)
	}
	inv.mu.Unlock()
	inv.flush()
	if err != nil {
		return nil, ErrAttemptEnded
	}
	return &future{inv: inv, m: inv.m, kind: callFuture, id: id, h: journal.CompletionHandle(id)}, nil
}

// Send journals a one-way call (OneWayCallCommand) and returns the
// callee's invocation id once the runtime reported it.
func (c invocationContext) Send(req SendRequest) (string, error) {
	inv := c.inv
	var at uint64
	if req.Delay > 0 {
		at = epochMs(time.Now().Add(req.Delay))
	}
	inv.mu.Lock()
	id, err := inv.m.OneWayCall(targetOf(req.CallRequest), at)
	inv.mu.Unlock()
	inv.flush()
	if err != nil {
		return "", ErrAttemptEnded
	}
	// The message is sent: a CANCEL arriving meanwhile is for the next
	// wait, as in the SDKs, not a failure of the send.
	res, st := inv.awaitSent(id)
	if st != journal.Ready {
		return "", inv.statusErr(st)
	}
	return res.InvocationID, nil
}

// Await waits until all (AwaitAll) or at least one (AwaitAny) of futures
// completed and returns one Outcome per future, nil where not complete;
// for AwaitAny only the future whose completion arrived first has one, so
// a replay answers as the attempt that recorded the journal did.
// A wait not complete within suspendAfter (at once when suspendAfter <= 0
// or the runtime closed its side, as in REQUEST_RESPONSE mode) suspends the
// attempt and returns ErrSuspended. The CANCEL signal arriving first makes
// it return ErrCancelled.
func (c invocationContext) Await(futures []Future, mode AwaitMode, suspendAfter time.Duration) ([]*Outcome, error) {
	return c.AwaitContext(context.Background(), futures, mode, suspendAfter)
}

// AwaitContext is Await that also gives up when ctx ends first: it
// returns ctx's error, journals nothing (a wait journals nothing until it
// suspends), and the futures can be awaited again. A client of the
// durable-steps endpoint that hangs up mid-wait ends its wait this way.
func (c invocationContext) AwaitContext(ctx context.Context, futures []Future, mode AwaitMode, suspendAfter time.Duration) ([]*Outcome, error) {
	inv := c.inv
	if len(futures) == 0 {
		return nil, errors.New("restate: Await of no futures")
	}
	ids := make([]journal.Handle, len(futures))
	for i, f := range futures {
		ff, err := c.futureOf(f)
		if err != nil {
			return nil, err
		}
		ids[i] = ff.h
	}
	jm := journal.AllCompleted
	if mode == AwaitAny {
		jm = journal.FirstCompleted
	}
	var budget <-chan time.Time
	if suspendAfter > 0 {
		t := time.NewTimer(suspendAfter)
		defer t.Stop()
		budget = t.C
	}
	expired := suspendAfter <= 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		inv.mu.Lock()
		st := inv.m.AwaitHandles(ids, jm)
		if st == journal.Pending {
			switch {
			case inv.ctx.Err() != nil && inv.interruptedLocked(-1, ""):
				st = journal.Closed
			case expired:
				inv.m.SuspendHandles(ids, jm)
				st = journal.Suspended
			}
		}
		var outs []*Outcome
		switch {
		case st != journal.Ready:
		case mode == AwaitAny:
			// Only the first to arrive: see journal.FirstArrived.
			outs = make([]*Outcome, len(ids))
			if i := inv.m.FirstArrived(ids); i >= 0 {
				res, _ := inv.m.CompletedHandle(ids[i])
				outs[i] = outcome(res)
			}
		default:
			outs = make([]*Outcome, len(ids))
			for i, id := range ids {
				if res, ok := inv.m.CompletedHandle(id); ok {
					outs[i] = outcome(res)
				}
			}
		}
		inv.mu.Unlock()
		if st == journal.Ready {
			return outs, nil
		}
		if st != journal.Pending {
			return nil, inv.statusErr(st)
		}
		inv.flush()
		select {
		case <-inv.wake:
		case <-inv.ctx.Done():
		case <-ctx.Done():
		case <-budget:
			expired = true
		}
	}
}

// RandomSeed is the seed of the invocation's deterministic random numbers,
// the same on every attempt: StartMessage.random_seed when the runtime set
// it (v6+), else the FNV-1a hash of the invocation id (StartMessage.id, or
// its printable form when the runtime sent no raw id).
func (c invocationContext) RandomSeed() uint64 {
	start := c.inv.m.Start()
	if s := start.GetRandomSeed(); s != 0 {
		return s
	}
	h := fnv.New64a()
	if id := start.GetId(); len(id) > 0 {
		_, _ = h.Write(id)
	} else {
		_, _ = h.Write([]byte(start.GetDebugId()))
	}
	return h.Sum64()
}
