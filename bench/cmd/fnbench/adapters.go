package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/python"
)

// adapterPoint is one runtime's latency distributions for one repetition:
// a warm worker's invoke back to back and after an idle pause, a fresh
// process per call (the baseline a warm worker replaces), and the
// adapter's own cold path (start a worker, invoke once, stop it).
type adapterPoint struct {
	Runtime                            string
	Warm, WarmIdle, Fresh, AdapterCold []time.Duration // sorted
}

// adapterCounts are the samples per repetition: enough for a p99 of the
// fast paths, bounded for the slow ones.
type adapterCounts struct{ warm, idle, fresh, cold int }

// idlePause is the untimed pause before each "after idle" warm invoke and
// before each fresh-process call: both then start from an idle worker or
// machine, the way a call arrives between bursts. A warm bash worker uses
// such a pause to fork the next invocation's subshell ahead of it; back to
// back, that fork is on the next call's path, which Warm shows.
const idlePause = 10 * time.Millisecond

// adapterRuntimes are the adapters section 3 measures: bash-inline is the
// bash adapter with its invocations in the worker's own shell.
var adapterRuntimes = []string{"python", "bash", "bash-inline"}

func measureAdapter(ctx context.Context, runtime, fnDir string, n adapterCounts) (adapterPoint, error) {
	var (
		ad      functionruntime.Adapter
		handler string
		fresh   func() *exec.Cmd
		want    string
	)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + fnDir}
	input := `{"n":1}`
	switch runtime {
	case "python":
		ad = python.New(python.Options{Grace: 500 * time.Millisecond, NoSubreaper: true})
		handler, want = "bench.echo", input
		// The real interpreter behind any shim, as the adapter uses.
		out, err := exec.CommandContext(ctx, "python3", "-I", "-c", "import sys; sys.stdout.write(sys.executable)").Output()
		if err != nil {
			return adapterPoint{}, fmt.Errorf("python3: %v", err)
		}
		exe := strings.TrimSpace(string(out))
		const script = "import sys, json; sys.path.insert(0, '.'); import bench; sys.stdout.write(json.dumps(bench.echo(json.loads(sys.argv[1])), separators=(',', ':')))"
		fresh = func() *exec.Cmd { return exec.CommandContext(ctx, exe, "-I", "-u", "-c", script, input) }
	case "bash", "bash-inline":
		ad = bash.New(bash.Options{Grace: 500 * time.Millisecond, NoSubreaper: true})
		handler, want = "bench.respond", input
		exe, err := exec.LookPath("bash")
		if err != nil {
			return adapterPoint{}, err
		}
		fresh = func() *exec.Cmd {
			return exec.CommandContext(ctx, exe, "--noprofile", "--norc", "-c", `source ./bench.sh; respond "$1"`, "bash", input)
		}
	default:
		return adapterPoint{}, fmt.Errorf("unknown runtime %q", runtime)
	}
	// bash-inline is bash with its invocations in the worker's own shell
	// (bash.subshell: false): the same fresh bash to compare with.
	spec := functionruntime.WorkerSpec{RunUID: "bench-" + runtime, Dir: fnDir, Handler: handler, Logger: zerolog.Nop(), Inline: runtime == "bash-inline"}
	inv := functionruntime.Invocation{ID: "inv_bench", Input: []byte(input), ContentType: "application/json", Logger: zerolog.Nop()}
	check := func(out []byte) error {
		if !sameJSON(out, []byte(want)) {
			return fmt.Errorf("%s: got %q, want %s", runtime, out, want)
		}
		return nil
	}
	pt := adapterPoint{Runtime: runtime}

	w, err := ad.Start(ctx, spec)
	if err != nil {
		return pt, err
	}
	// timed is one warm invoke, checked; only the call is timed.
	timed := func() (time.Duration, error) {
		t0 := time.Now()
		res, err := w.Invoke(ctx, inv)
		d := time.Since(t0)
		if err == nil {
			err = check(res.Output)
		}
		return d, err
	}
	for i := range n.warm + 20 { // the first 20 warm the caches, unrecorded
		d, err := timed()
		if err != nil {
			_ = w.Close()
			return pt, err
		}
		if i >= 20 {
			pt.Warm = append(pt.Warm, d)
		}
	}
	for range n.idle {
		time.Sleep(idlePause)
		d, err := timed()
		if err != nil {
			_ = w.Close()
			return pt, err
		}
		pt.WarmIdle = append(pt.WarmIdle, d)
	}
	if err := w.Close(); err != nil {
		return pt, err
	}

	for range n.fresh {
		time.Sleep(idlePause)
		cmd := fresh()
		cmd.Dir, cmd.Env = fnDir, env
		t0 := time.Now()
		out, err := cmd.Output()
		d := time.Since(t0)
		if err == nil {
			err = check(out)
		}
		if err != nil {
			return pt, fmt.Errorf("%s fresh process: %v", runtime, err)
		}
		pt.Fresh = append(pt.Fresh, d)
	}

	for range n.cold {
		t0 := time.Now()
		w, err := ad.Start(ctx, spec)
		if err != nil {
			return pt, err
		}
		res, err := w.Invoke(ctx, inv)
		d := time.Since(t0)
		_ = w.Close()
		if err == nil {
			err = check(res.Output)
		}
		if err != nil {
			return pt, err
		}
		pt.AdapterCold = append(pt.AdapterCold, d)
	}
	slices.Sort(pt.Warm)
	slices.Sort(pt.WarmIdle)
	slices.Sort(pt.Fresh)
	slices.Sort(pt.AdapterCold)
	return pt, nil
}

// functionsDir is where writeFixtures put the handler sources.
func functionsDir(workDir string) string { return filepath.Join(workDir, "functions") }
