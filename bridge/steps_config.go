package bridge

import (
	"fmt"
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

// MinBashStepsProcesses is the fewest processes (a pids cgroup counts
// threads) a durability: steps Bash worker takes a step with: the worker,
// its guardian and invocation subshell, the step agent (a Go program of 5
// to 7 threads) and the step's command. Measured with bridge invoke on 2
// CPUs: 8 for a step in the function's own shell, 11 for one in $(...),
// where the fnbridge command runs too; 12 leaves one to spare.
const MinBashStepsProcesses = 12

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
	if n := h.Limits.Worker().Processes; h.Runtime == "bash" && n > 0 && n < MinBashStepsProcesses {
		bad(hp+".limits.processes", "%d is fewer than %d, the fewest a durability: steps Bash worker takes a step with (the worker, its guardian and subshell, the step agent, a Go program whose threads count, and the step's command; each fnbridge command run outside the function's own shell adds about 6)",
			n, MinBashStepsProcesses)
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

// Where a context_listen came from, in the order the later ones win, as
// for the instance identity.
const (
	ContextListenFromConfig = "context_listen"
	ContextListenFromEnv    = "FNBRIDGE_CONTEXT_LISTEN"
	ContextListenFromFlag   = "--context-listen"
)

// ContextListenEnv is the environment variable that sets context_listen
// (over the file's, under --context-listen): replicas sharing one file
// each need an address of their own, such as the pod's IP.
const ContextListenEnv = "FNBRIDGE_CONTEXT_LISTEN"

// SetContextListen sets context_listen from source (ContextListenFromEnv,
// ContextListenFromFlag), checked as the file's is; an error, naming
// source, leaves c as it was.
func (c *Config) SetContextListen(raw, source string) error {
	if problem := checkContextListen(raw); problem != "" {
		return fmt.Errorf("%s: %s", source, problem)
	}
	c.ContextListen, c.ContextListenFrom = raw, source
	return nil
}

// contextListenSource names where context_listen came from, for errors.
func (c *Config) contextListenSource() string {
	if c.ContextListenFrom == "" {
		return ContextListenFromConfig
	}
	return c.ContextListenFrom
}

// resolveContextListen checks context_listen. Empty is kept: the bridge
// then listens on a unix socket in a private (0700) temporary directory
// it creates and removes.
func (c *Config) resolveContextListen(bad func(path, format string, args ...any)) {
	if c.ContextListen == "" {
		return
	}
	if problem := checkContextListen(c.ContextListen); problem != "" {
		bad("context_listen", "%s", problem)
		return
	}
	c.ContextListenFrom = ContextListenFromConfig
}

// checkContextListen is what is wrong with a non-empty context listen
// address, or "". A TCP address is also what functions dial, so it must
// name a host they can reach, not a wildcard.
func checkContextListen(v string) string {
	if unix, err := checkUnixAddress(v, "unix:///run/fnbridge/context.sock"); err != nil {
		return err.Error()
	} else if unix {
		return ""
	}
	network, address, err := stepctx.ParseAddr(v)
	if err != nil {
		return fmt.Sprintf("%q: want unix:///absolute/path or host:port", v)
	}
	if network == "unix" {
		return ""
	}
	if err := checkHostPort(address); err != nil {
		return fmt.Sprintf("%q is not host:port: %v", v, err)
	}
	host, _, _ := net.SplitHostPort(address)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Sprintf("%q: name the address functions dial (e.g. 10.0.0.5:9091), not a wildcard host", v)
	}
	return ""
}
