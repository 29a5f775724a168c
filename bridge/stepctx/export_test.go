package stepctx

import "time"

// SetFramedIdle sets how long a framed connection outlives its attempt,
// for a test; the returned func restores it.
func SetFramedIdle(d time.Duration) func() {
	old := framedIdle.Swap(int64(d))
	return func() { framedIdle.Store(old) }
}

// SetUnprovenGrace sets how long a new connection is safe from being
// shed, for a test; the returned func restores it.
func SetUnprovenGrace(d time.Duration) func() {
	old := unprovenGrace.Swap(int64(d))
	return func() { unprovenGrace.Store(old) }
}

// HoldServing makes a's next request find another being served (another
// client's call in flight, as a child process's can be) until the
// returned func ends it.
func (a *Attempt) HoldServing() func() {
	a.servingMu.Lock()
	a.serving = &served{gone: make(chan struct{}), over: make(chan struct{})}
	a.servingMu.Unlock()
	return a.release
}

// AheadWaiters is how many of a's requests wait for a pipelined start
// (a child's, see EnvAfter).
func (a *Attempt) AheadWaiters() int {
	a.aheadMu.Lock()
	defer a.aheadMu.Unlock()
	return a.aheadWait
}

// AfterOf is afterOf.
var AfterOf = afterOf

// SetAheadWait sets how long a child's request waits for its parent's
// start, for a test; the returned func restores it.
func SetAheadWait(d time.Duration) func() {
	old := aheadWait
	aheadWait = d
	return func() { aheadWait = old }
}
