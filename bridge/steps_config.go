package bridge

import (
	"net"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// Values of a handler's durability.
const (
	// DurabilityFunction journals one run ("invoke") around the whole
	// function: a retry after it completed replays its result.
	DurabilityFunction = "function"
	// DurabilitySteps journals the function's own context calls (runs,
	// sleeps, calls); the function runs again on every attempt.
	DurabilitySteps = "steps"
)

// DefaultSuspendAfter is a steps-mode handler's suspend_after when left
// out; a handler whose timeout is at most twice as long gets half its
// timeout instead, so a wait suspends before the attempt times out.
const DefaultSuspendAfter = 5 * time.Second

// StepsMode reports whether the handler journals its own steps.
func (h *HandlerConfig) StepsMode() bool { return h.Durability == DurabilitySteps }

// resolveDurability defaults and checks durability and suspend_after.
// Runs after timeout is resolved.
func (h *HandlerConfig) resolveDurability(hp string, bad func(path, format string, args ...any)) {
	switch h.Durability {
	case "":
		h.Durability = DurabilityFunction
	case DurabilityFunction, DurabilitySteps:
	default:
		bad(hp+".durability", "%q is not allowed (function | steps)", h.Durability)
		return
	}
	if !h.StepsMode() {
		if h.SuspendAfter != 0 {
			bad(hp+".suspend_after", "only applies with durability: steps (a function-mode handler never waits on the journal)")
		}
		return
	}
	switch {
	case h.SuspendAfter == 0:
		h.SuspendAfter = Duration(DefaultSuspendAfter)
		if h.Timeout > 0 && h.Timeout.Std() <= 2*DefaultSuspendAfter {
			h.SuspendAfter = h.Timeout / 2
		}
	case h.SuspendAfter < 0:
		bad(hp+".suspend_after", "must be positive")
	case h.Timeout > 0 && h.SuspendAfter >= h.Timeout:
		bad(hp+".suspend_after", "%s is not shorter than timeout %s: the attempt would time out before a wait suspends; lower suspend_after (or leave it out: %s, at most half the timeout)",
			h.SuspendAfter.Std(), h.Timeout.Std(), DefaultSuspendAfter)
	}
}

// resolveContextListen checks context_listen. Empty is kept: the bridge
// then listens on a unix socket in a private (0700) temporary directory
// it creates and removes. A TCP address is also what functions dial, so
// it must name a host they can reach, not a wildcard.
func (c *Config) resolveContextListen(bad func(path, format string, args ...any)) {
	if c.ContextListen == "" {
		return
	}
	network, address, err := stepctx.ParseAddr(c.ContextListen)
	if err != nil {
		bad("context_listen", "%q: want unix:///absolute/path or host:port", c.ContextListen)
		return
	}
	if network == "unix" {
		return
	}
	if err := checkHostPort(address); err != nil {
		bad("context_listen", "%q is not host:port: %v", c.ContextListen, err)
		return
	}
	host, _, _ := net.SplitHostPort(address)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		bad("context_listen", "%q: name the address functions dial (e.g. 10.0.0.5:9091), not a wildcard host", c.ContextListen)
	}
}
