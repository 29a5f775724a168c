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
