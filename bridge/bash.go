package bridge

import "github.com/fnbridge/fnbridge/functionruntime/bash"

// BashConfig is a bash handler's own settings (its bash: block).
type BashConfig struct {
	// Subshell, true when left out, runs each invocation in a subshell of
	// the worker, so that nothing one invocation does to the shell
	// reaches the next. false runs them inline, one after another in the
	// worker's own shell: no process per invocation, and what one leaves
	// in the shell the next one sees (README, "Inline Bash invocations").
	Subshell *bool `yaml:"subshell"`
}

// BashInline reports whether h's invocations run inline, in the worker's
// own shell (bash.subshell: false).
func (h *HandlerConfig) BashInline() bool {
	return h.Bash != nil && h.Bash.Subshell != nil && !*h.Bash.Subshell
}

// resolveBash checks a handler's bash block: it applies to bash alone.
func (h *HandlerConfig) resolveBash(hp string, bad func(path, format string, args ...any)) {
	if h.Bash != nil && h.Runtime != bash.Kind {
		bad(hp+".bash", "only applies to runtime: bash")
	}
}
