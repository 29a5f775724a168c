package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/internal/maxprocs"
	"github.com/fnbridge/fnbridge/restate"
)

// newServeCmd is `bridge serve`, and with dev set `bridge dev`: one code
// path, which dev extends with its loop (dev.go).
func newServeCmd(g *globalFlags, dev *devFlags) *cobra.Command {
	var (
		configPath, listen string
		identityKeysFile   string
		holdAfterRun       string
		instance           string
		contextListen      string
	)
	// load reads the configuration with this replica's own settings, at
	// start and on each of dev's reloads alike.
	load := func() (*bridge.Config, error) {
		cfg, err := loadServeConfig(configPath, listen, identityKeysFile)
		if err != nil {
			return nil, err
		}
		if err := applyInstance(cfg, instance); err != nil {
			return nil, usageError{err}
		}
		if err := applyContextListen(cfg, contextListen); err != nil {
			return nil, usageError{err}
		}
		return cfg, nil
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the configured functions as a Restate deployment",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			logSysmon(log)
			if err := dev.check(); err != nil {
				return usageError{err}
			}
			opts := bridge.Options{Logger: log}
			if holdAfterRun != "" {
				opts.AfterRunJournaled = holdForever(holdAfterRun)
			}
			cfg, err := load()
			if err != nil {
				return err
			}
			stopTelemetry, err := startTelemetry(cfg, log, &opts)
			if err != nil {
				return err
			}
			defer stopTelemetry()
			if cfg.AllowUnauthenticated && len(cfg.IdentityKeys) == 0 && !bridge.IsLoopback(cfg.Listen) {
				log.Warn().Str("listen", cfg.Listen).Msg("allow_unauthenticated: serving unsigned requests on an address other machines can reach; anyone who can connect can run these functions")
			}
			b, err := newEndpoint(cfg, opts, dev)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals()...)
			defer stop()
			maxprocs.Start(ctx)
			// One deadline from the signal on: the drain, the listener's
			// close and the unregistering share shutdown_timeout, with
			// closeGrace for unregistering when the drain used it all.
			deadline := time.Time{}
			shutdownBridge := func() error {
				d := time.Now().Add(cfg.ShutdownTimeout.Std())
				if !deadline.IsZero() {
					d = deadline
				}
				cctx, cancel := context.WithDeadline(context.Background(), later(d, time.Now().Add(closeGrace)))
				defer cancel()
				return b.Close(cctx)
			}
			if err := b.Start(ctx); err != nil {
				_ = shutdownBridge()
				if ctx.Err() != nil {
					// Stopped while warming up (a slow min_warm import):
					// as graceful as a stop while serving, exit 0, so a
					// rollout during a slow start is no failure.
					log.Info().Msg("stopped before serving")
					return nil
				}
				return err
			}
			lis, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				_ = shutdownBridge()
				return fmt.Errorf("listen %s: %w", cfg.Listen, err)
			}
			srv := restate.NewHTTPServer(cfg.Listen, b.Handler())
			serveErr := make(chan error, 1)
			go func() { serveErr <- srv.Serve(lis) }()
			log.Info().Str("listen", lis.Addr().String()).Str("protocol_mode", cfg.ProtocolMode).Int("services", len(cfg.Services)).
				Str("instance", cfg.Instance).Str("instance_from", cfg.InstanceFrom).Msg("serving Restate endpoint")
			devDone, stopDev := dev.start(ctx, log, b, lis.Addr().String(), load)

			select {
			case err := <-serveErr:
				_ = stopDev()
				_ = shutdownBridge()
				return fmt.Errorf("serve: %w", err)
			case <-devDone: // the dev loop failed: stopDev has its error
			case <-ctx.Done():
			}
			devErr := stopDev()
			// Drain first, listener open: readiness answers 503 and new
			// streams are refused (Restate retries them on another
			// replica) while in-flight invocations finish within the
			// deadline. Then stop accepting; streams still open are
			// closed, and Restate retries those attempts (journaled work
			// is not redone).
			log.Info().Dur("deadline_ms", cfg.ShutdownTimeout.Std()).Int("in_flight", b.InFlight()).Msg("shutting down: draining")
			deadline = time.Now().Add(cfg.ShutdownTimeout.Std())
			sctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			// A second stop signal (Ctrl-C again) ends the drain at once,
			// as daemons do; the workers are still stopped and
			// unregistered, within closeGrace.
			again := make(chan os.Signal, 1)
			signal.Notify(again, stopSignals()...)
			defer signal.Stop(again)
			go func() {
				select {
				case sig := <-again:
					log.Warn().Str("signal", sig.String()).Int("in_flight", b.InFlight()).Msg("second stop signal: not waiting for the invocations in flight (Restate retries them)")
					cancel()
				case <-sctx.Done():
				}
			}()
			srv.SetKeepAlivesEnabled(false) // HTTP/2: GOAWAY as each connection goes idle
			if err := b.Drain(sctx); err != nil {
				log.Warn().Int("in_flight", b.InFlight()).Msg("in-flight invocations did not finish before the deadline")
			}
			if err := srv.Shutdown(sctx); err != nil {
				log.Warn().Err(err).Msg("in-flight invocations did not finish before the deadline; closing their streams")
				_ = srv.Close()
			}
			if errors.Is(sctx.Err(), context.Canceled) {
				deadline = time.Now() // the second signal: unregistering gets closeGrace only
			}
			if err := shutdownBridge(); err != nil {
				log.Warn().Err(err).Msg("unregistering at shutdown")
			}
			if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			if devErr != nil {
				return devErr
			}
			log.Info().Msg("stopped")
			return nil
		},
	}
	addConfigFlag(cmd, &configPath)
	cmd.Flags().StringVar(&listen, "listen", "", "listen address host:port (overrides the file's listen)")
	cmd.Flags().StringVar(&identityKeysFile, "identity-keys-file", "", "file of publickeyv1_ keys, one per line (as bridge keygen writes FILE.pub), added to identity_keys")
	addInstanceFlag(cmd, &instance)
	addContextListenFlag(cmd, &contextListen)
	cmd.Flags().StringVar(&holdAfterRun, "test-hold-after-run", "", "testing only: after a run is journaled, write the invocation id to this file and block")
	_ = cmd.Flags().MarkHidden("test-hold-after-run")
	return cmd
}

