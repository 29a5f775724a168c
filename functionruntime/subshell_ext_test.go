package functionruntime_test

import (
	"context"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// inlineAdapter and inlineChoosingAdapter are fake adapters that can run
// a registration's invocations inline (functionruntime.InlineRunner), the
// latter also choosing interpreters.
type (
	inlineAdapter         struct{ *fakeAdapter }
	inlineChoosingAdapter struct{ choosingAdapter }
)

func (inlineAdapter) RunsInline()         {}
func (inlineChoosingAdapter) RunsInline() {}

// withSubshell is a context whose RegisterFunction carries the subshell
// metadata, once per value.
func withSubshell(values ...string) context.Context {
	return withMetadata(functionruntime.SubshellMetadata, values...)
}

// A registration's choice of subshell travels as metadata (the contract's
// messages stay as they are) and reaches the adapter's WorkerSpec: "false"
// runs inline, "true" and no metadata do not. Anything else, and "false"
// for a kind that cannot run inline, is InvalidArgument naming the
// metadata before anything starts.
func TestRegisterCarriesTheSubshellMetadata(t *testing.T) {
	ad := &fakeAdapter{inline: true}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	for run, ctx := range map[string]context.Context{"run-inline": withSubshell("false"), "run-subshell": withSubshell("true")} {
		if _, err := h.cli.RegisterFunction(ctx, h.registerReq(run, 1, digest(run))); err != nil {
			t.Fatal(err)
		}
	}
	h.mustReady("run-default", 1)
	inline := map[string]bool{}
	for _, w := range ad.allWorkers() {
		inline[w.spec.RunUID] = w.spec.Inline
	}
	if want := map[string]bool{"run-inline": true, "run-subshell": false, "run-default": false}; len(inline) != 3 ||
		inline["run-inline"] != want["run-inline"] || inline["run-subshell"] || inline["run-default"] {
		t.Errorf("Inline in the worker specs: %v, want %v", inline, want)
	}

	for _, tc := range []struct {
		name   string
		ctx    context.Context
		want   string
		inline bool
	}{
		{"neither true nor false", withSubshell("no"), `fnbridge-subshell metadata: "no": want true or false`, true},
		{"given twice", withSubshell("false", "false"), "fnbridge-subshell metadata: given 2 times, want once", true},
		{"a kind that cannot run inline", withSubshell("false"), "fnbridge-subshell metadata: the fake runtime runs every invocation in a process of its own; only bash can run them in its worker's shell", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantRefusedBeforeStart(t, &fakeAdapter{inline: tc.inline}, tc.ctx, tc.want)
		})
	}
}
