package bridge

import (
	"context"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// RunSteps runs one steps-mode attempt of Service/handler against j, as a
// Restate invocation does with its journal.
func (b *Bridge) RunSteps(ctx context.Context, service, handler string, j stepctx.Journal, input []byte) (*Result, error) {
	res, _, err := b.runSteps(ctx, b.pools[service+"/"+handler], j, "inv_test", input, "application/json")
	return res, err
}

// NoReadyCache makes every readiness probe check the runtimes until the
// test ends.
func NoReadyCache(t interface{ Cleanup(func()) }) {
	old := readyCacheFor
	readyCacheFor = 0
	t.Cleanup(func() { readyCacheFor = old })
}

// StepsToRestate is what the endpoint gets for a RunSteps error.
var StepsToRestate = stepsToRestate

// ContextURL is the context endpoint functions dial; "" when not served.
func (b *Bridge) ContextURL() string {
	if b.ctxEnd == nil {
		return ""
	}
	return b.ctxEnd.url
}
