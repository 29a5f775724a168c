package stepctx

import "time"

// SetFramedIdle sets how long a framed connection outlives its attempt,
// for a test; the returned func restores it.
func SetFramedIdle(d time.Duration) func() {
	old := framedIdle.Swap(int64(d))
	return func() { framedIdle.Store(old) }
}
