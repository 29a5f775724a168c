package bash_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
)

// bench is the file the benchmarks run: a small handler that echoes a
// JSON document built from its argument.
var bench = adaptertest.Bench{
	Handler: adaptertest.Handler{Handler: "bench.greet", Files: map[string]string{
		"bench.sh": "greet() {\n\tprintf '{\"got\":%s}\\n' \"$1\"\n}\n",
	}},
	Input: `{"n":1}`, Output: `{"got":{"n":1}}`,
	Worker: "fnbridge-bash-worker",
}

// BenchmarkBashWarmInvoke measures one invocation on a warm worker: the
// file is already sourced; each call costs one subshell.
func BenchmarkBashWarmInvoke(b *testing.B) { adaptertest.BenchmarkWarm(b, conformance, bench) }

// BenchmarkBashColdInvoke is the baseline: a fresh bash per call that
// sources the file and calls the function once.
func BenchmarkBashColdInvoke(b *testing.B) {
	adaptertest.BenchmarkCold(b, conformance, bench.Files, bench.Output+"\n", func(b testing.TB) []string {
		exe, err := exec.LookPath("bash")
		if err != nil {
			b.Fatal(err)
		}
		return []string{exe, "--noprofile", "--norc", "-c", `source ./bench.sh; greet "$1"`, "bash", bench.Input}
	})
}

// BenchmarkBashWarmInvokeSpaced measures the latency of a warm invocation
// that arrives after an idle pause: the worker forks each invocation's
// subshell ahead of its request, so the fork is off this path.
func BenchmarkBashWarmInvokeSpaced(b *testing.B) {
	adaptertest.BenchmarkWarmSpaced(b, conformance, bench, 20*time.Millisecond)
}
