package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/internal/maxprocs"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate"
)

// fakeServe is peer F: `bridge serve` as cmd/bridge does it, with every
// runtime kind answered by echoRuntime (bridge.Options.Clients), so no
// worker process exists and the bridge's own cost is what is measured.
// With --embedded it keeps the configuration's runtimes (the embedded
// adapters, as bin/bridge serve): `fnbench run --profile` serves peer P5
// that way to profile the bridge under a real Python steps load (Bash
// steps need bin/bridge as the fnbridge command, so not S5).
func fakeServe(args []string) error {
	fs := flag.NewFlagSet("fake-serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "bridge configuration file")
	listen := fs.String("listen", "", "listen address host:port (overrides the file's listen)")
	logLevel := fs.String("log-level", "info", "zerolog level, as bridge --log-level")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	embedded := fs.Bool("embedded", false, "use the configured (embedded) runtimes instead of the in-process echo runtime")
	runDelay := fs.Duration("run-delay", 0, "hold each echo answer back this long (a stand-in for a worker's round trip)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level, err := zerolog.ParseLevel(*logLevel)
	if err != nil {
		return fmt.Errorf("--log-level %q: %v", *logLevel, err)
	}
	log := zerolog.New(os.Stderr).Level(level)
	cfg, err := bridge.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	opts := bridge.Options{Logger: log}
	if !*embedded {
		echo := &echoRuntime{delay: *runDelay}
		opts.Clients = map[string]executorv1.FunctionRuntimeClient{"python": echo, "bash": echo}
	}
	b, err := bridge.New(cfg, opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	maxprocs.Start(ctx) // as bridge serve does
	closeBridge := func() error {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return b.Close(cctx)
	}
	if err := b.Start(ctx); err != nil {
		_ = closeBridge()
		return err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = closeBridge()
		return err
	}
	srv := restate.NewHTTPServer(cfg.Listen, b.Handler())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		_ = closeBridge()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return closeBridge()
}
