package python_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
)

// bench is the module both benchmarks run: a typical small handler that
// imports a few standard modules.
var bench = adaptertest.Bench{
	Handler: adaptertest.Handler{Handler: "bench.echo", Files: map[string]string{
		"bench.py": "import json, logging, os, re\n\ndef echo(event):\n    return {\"got\": event}\n",
	}},
	Input: `{"n": 1}`, Output: `{"got":{"n":1}}`,
	Worker: "/worker.py",
}

// BenchmarkPythonWarmInvoke measures one invocation on a warm worker: the
// module is already imported, only the frame round trip and the call run.
func BenchmarkPythonWarmInvoke(b *testing.B) { adaptertest.BenchmarkWarm(b, conformance, bench) }

// BenchmarkPythonColdInvoke is the baseline the warm worker replaces: a
// fresh interpreter per call that imports the module and runs it once.
func BenchmarkPythonColdInvoke(b *testing.B) {
	adaptertest.BenchmarkCold(b, conformance, bench.Files, bench.Output, func(b testing.TB) []string {
		// Use the real binary behind any pyenv-style shim, as the adapter
		// does, so the baseline is not inflated by the shim.
		out, err := exec.Command("python3", "-I", "-c", "import sys; sys.stdout.write(sys.executable)").Output()
		if err != nil {
			b.Fatal(err)
		}
		const script = "import sys, json; sys.path.insert(0, '.'); import bench; sys.stdout.write(json.dumps(bench.echo(json.loads(sys.argv[1])), separators=(',', ':')))"
		return []string{strings.TrimSpace(string(out)), "-I", "-u", "-c", script, bench.Input}
	})
}
