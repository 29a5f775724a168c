package bash_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// A command a Bash function runs past the worker's memory limit fails the
// invocation naming the memory limit (the server makes that terminal),
// not with the command's own MemoryError: where the worker has a memory
// cgroup, the command gets no data rlimit to hit first.
func TestChildPastTheMemoryLimitIsNamed(t *testing.T) {
	py := testtool.Require(t, "", "python3", "to allocate memory with")
	if desc, _ := proc.Mechanisms(); !strings.Contains(desc, "memory of the whole worker") {
		t.Skipf("no memory cgroup here: %s", desc)
	}
	f := conformance.NewFixture(t, "hog.hog", map[string]string{
		"hog.sh": `hog() { "$PY" -c 'x = bytearray(300 * 1024 * 1024)' && echo '"survived"'; }` + "\n",
	})
	f.Spec.Env = map[string]string{"PY": py}
	f.Spec.Limits = functionruntime.DefaultWorkerLimits()
	f.Spec.Limits.Memory = 128 << 20
	w := f.Start(t)
	_, err := f.Invoke(t, w, "null")
	var le *proc.LimitError
	if !errors.As(err, &le) || le.Limit != proc.LimitMemory {
		t.Fatalf("err = %v, want a memory LimitError", err)
	}
}
