package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
)

// abShapes are the handlers `fnbench ab` can compare builds on: the
// bench's P, P5, S, SI, S5 and S5I peers and the sdk-go peer each is
// measured against.
var abShapes = map[string]struct {
	prefix, service, handler, runtime, code, durability string
	want                                                func([]byte) []byte
	nkey, sdkgo                                         string // the sdk-go peer's key and service
	inline                                              bool   // bash: {subshell: false}
}{
	"function":        {"P", "PyEcho", "echo", "python", "bench.echo", "function", echoAnswer, "N", "Echo", false},
	"steps":           {"P5", "PySteps", "steps", "python", "steps.steps", "steps", stepsAnswer, "N5", "Steps", false},
	"bash":            {"S", "BashEcho", "echo", "bash", "bench.respond", "function", echoAnswer, "N", "Echo", false},
	"bashinline":      {"SI", "BashEchoInline", "echo", "bash", "bench.respond", "function", echoAnswer, "N", "Echo", true},
	"bashsteps":       {"S5", "BashSteps", "steps", "bash", "steps.steps", "steps", stepsAnswer, "N5", "Steps", false},
	"bashstepsinline": {"S5I", "BashStepsInline", "steps", "bash", "steps.steps", "steps", stepsAnswer, "N5", "Steps", true},
}

// abBuild is one bridge binary under test: --builds name=path[@workers].
type abBuild struct {
	name, bin string
	workers   int
}

// parseABBuilds reads --builds: comma-separated name=path, each with an
// optional @N of warm registrations (default def).
func parseABBuilds(s string, def int) ([]abBuild, error) {
	var out []abBuild
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		name, bin, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || bin == "" {
			return nil, fmt.Errorf("--builds: %q is not name=path[@workers]", item)
		}
		if seen[name] {
			return nil, fmt.Errorf("--builds: the name %q is given twice", name)
		}
		seen[name] = true
		b := abBuild{name: name, bin: bin, workers: def}
		if path, n, ok := strings.Cut(bin, "@"); ok {
			w, err := strconv.Atoi(n)
			if err != nil || w < 1 {
				return nil, fmt.Errorf("--builds: %q: @%s is not a number of warm registrations", item, n)
			}
			b.bin, b.workers = path, w
		}
		out = append(out, b)
	}
	return out, nil
}

// abCmd is `fnbench ab`: an interleaved A/B of bridge builds through one
// restate-server, beside the sdk-go peer. Each build serves the same
// handler under its own service name; after priming, every round measures
// each peer once at -c (the order rotating), so the builds share the same
// minutes of the machine. It prints one line per point; the changes in
// bench/NOTES.md were measured with it. A bridge build older than
// functionruntime.DeclareContextCommand gives Bash steps their agent only
// when it is named bridge or fnbridge: put each such build in a directory
// of its own under that name.
func abCmd(args []string) error {
	fs := flag.NewFlagSet("ab", flag.ContinueOnError)
	builds := fs.String("builds", "", "comma-separated name=path[@workers] bridge binaries to compare")
	shape := fs.String("shape", "function", "the handler: function (P against N), steps (P5 against N5), bash (S against N), bashsteps (S5 against N5), or bashinline and bashstepsinline (the Bash ones inline)")
	sdkgo := fs.String("sdkgo", "", "bench/sdkgo binary (the reference peer; empty: none)")
	rsBin := fs.String("restate-server", os.Getenv("RESTATE_SERVER_BIN"), "restate-server 1.7.12 binary")
	reps := fs.Int("reps", 4, "rounds")
	point := fs.Duration("point", 4*time.Second, "measured time of one point")
	c := fs.Int("c", 32, "concurrency")
	workers := fs.Int("workers", 32, "warm registrations of a build without @N")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sh, ok := abShapes[*shape]
	if !ok {
		return fmt.Errorf("--shape %q: use function, steps, bash, bashsteps, bashinline or bashstepsinline", *shape)
	}
	bs, err := parseABBuilds(*builds, *workers)
	if err != nil {
		return err
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fnbench-ab-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := writeFixtures(dir, registrations{python: *workers, bash: *workers, steps: *workers}); err != nil {
		return err
	}
	var peers []*peer
	starts := map[string][]string{}
	if *sdkgo != "" {
		peers = append(peers, &peer{Key: sh.nkey, Service: sh.sdkgo, Handler: sh.handler, want: sh.want})
		starts[sh.nkey] = []string{*sdkgo, "--service", sh.sdkgo}
	}
	for _, b := range bs {
		svc := sh.service + b.name
		cfg := filepath.Join(dir, b.name+".yaml")
		yaml := bridgeConfig(svc, sh.handler, sh.runtime, sh.code, b.workers, b.workers, sh.durability)
		if sh.inline {
			yaml += inlineBash
		}
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			return err
		}
		key := sh.prefix + b.name
		peers = append(peers, &peer{Key: key, Service: svc, Handler: sh.handler, want: sh.want})
		starts[key] = []string{b.bin, "serve", "--config", cfg}
	}
	for _, p := range peers {
		argv := starts[p.Key]
		if err := startPeer(ctx, p, dir, argv[0], argv[1:]...); err != nil {
			return fmt.Errorf("peer %s: %w", p.Key, err)
		}
		defer p.proc.stop(10 * time.Second)
	}
	rs, err := restateserver.Launch(ctx, restateserver.Options{Binary: *rsBin, Dir: filepath.Join(dir, "restate")})
	if err != nil {
		return err
	}
	defer rs.Close()
	for _, p := range peers {
		if _, err := rs.TryRegister(ctx, p.uri(), false); err != nil {
			return fmt.Errorf("register %s: %w", p.Key, err)
		}
	}
	for _, p := range peers {
		if res := prime(ctx, rs, p, 32, 2*time.Second); res.Errors > 0 {
			return fmt.Errorf("priming %s: %d errors, first: %s", p.Key, res.Errors, res.FirstError)
		}
	}
	for rep := 0; rep < *reps; rep++ {
		for _, p := range rotate(peers, rep) {
			pt, err := measureIngress(ctx, rs, p, *c, *point, time.Second)
			if err != nil {
				return err
			}
			fmt.Printf("round %d %-8s c=%d: %6.0f req/s p50 %6.2f ms | deployment %5.0f µs/inv (process %5.0f + workers %5.0f) | restate-server %5.0f µs/req | machine %.2f cores | load %s | errors %d\n",
				rep, p.Key, *c, pt.Load.rps(), ms(percentile(pt.Load.Latencies, 50)),
				us(pt.cpuPerInv(pt.Self+pt.Workers)), us(pt.cpuPerInv(pt.Self)), us(pt.cpuPerInv(pt.Workers)),
				us(pt.cpuPerInv(pt.Server)), pt.Machine.Seconds()/pt.Load.Duration.Seconds(), loadAvg(), pt.Load.Errors)
		}
	}
	return nil
}
