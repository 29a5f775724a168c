package bash_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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

// An invocation that reaches its timeout because an earlier invocation's
// leftovers hold the worker at its processes limit (its fork fails, and
// bash retries it past the timeout) says so: the limit is named, and the
// timeout stays retryable (no terminal failure for what the invocation
// did not cause).
func TestTimeoutAtTheProcessesLimitNamesIt(t *testing.T) {
	if _, processes := proc.Mechanisms(); !processes {
		t.Skip("no pids cgroup here: the processes limit is not enforced")
	}
	// fill leaves exactly as many sleeps as the worker's pids cgroup has
	// room for (read with builtins: no fork of its own is counted); its
	// subshell's exit frees the place the next invocation's subshell takes.
	f := conformance.NewFixture(t, "fill.run", map[string]string{"fill.sh": `
run() {
	local d= n c p max cur i
	if [[ $1 == fill ]]; then
		while IFS=: read -r n c p; do
			[[ $c == pids ]] && d=/sys/fs/cgroup/pids$p
			[[ $n == 0 && -z $d ]] && d=/sys/fs/cgroup$p
		done </proc/self/cgroup
		read -r max <"$d/pids.max" && read -r cur <"$d/pids.current" || return 1
		for ((i = cur; i < max; i++)); do sleep 30 </dev/null >/dev/null 2>&1 & done
		printf fill
		return
	fi
	printf '%s%s' "$1" "$(true)"
}
`})
	f.Spec.Limits = functionruntime.DefaultWorkerLimits()
	f.Spec.Limits.Processes = 12
	w := f.Start(t)
	if out := f.MustInvoke(t, w, "fill").Output; string(out) != "fill" {
		t.Fatalf("fill: %q", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := w.Invoke(ctx, f.Invocation("inv-next", []byte("next")))
	var se *proc.StuckError
	if !errors.As(err, &se) || !strings.Contains(se.Why, "processes limit of 12") {
		t.Fatalf("err = %v, want a timeout naming the processes limit", err)
	}
	var le *proc.LimitError
	if errors.As(err, &le) {
		t.Errorf("err = %v: a LimitError, which the server makes terminal", err)
	}
}
