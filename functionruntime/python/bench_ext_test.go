package python_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/rs/zerolog"
)

// benchFiles is the module both benchmarks run: a typical small handler
// that imports a few standard modules.
var benchFiles = map[string]string{"bench.py": "import json, logging, os, re\n\ndef echo(event):\n    return {\"got\": event}\n"}

// BenchmarkPythonWarmInvoke measures one invocation on a warm worker: the
// module is already imported, only the frame round trip and the call run.
func BenchmarkPythonWarmInvoke(b *testing.B) {
	f := newFixture(b, "bench.echo", benchFiles)
	f.spec.Logger = zerolog.Nop()
	w := f.start(b)
	inv := f.invocation("bench", `{"n": 1}`)
	inv.Logger = zerolog.Nop()
	ctx := context.Background()
	pid := proctest.FindChild("_fnbridge_worker")
	if pid == 0 {
		b.Fatal("worker process not found")
	}
	before := proctest.MeasureCPU(pid)
	for b.Loop() {
		res, err := w.Invoke(ctx, inv)
		if err != nil || string(res.Output) != `{"got":{"n":1}}` {
			b.Fatalf("Invoke = %s, %v", res.Output, err)
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

// BenchmarkPythonColdInvoke is the baseline the warm worker replaces: a
// fresh interpreter per call that imports the module and runs it once.
func BenchmarkPythonColdInvoke(b *testing.B) {
	f := newFixture(b, "bench.echo", benchFiles)
	// Use the real binary behind any pyenv-style shim, as the adapter does,
	// so the baseline is not inflated by the shim.
	out, err := exec.Command("python3", "-I", "-c", "import sys; sys.stdout.write(sys.executable)").Output()
	if err != nil {
		b.Fatal(err)
	}
	exe := strings.TrimSpace(string(out))
	const script = "import sys, json; sys.path.insert(0, '.'); import bench; sys.stdout.write(json.dumps(bench.echo(json.loads(sys.argv[1])), separators=(',', ':')))"
	before := proctest.MeasureCPU(0)
	for b.Loop() {
		cmd := exec.Command(exe, "-I", "-u", "-c", script, `{"n": 1}`)
		cmd.Dir = f.dir
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + f.dir}
		got, err := cmd.Output()
		if err != nil || string(got) != `{"got":{"n":1}}` {
			b.Fatalf("cold call = %s, %v", got, err)
		}
	}
	reportCPU(b, proctest.MeasureCPU(0).Sub(before))
}
