package testtool

import (
	"testing"
	"time"
)

// PollEvery is how often Poll and Eventually check their condition: often
// enough for a test, rarely enough that polling restate-server's admin API
// does not load it.
const PollEvery = 25 * time.Millisecond

// Poll checks cond every PollEvery until it holds (true) or timeout has
// passed (false): a test waits for a state, never a guessed duration.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(PollEvery)
	}
}

// Eventually polls cond until it holds, or fails the test after timeout
// naming what it waited for and the last state cond described.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	var state string
	if !Poll(timeout, func() (ok bool) { ok, state = cond(); return ok }) {
		t.Fatalf("%s: not within %s (last state: %s)", what, timeout, state)
	}
}
