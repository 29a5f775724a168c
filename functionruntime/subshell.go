package functionruntime

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// SubshellMetadata is the RegisterFunction metadata key by which a
// registration of a kind whose adapter offers it ([InlineRunner]: bash)
// chooses where its invocations run: "true" (the default, as without the
// key) each in a subshell of its own, "false" one after another in the
// worker's own shell, which saves a process per invocation and keeps what
// one invocation leaves in the shell for the next ([WorkerSpec].Inline).
// Like the interpreter it travels out of band because the contract's
// messages have no field for it.
const SubshellMetadata = "fnbridge-subshell"

// InlineRunner is an [Adapter] that can run a registration's invocations
// in its worker's own shell ([WorkerSpec].Inline).
type InlineRunner interface {
	// RunsInline is a marker: the adapter honours WorkerSpec.Inline.
	RunsInline()
}

// inlineOf reads the registration's choice of subshell from the request
// metadata: true for "false".
func inlineOf(ctx context.Context, a Adapter) (bool, error) {
	vals := metadata.ValueFromIncomingContext(ctx, SubshellMetadata)
	field := SubshellMetadata + " metadata"
	switch {
	case len(vals) == 0:
		return false, nil
	case len(vals) > 1:
		return false, invalidArgument(field, "given %d times, want once", len(vals))
	case vals[0] != "true" && vals[0] != "false":
		return false, invalidArgument(field, "%q: want true or false", vals[0])
	case vals[0] == "true":
		return false, nil
	}
	if _, ok := a.(InlineRunner); !ok {
		return false, invalidArgument(field, "the %s runtime runs every invocation in a process of its own; only bash can run them in its worker's shell", a.Kind())
	}
	return true, nil
}
