package bash_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/rs/zerolog"
)

// benchFiles is the file both benchmarks run: a small handler that echoes
// a JSON document built from its argument.
var benchFiles = map[string]string{"bench.sh": "greet() {\n\tprintf '{\"got\":%s}\\n' \"$1\"\n}\n"}

// BenchmarkBashWarmInvoke measures one invocation on a warm worker: the
// file is already sourced; each call costs one subshell.
func BenchmarkBashWarmInvoke(b *testing.B) {
	f := newFixture(b, "bench.greet", benchFiles)
	f.spec.Logger = zerolog.Nop()
	w := f.start(b)
	inv := f.invocation("bench", []byte(`{"n":1}`))
	inv.Logger = zerolog.Nop()
	ctx := context.Background()
	pid := proctest.FindChild("fnbridge-bash-worker")
	if pid == 0 {
		b.Fatal("worker process not found")
	}
	before := proctest.MeasureCPU(pid)
	for b.Loop() {
		res, err := w.Invoke(ctx, inv)
		if err != nil || string(res.Output) != `{"got":{"n":1}}` {
			b.Fatalf("Invoke = %q, %v", res.Output, err)
		}
	}
	reportCPU(b, proctest.MeasureCPU(pid).Sub(before))
}

// reportCPU reports CPU time per operation next to wall time, in total
// (Go, worker or fresh interpreters, their children) and for the Go side
// alone: on a shared machine wall time mostly measures the wait for a CPU.
func reportCPU(b *testing.B, used proctest.CPU) {
	b.ReportMetric(float64(used.Total().Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(used.Self.Microseconds())/float64(b.N), "go-cpu-µs/op")
}

// BenchmarkBashColdInvoke is the baseline: a fresh bash per call that
// sources the file and calls the function once.
func BenchmarkBashColdInvoke(b *testing.B) {
	f := newFixture(b, "bench.greet", benchFiles)
	exe, err := exec.LookPath("bash")
	if err != nil {
		b.Fatal(err)
	}
	before := proctest.MeasureCPU(0)
	for b.Loop() {
		cmd := exec.Command(exe, "--noprofile", "--norc", "-c", `source ./bench.sh; greet "$1"`, "bash", `{"n":1}`)
		cmd.Dir = f.dir
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + f.dir}
		out, err := cmd.Output()
		if err != nil || string(out) != "{\"got\":{\"n\":1}}\n" {
			b.Fatalf("cold call = %q, %v", out, err)
		}
	}
	reportCPU(b, proctest.MeasureCPU(0).Sub(before))
}

// BenchmarkBashWarmInvokeSpaced measures the latency of a warm invocation
// that arrives after an idle pause, the usual shape of function traffic:
// the worker forks each invocation's subshell ahead of its request, so the
// fork is off this path. The pause itself is not timed.
func BenchmarkBashWarmInvokeSpaced(b *testing.B) {
	f := newFixture(b, "bench.greet", benchFiles)
	f.spec.Logger = zerolog.Nop()
	w := f.start(b)
	inv := f.invocation("bench", []byte(`{"n":1}`))
	inv.Logger = zerolog.Nop()
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
		res, err := w.Invoke(ctx, inv)
		if err != nil || string(res.Output) != `{"got":{"n":1}}` {
			b.Fatalf("Invoke = %q, %v", res.Output, err)
		}
	}
}
