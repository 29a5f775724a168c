package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
)

// config is the run's settings (flags of `fnbench run`).
type config struct {
	bridgeBin, sdkgoBin, restateBin string
	out, notes, workDir, profileDir string
	reps                            int
	pointDur, driveDur, warmUp      time.Duration
	memReps                         int
	quick                           bool
	concurrency                     []int
	driveConcurrency                []int
	regs                            registrations
	adapter                         adapterCounts
	keep                            bool
}

// results is everything one run measured, for the report.
type results struct {
	cfg              config
	machine          machineInfo
	started, ended   time.Time
	loadBefore       string
	loadAfter        string
	ingress          []ingressPoint
	direct           []directPoint
	adapters         []adapterPoint
	inFlight         []inFlightRSS
	idleRSS, peakRSS map[string]int64 // peer's own process, KiB
	workerMem        map[string][]workerMem
	peers            []*peer
	// failures are points that could not be measured; the run goes on
	// and the report lists them.
	failures []string
}

func run(args []string) error {
	var cfg config
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&cfg.bridgeBin, "bridge", "bin/bridge", "bridge binary (peers P, S, M)")
	fs.StringVar(&cfg.sdkgoBin, "sdkgo", "", "bench/sdkgo binary (peer N)")
	fs.StringVar(&cfg.restateBin, "restate-server", os.Getenv("RESTATE_SERVER_BIN"), "restate-server 1.7.12 binary")
	fs.StringVar(&cfg.out, "out", "bench/RESULTS.md", "report to write")
	fs.StringVar(&cfg.notes, "notes", "", "markdown file appended to the report (analysis, profiles)")
	fs.StringVar(&cfg.workDir, "workdir", "", "scratch directory (default: a new temporary one, removed at the end)")
	fs.StringVar(&cfg.profileDir, "profile", "", "write a CPU profile of peer F (fake-serve) into this directory")
	fs.IntVar(&cfg.reps, "reps", 3, "repetitions of every point (the report quotes the median)")
	fs.DurationVar(&cfg.pointDur, "point", 4*time.Second, "measured time of one point through restate-server")
	fs.DurationVar(&cfg.driveDur, "drive", 2*time.Second, "approximate measured time of one direct (Drive) point")
	fs.IntVar(&cfg.regs.python, "workers", 4, "warm registrations (concurrency = min_warm) of peer P")
	fs.IntVar(&cfg.regs.bash, "bash-workers", 32, "warm registrations (concurrency = min_warm) of peer S")
	fs.IntVar(&cfg.regs.steps, "step-workers", 32, "warm registrations (concurrency = min_warm) of the five-step peers P5 and S5")
	fs.IntVar(&cfg.adapter.warm, "warm-samples", 500, "warm invocations per runtime and repetition")
	fs.IntVar(&cfg.adapter.idle, "idle-samples", 100, "warm invocations after an idle pause per runtime and repetition")
	fs.IntVar(&cfg.adapter.fresh, "fresh-samples", 30, "fresh-process invocations per runtime and repetition")
	fs.IntVar(&cfg.adapter.cold, "cold-samples", 10, "adapter cold starts per runtime and repetition")
	fs.DurationVar(&cfg.warmUp, "warmup", 2*time.Second, "longest unrecorded warm-up (10·c requests) before a point through restate-server")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the scratch directory (logs, configurations)")
	fs.BoolVar(&cfg.quick, "quick", false, "smoke run (under a minute): --reps 1 --point 1s --drive 500ms --warmup 300ms, few adapter samples, one memory repetition (flags given explicitly win)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.memReps = cfg.reps
	if cfg.quick {
		applyQuick(fs, &cfg)
	}
	cfg.concurrency = []int{1, 8, 32}
	cfg.driveConcurrency = []int{1, 32}
	for name, path := range map[string]string{"--bridge": cfg.bridgeBin, "--sdkgo": cfg.sdkgoBin, "--restate-server": cfg.restateBin} {
		if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s %q: not an executable file", name, path)
		}
	}
	if cfg.reps < 1 {
		return fmt.Errorf("--reps %d: want at least 1", cfg.reps)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if cfg.workDir == "" {
		if cfg.workDir, err = os.MkdirTemp("", "fnbench-"); err != nil {
			return err
		}
		if !cfg.keep {
			defer os.RemoveAll(cfg.workDir)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	r := &results{cfg: cfg, started: time.Now(), idleRSS: map[string]int64{}, peakRSS: map[string]int64{}, workerMem: map[string][]workerMem{}}
	r.machine = gatherMachine(ctx, cfg)
	r.loadBefore = loadAvg()
	logf("machine: %d cores, %s; load average %s; scratch %s", r.machine.Cores, r.machine.CPU, r.loadBefore, cfg.workDir)

	cfgs, err := writeFixtures(cfg.workDir, cfg.regs)
	if err != nil {
		return err
	}

	// 3. Adapters first, while nothing else of ours runs.
	for rep := 1; rep <= cfg.reps; rep++ {
		for _, rt := range adapterRuntimes {
			pt, err := measureAdapter(ctx, rt, functionsDir(cfg.workDir), cfg.adapter)
			if err != nil {
				return fmt.Errorf("adapter %s: %w", rt, err)
			}
			logf("adapter %-6s rep %d: warm p50 %.3f ms (after idle %.3f ms), fresh p50 %.2f ms, adapter cold p50 %.2f ms",
				rt, rep, ms(percentile(pt.Warm, 50)), ms(percentile(pt.WarmIdle, 50)), ms(percentile(pt.Fresh, 50)), ms(percentile(pt.AdapterCold, 50)))
			r.adapters = append(r.adapters, pt)
		}
	}

	// The peers.
	fArgs := []string{"fake-serve", "--config", cfgs["F"]}
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return err
		}
		abs, _ := filepath.Abs(filepath.Join(cfg.profileDir, "fake-serve.cpu.pprof"))
		fArgs = append(fArgs, "--cpuprofile", abs)
	}
	r.peers = []*peer{
		{Key: "N", Label: "sdk-go v1.2.0 echo in restate.Run", Service: "Echo", Handler: "echo", want: echoAnswer},
		{Key: "F", Label: "bridge + in-process fake runtime", Service: "FakeEcho", Handler: "echo", want: echoAnswer},
		{Key: "P", Label: "bridge serve, warm Python echo", Service: "PyEcho", Handler: "echo", want: echoAnswer},
		{Key: "S", Label: "bridge serve, warm Bash echo", Service: "BashEcho", Handler: "echo", want: echoAnswer},
		{Key: "SI", Label: "bridge serve, warm Bash echo, inline (bash: {subshell: false})", Service: "BashEchoInline", Handler: "echo", want: echoAnswer},
		{Key: "N5", Label: "sdk-go v1.2.0, five restate.Run steps", Service: "Steps", Handler: "steps", want: stepsAnswer, steps: true},
		{Key: "P5", Label: "bridge serve, warm Python, durability: steps, five fnbridge.run", Service: "PySteps", Handler: "steps", want: stepsAnswer, steps: true},
		{Key: "S5", Label: "bridge serve, warm Bash, durability: steps, five `fnbridge run --var v sN -- printf ...`", Service: "BashSteps", Handler: "steps", want: stepsAnswer, steps: true},
		{Key: "S5I", Label: "S5 inline (bash: {subshell: false})", Service: "BashStepsInline", Handler: "steps", want: stepsAnswer, steps: true},
	}
	mem := &peer{Key: "M", Label: "bridge serve, Bash handler sleeping 4 s (32 warm)", Service: "Nap", Handler: "nap"}
	starts := map[string][]string{
		"N":   {cfg.sdkgoBin, "--service", "Echo"},
		"F":   append([]string{self}, fArgs...),
		"P":   {cfg.bridgeBin, "serve", "--config", cfgs["P"]},
		"S":   {cfg.bridgeBin, "serve", "--config", cfgs["S"]},
		"SI":  {cfg.bridgeBin, "serve", "--config", cfgs["SI"]},
		"N5":  {cfg.sdkgoBin, "--service", "Steps"},
		"P5":  {cfg.bridgeBin, "serve", "--config", cfgs["P5"]},
		"S5":  {cfg.bridgeBin, "serve", "--config", cfgs["S5"]},
		"S5I": {cfg.bridgeBin, "serve", "--config", cfgs["S5I"]},
		"M":   {cfg.bridgeBin, "serve", "--config", cfgs["M"]},
	}
	if cfg.profileDir != "" {
		// P5 under fnbench's own copy of `bridge serve` (embedded runtimes),
		// profiled: bin/bridge has no profiling flag.
		abs, _ := filepath.Abs(filepath.Join(cfg.profileDir, "p5-steps.cpu.pprof"))
		starts["P5"] = []string{self, "fake-serve", "--embedded", "--config", cfgs["P5"], "--cpuprofile", abs}
		for _, p := range r.peers {
			if p.Key == "P5" {
				p.Label += " (profiled: fnbench fake-serve --embedded)"
			}
		}
	}
	all := append(append([]*peer{}, r.peers...), mem)
	for _, p := range all {
		argv := starts[p.Key]
		if err := startPeer(ctx, p, cfg.workDir, argv[0], argv[1:]...); err != nil {
			return fmt.Errorf("peer %s: %w", p.Key, err)
		}
		defer func(p *peer) {
			if err := p.proc.stop(10 * time.Second); err != nil {
				logf("stop %s: %v", p.Key, err)
			}
		}(p)
		logf("peer %s (%s) listening on %s, pid %d", p.Key, p.Label, p.addr, p.proc.pid())
	}
	for _, p := range all {
		if kb, err := rssKB(p.proc.pid()); err == nil {
			r.idleRSS[p.Key] = kb
		}
		if p.Key != "N" && p.Key != "N5" && p.Key != "F" {
			if w, err := workerMemory(p.proc.pid()); err == nil {
				r.workerMem[p.Key] = w
			}
		}
	}

	// 2. Directly against each endpoint, no restate-server.
	// The five-step peers only through restate-server: Drive answers one
	// run proposal per invocation.
	var echoPeers []*peer
	for _, p := range r.peers {
		if !p.steps {
			echoPeers = append(echoPeers, p)
		}
	}
	err = r.eachPoint(ctx, "direct", echoPeers, cfg.driveConcurrency, func(p *peer, c, rep int) error {
		pt, err := measureDirect(ctx, p, c, cfg.driveDur)
		if err != nil {
			return err
		}
		logf("drive   %s c=%-2d rep %d: %7.0f inv/s, p50 %.3f ms, CPU %.0f µs/inv (+%.0f workers)",
			p.Key, c, rep, float64(pt.Stats.Invocations)/pt.Stats.Duration.Seconds(), ms(pt.Stats.P50),
			us(pt.Self)/float64(pt.Stats.Invocations), us(pt.Workers)/float64(pt.Stats.Invocations))
		r.direct = append(r.direct, pt)
		return nil
	})
	if err != nil {
		return err
	}

	// 1. Through restate-server.
	rs, err := restateserver.Launch(ctx, restateserver.Options{Binary: cfg.restateBin, Dir: filepath.Join(cfg.workDir, "restate-server")})
	if err != nil {
		return err
	}
	defer func() {
		if err := rs.Close(); err != nil {
			logf("stop restate-server: %v", err)
		}
	}()
	logf("restate-server ingress %s, admin %s, pid %d", rs.IngressURL(), rs.AdminURL(), rs.PID())
	for _, p := range all {
		if _, err := rs.TryRegister(ctx, p.uri(), false); err != nil {
			return fmt.Errorf("register %s: %w", p.Key, err)
		}
	}
	// Prime every peer once, untimed, at c=32: each warm registration (32
	// for F, P5, S5) takes its first invocations (a Python worker's lazy
	// imports, its first connection to the context endpoint) here, not in
	// the c=1 point whose short warm-up reaches only a few of them.
	for _, p := range r.peers {
		res := prime(ctx, rs, p, 32, 2*time.Second)
		logf("prime   %-2s c=32: %d answered, %d errors", p.Key, res.OK, res.Errors)
	}
	err = r.eachPoint(ctx, "ingress", r.peers, cfg.concurrency, func(p *peer, c, rep int) error {
		pt, err := measureIngress(ctx, rs, p, c, cfg.pointDur, cfg.warmUp)
		if err != nil {
			return err
		}
		logf("ingress %-2s c=%-2d rep %d: %6.0f req/s, p50 %.2f ms, p99 %.2f ms, CPU %.0f µs/inv (+%.0f workers), restate-server %.0f%%, errors %d",
			p.Key, c, rep, pt.Load.rps(), ms(percentile(pt.Load.Latencies, 50)), ms(percentile(pt.Load.Latencies, 99)),
			us(pt.cpuPerInv(pt.Self)), us(pt.cpuPerInv(pt.Workers)), 100*pt.Server.Seconds()/pt.Load.Duration.Seconds(), pt.Load.Errors)
		r.ingress = append(r.ingress, pt)
		return nil
	})
	if err != nil {
		return err
	}

	// 4. Memory with 32 in flight.
	for rep := 1; rep <= cfg.memReps; rep++ {
		m, err := measureInFlight(ctx, rs, mem, 32)
		if err != nil {
			return err
		}
		logf("memory  M rep %d: idle %d KiB, peak %d KiB with %d in flight, errors %d", rep, m.IdleKB, m.PeakKB, m.MaxInFlight, m.Errors)
		r.inFlight = append(r.inFlight, m)
	}
	for _, p := range all {
		if kb, err := statusKB(p.proc.pid(), "VmHWM"); err == nil {
			r.peakRSS[p.Key] = kb
		}
	}
	r.peers = all
	r.ended = time.Now()
	r.loadAfter = loadAvg()
	if err := os.WriteFile(cfg.out, []byte(report(r)), 0o644); err != nil {
		return err
	}
	logf("wrote %s (load average now %s)", cfg.out, r.loadAfter)
	return nil
}