// loadServeConfig is loadConfig plus what only serve has: keys from
// --identity-keys-file, and the refusal to serve a reachable address
// without them (bridge.Config.CheckExposure). Each of its errors is a
// mistake to fix before anything starts (exit 2).
func loadServeConfig(path, listen, identityKeysFile string) (*bridge.Config, error) {
	cfg, err := loadConfig(path, listen)
	if err != nil {
		return nil, err
	}
	if identityKeysFile != "" {
		keys, err := bridge.ReadIdentityKeys(identityKeysFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("--identity-keys-file: %w", err)}
		}
		cfg.IdentityKeys = append(cfg.IdentityKeys, keys...)
	}
	source := "listen"
	if listen != "" {
		source = "--listen"
	}
	if _, err := cfg.CheckExposure(source); err != nil {
		return nil, usageError{err}
	}
	return cfg, nil
}

// holdForever is the crash test's hook: it records that a run completion
// was journaled, then blocks this invocation until the process is killed.
func holdForever(path string) func(invocationID, runName string) {
	return func(invocationID, _ string) {
		_ = os.WriteFile(path, []byte(invocationID+"\n"), 0o644)
		for {
			time.Sleep(time.Hour)
		}
	}
}

// closeGrace is what unregistering gets at shutdown when draining used all
// of shutdown_timeout: the registrations are given back in parallel, each
// call bounded by it.
const closeGrace = 3 * time.Second

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
