package bridge

import (
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// Restate's invocation id reaches the runtime as invocation_id when the
// runtime accepts it ("invocation_id: at most 128 bytes", no control
// characters); anything else is replaced by a stable digest, so an id the
// runtime would refuse never fails an invocation as invalid input.
func TestRuntimeInvocationID(t *testing.T) {
	restateID := "inv_1jZ1vppOUVxj16ugSTA4IHb26d8Zo1CWOT"
	if got := runtimeInvocationID(restateID); got != restateID {
		t.Errorf("a Restate id was changed: %q", got)
	}
	edge := strings.Repeat("i", functionruntime.MaxInvocationIDBytes)
	if got := runtimeInvocationID(edge); got != edge {
		t.Errorf("an id of exactly the bound was changed: %q", got)
	}
	for _, bad := range []string{edge + "i", "inv\n1", "inv\x00", "\xff\xfe"} {
		got := runtimeInvocationID(bad)
		if !strings.HasPrefix(got, "sha256-") || len(got) != len("sha256-")+64 {
			t.Errorf("runtimeInvocationID(%q) = %q, want a sha256- digest", bad, got)
		}
		if again := runtimeInvocationID(bad); again != got {
			t.Errorf("digest of %q not stable: %q then %q", bad, got, again)
		}
	}
	if runtimeInvocationID(edge+"a") == runtimeInvocationID(edge+"b") {
		t.Error("two different long ids got the same digest")
	}
}
