package adaptertest

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/rs/zerolog"
)

// Bench is the handler a benchmark invokes with Input, expecting Output.
type Bench struct {
	Handler
	Input, Output string
	// Worker is a part of the worker's command line that tells it apart
	// among this process's children.
	Worker string
}

// BenchmarkWarm measures one invocation on a warm worker: the handler is
// already loaded, only the round trip and the call run.
func BenchmarkWarm(b *testing.B, a *Adapter, bench Bench) {
	f := a.NewFixture(b, bench.Handler.Handler, bench.Files)
	f.Spec.Logger = zerolog.Nop()
	w := f.Start(b)
	inv := f.Invocation("bench", []byte(bench.Input))
	inv.Logger = zerolog.Nop()
	ctx := context.Background()
	pid := proctest.FindChild(bench.Worker)
	if pid == 0 {
		b.Fatal("worker process not found")
	}
	before := proctest.MeasureCPU(pid)
	for b.Loop() {
		res, err := w.Invoke(ctx, inv)
		if err != nil || string(res.Output) != bench.Output {
			b.Fatalf("Invoke = %q, %v", res.Output, err)
		}
	}
	reportCPU(b, proctest.MeasureCPU(pid).Sub(before))
}

// BenchmarkWarmSpaced measures the latency of a warm invocation that
// arrives after an idle pause, the usual shape of function traffic. The
// pause itself is not timed; the CPU per invocation includes what the
// worker does while idle (a bash worker forks the next subshell then).
func BenchmarkWarmSpaced(b *testing.B, a *Adapter, bench Bench, pause time.Duration) {
	f := a.NewFixture(b, bench.Handler.Handler, bench.Files)
	f.Spec.Logger = zerolog.Nop()
	w := f.Start(b)
	inv := f.Invocation("bench", []byte(bench.Input))
	inv.Logger = zerolog.Nop()
	ctx := context.Background()
	pid := proctest.FindChild(bench.Worker)
	if pid == 0 {
		b.Fatal("worker process not found")
	}
	before := proctest.MeasureCPU(pid)
	defer func() { reportCPU(b, proctest.MeasureCPU(pid).Sub(before)) }()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(pause)
		b.StartTimer()
		res, err := w.Invoke(ctx, inv)
		if err != nil || string(res.Output) != bench.Output {
			b.Fatalf("Invoke = %q, %v", res.Output, err)
		}
	}
}

// BenchmarkCold is the baseline a warm worker replaces: a fresh
// interpreter per call, run as argv(b) in the handler's working directory
// with the workers' minimal environment, that loads the handler and calls
// it once, printing want.
func BenchmarkCold(b *testing.B, a *Adapter, files map[string]string, want string, argv func(testing.TB) []string) {
	f := a.NewFixture(b, "", files)
	args := argv(b)
	before := proctest.MeasureCPU(0)
	for b.Loop() {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = f.Dir
		cmd.Env = []string{"PATH=" + proc.DefaultPath, "LANG=" + proc.DefaultLang, "HOME=" + f.Dir}
		out, err := cmd.Output()
		if err != nil || string(out) != want {
			b.Fatalf("cold call = %q, %v", out, err)
		}
	}
	reportCPU(b, proctest.MeasureCPU(0).Sub(before))
}

// reportCPU reports CPU time per operation next to wall time, in total
// (Go, worker or fresh interpreters, their children) and for the Go side
// alone: on a shared machine wall time mostly measures the wait for a CPU.
func reportCPU(b *testing.B, used proctest.CPU) {
	b.ReportMetric(float64(used.Total().Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(used.Self.Microseconds())/float64(b.N), "go-cpu-µs/op")
}
