package journal

import (
	"fmt"
	"time"
)

// Supported protocol versions.
const (
	MinVersion = 5
	MaxVersion = 7
)

// PauseFallbackDelay is the next_retry_delay sent for a pause request on
// versions whose ErrorMessage cannot ask the runtime to pause (v5, v6) when
// the request names no delay of its own: the attempt is retried only after
// a while instead of hot-looping. Five minutes, the delay the bridge asks
// for its own permanent failures there, so every "paused" invocation on
// v5/v6 is retried on the one schedule the README gives.
const PauseFallbackDelay = 5 * time.Minute

// rules are the version-dependent behaviours, one row per version.
type rules struct {
	// runAck: ProposeRunCompletion carries REQUESTED_ACK and the runtime
	// answers with ProposeRunCompletionAck (v7).
	runAck bool
	// futureSuspension: SuspensionMessage.awaiting_on instead of the flat
	// waiting lists (v7).
	futureSuspension bool
	// errorBehavior: ErrorMessage.behavior can request PAUSE (v7).
	errorBehavior bool
	// failureMetadata: Failure.metadata exists (v6+).
	failureMetadata bool
}

var versionRules = map[int]rules{
	5: {},
	6: {failureMetadata: true},
	7: {runAck: true, futureSuspension: true, errorBehavior: true, failureMetadata: true},
}

func rulesFor(version int) (rules, error) {
	r, ok := versionRules[version]
	if !ok {
		return rules{}, fmt.Errorf("unsupported service protocol version %d (supported: %d to %d)", version, MinVersion, MaxVersion)
	}
	return r, nil
}
