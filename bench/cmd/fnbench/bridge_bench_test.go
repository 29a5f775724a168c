package main

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// BenchmarkBridgeDrive is peers F and P in one process, for profiling the
// bridge's hot path: `go test -run '^$' -bench BridgeDrive -cpuprofile
// cpu.out ./bench/cmd/fnbench`. The driver (restatetest) shares the
// process, so its frames appear in the profile under its own package;
// P's Python worker is a separate process and not in the profile.
func BenchmarkBridgeDrive(b *testing.B) {
	for _, tc := range []struct {
		name  string
		peer  string
		level zerolog.Level
		c     int
	}{
		{"F/c=32/log=info", "F", zerolog.InfoLevel, 32},
		{"F/c=32/log=warn", "F", zerolog.WarnLevel, 32},
		{"F/c=1/log=info", "F", zerolog.InfoLevel, 1},
		{"P/c=32/log=info", "P", zerolog.InfoLevel, 32},
		{"P/c=1/log=info", "P", zerolog.InfoLevel, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfgs, err := writeFixtures(b.TempDir(), registrations{4, 4, 4})
			if err != nil {
				b.Fatal(err)
			}
			if tc.peer == "P" {
				if _, err := exec.LookPath("python3"); err != nil {
					b.Skip("python3 not found")
				}
			}
			cfg, err := bridge.LoadConfig(cfgs[tc.peer])
			if err != nil {
				b.Fatal(err)
			}
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devnull.Close()
			opts := bridge.Options{Logger: zerolog.New(devnull).Level(tc.level)}
			if tc.peer == "F" {
				opts.Clients = map[string]executorv1.FunctionRuntimeClient{"python": &echoRuntime{}}
			}
			br, err := bridge.New(cfg, opts)
			if err != nil {
				b.Fatal(err)
			}
			if err := br.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = br.Close(context.Background()) }()
			srv := httptest.NewUnstartedServer(br.Handler())
			srv.Config = restate.NewHTTPServer("", br.Handler())
			srv.Start()
			defer srv.Close()
			b.ResetTimer()
			service := map[string]string{"F": "FakeEcho", "P": "PyEcho"}[tc.peer]
			if _, err := restatetest.Drive(context.Background(), srv.URL, service, "echo", driveProtocol, tc.c, max(b.N, 1)); err != nil {
				b.Fatal(err)
			}
		})
	}
}