// applyQuick sets the --quick defaults of every flag not given explicitly.
func applyQuick(fs *flag.FlagSet, cfg *config) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["reps"] {
		cfg.reps = 1
	}
	if !set["point"] {
		cfg.pointDur = time.Second
	}
	if !set["drive"] {
		cfg.driveDur = 500 * time.Millisecond
	}
	if !set["warmup"] {
		cfg.warmUp = 300 * time.Millisecond
	}
	for name, v := range map[string]*int{"warm-samples": &cfg.adapter.warm, "idle-samples": &cfg.adapter.idle, "fresh-samples": &cfg.adapter.fresh, "cold-samples": &cfg.adapter.cold} {
		if !set[name] {
			*v = max(*v/10, 2)
		}
	}
	cfg.memReps = 1
}

// eachPoint runs measure once per repetition, concurrency and peer of
// peers, the peer order rotating each repetition. A point that fails is
// recorded (r.fail) and the run goes on; a cancelled run ends with ctx's
// error.
func (r *results) eachPoint(ctx context.Context, what string, peers []*peer, concurrency []int, measure func(p *peer, c, rep int) error) error {
	for rep := 1; rep <= r.cfg.reps; rep++ {
		for _, c := range concurrency {
			for _, p := range rotate(peers, rep) {
				err := measure(p, c, rep)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil {
					r.fail("%s %s c=%d rep %d: %v", what, p.Key, c, rep, err)
				}
			}
		}
	}
	return nil
}

func (r *results) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	logf("FAILED %s", msg)
	r.failures = append(r.failures, msg)
}

// rotate starts the peer order at a different peer every repetition, so no
// peer always runs first (or right after a given other one).
func rotate(ps []*peer, rep int) []*peer {
	k := rep % len(ps)
	return append(append([]*peer{}, ps[k:]...), ps[:k]...)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
