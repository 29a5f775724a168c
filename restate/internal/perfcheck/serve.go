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
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/fnbridge/fnbridge/restate"
)

// echo is the benchmark workload: one journaled run returning the input,
// like bench/sdkgo's restate.Run echo.
func echo(ctx restate.Context, in []byte) ([]byte, error) {
	return ctx.Run("invoke", func(context.Context) ([]byte, error) { return in, nil })
}

// serve runs our endpoint until SIGTERM/SIGINT, optionally profiling.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run here")
	memProfile := fs.String("memprofile", "", "write an allocation profile here on exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
	}
	ep := restate.NewEndpoint(restate.Config{})
	if err := ep.Bind(restate.Service{Name: "Echo", Handlers: []restate.Handler{{Name: "echo", Fn: echo}}}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
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
	srv := restate.NewHTTPServer("", ep)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	// The parent reads the address from our first stdout line.
	fmt.Println(ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		return pprof.Lookup("allocs").WriteTo(f, 0)
	}
	return nil
}
