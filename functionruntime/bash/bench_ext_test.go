package bash_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/fnbridge/fnbridge/internal/procstat"
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

// BenchmarkBashWarmInvokeInline is BenchmarkBashWarmInvoke with the
// invocations inline, in the worker's own shell: no subshell per call.
func BenchmarkBashWarmInvokeInline(b *testing.B) {
	adaptertest.BenchmarkWarm(b, conformanceInline, bench)
}

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

// benchSteps is the five-step handler of the benchmark's S5 peer: each
// step is `fnbridge run --var v sK -- printf ...` in the invocation's
// shell, through the worker's step agent.
const benchSteps = "steps() {\n  local n=${1#*:} k v\n  n=${n%\\}}\n" +
	"  for k in 1 2 3 4 5; do\n" +
	"    fnbridge run --var v \"s$k\" -- printf '{\"n\":%s,\"s\":%d}' \"$n\" \"$k\" || exit\n" +
	"  done\n  printf '%s' \"$v\"\n}\n"

// BenchmarkBashSteps measures one five-step invocation (durability:
// steps) on a warm worker against a real context endpoint with an
// in-memory journal, each invocation a fresh attempt. Its CPU includes
// the step agent's, which is no child of the worker process.
func BenchmarkBashSteps(b *testing.B) { benchmarkSteps(b, conformance) }

// BenchmarkBashStepsInline is BenchmarkBashSteps with the invocations in
// the worker's own shell.
func BenchmarkBashStepsInline(b *testing.B) { benchmarkSteps(b, conformanceInline) }

func benchmarkSteps(b *testing.B, a *adaptertest.Adapter) {
	e := newStepsEnv(b)
	f := a.NewFixture(b, "steps.steps", map[string]string{"steps.sh": benchSteps})
	f.A = bash.New(bash.Options{Grace: adaptertest.Grace, ContextCommand: e.bridge})
	f.Spec.Logger = zerolog.Nop()
	w := f.Start(b)
	pid := proctest.FindChild(bench.Worker)
	if pid == 0 {
		b.Fatal("worker process not found")
	}
	invoke := func() {
		a, err := e.Srv.Open("", &stepctxtest.Journal{})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		inv := e.Invocation(f, a, `{"n":7}`)
		inv.Logger = zerolog.Nop()
		res, err := w.Invoke(context.Background(), inv)
		if err != nil || string(res.Output) != `{"n":7,"s":5}` {
			b.Fatalf("Invoke = %q, %v", res.Output, err)
		}
	}
	invoke() // starts the step agent
	agent := stepAgent(b, pid)
	// The worker tree: the worker, its subshells and the agent.
	cpu := func() (all, workers, agentCPU time.Duration) {
		c := proctest.MeasureCPU(pid)
		if st, err := procstat.Read(agent); err == nil {
			agentCPU = st.CPU()
		}
		return c.Total() + agentCPU, c.Worker + agentCPU, agentCPU
	}
	all, workers, agentCPU := cpu()
	for b.Loop() {
		invoke()
	}
	all2, workers2, agentCPU2 := cpu()
	perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(perOp(all2-all), "cpu-µs/op")
	b.ReportMetric(perOp(workers2-workers), "worker-cpu-µs/op")
	b.ReportMetric(perOp(agentCPU2-agentCPU), "agent-cpu-µs/op")
}

// stepAgent finds the step agent of the worker pid: the process running
// `fnbridge agent DIR PID`.
func stepAgent(b *testing.B, pid int) int {
	suffix := []byte("\x00" + strconv.Itoa(pid) + "\x00")
	for _, st := range procstat.All() {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/cmdline")
		if bytes.Contains(cmd, []byte("\x00agent\x00")) && bytes.HasSuffix(cmd, suffix) {
			return st.PID
		}
	}
	b.Fatal("step agent not found")
	return 0
}
