package bridge

import "time"

// RestateTimeoutMargin is what a derived inactivity_timeout adds to a
// handler's timeout and lease_timeout: time to register a warm worker
// (start the interpreter, import the handler) and to journal the result.
const RestateTimeoutMargin = 30 * time.Second

// resolveRestateTimeouts fills inactivity_timeout from timeout and
// lease_timeout, and abort_timeout from inactivity_timeout (as written or
// derived), when they are left out, and refuses an explicit
// inactivity_timeout too short for the run. The bridge sends Restate nothing while a function runs, so an
// inactivity timeout shorter than the run makes Restate ask the attempt to
// suspend mid-run, abort it abort_timeout later and execute the function
// again on the next attempt, for ever. Runs after resolving timeout and
// lease_timeout.
//
// Only a value the file wrote is checked for whole milliseconds: a derived
// one is whole when what it comes from is, and a problem with that is
// reported where it is written, not again under a field the file leaves
// out.
func (h *HandlerConfig) resolveRestateTimeouts(hp string, bad func(path, format string, args ...any)) {
	need := h.Timeout + h.LeaseTimeout
	switch {
	case h.InactivityTimeout < 0:
		bad(hp+".inactivity_timeout", "must be positive")
	case h.InactivityTimeout == 0:
		// Whole milliseconds: the manifest carries nothing finer.
		h.InactivityTimeout = Duration((need.Std() + RestateTimeoutMargin + time.Millisecond - 1).Truncate(time.Millisecond))
		h.inactivityDerived = true
	default:
		if h.InactivityTimeout <= need && h.Timeout > 0 && h.LeaseTimeout > 0 {
			bad(hp+".inactivity_timeout", "%s is not longer than timeout %s + lease_timeout %s: Restate would end every attempt before the function finishes "+
				"and execute it again; raise inactivity_timeout (or leave it out: it defaults to timeout + lease_timeout + %s)",
				h.InactivityTimeout, h.Timeout, h.LeaseTimeout, Duration(RestateTimeoutMargin))
		}
		wholeMillis(hp+".inactivity_timeout", h.InactivityTimeout, bad)
	}
	// Restate counts abort_timeout from the inactivity timeout's expiry: a
	// run still going then gets as long again to record its result.
	switch {
	case h.AbortTimeout < 0:
		bad(hp+".abort_timeout", "must be positive")
	case h.AbortTimeout == 0:
		h.AbortTimeout = h.InactivityTimeout
	default:
		wholeMillis(hp+".abort_timeout", h.AbortTimeout, bad)
	}
}

// wholeMillis refuses a duration the endpoint manifest cannot carry: it
// counts whole milliseconds, and restate-server's discovery refuses the
// rest.
func wholeMillis(path string, d Duration, bad func(path, format string, args ...any)) {
	if d > 0 && d%Duration(time.Millisecond) != 0 {
		bad(path, "%s is not a whole number of milliseconds, the endpoint manifest's unit", d)
	}
}
