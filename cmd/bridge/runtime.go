package main

import (
	"fmt"
	"net"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	"github.com/fnbridge/fnbridge/internal/maxprocs"
)

// runtimeKinds lists the kinds `bridge runtime serve` can run, for its help
// and errors: "bash or python".
func runtimeKinds() string {
	names := kinds.Names()
	sort.Strings(names)
	return strings.Join(names, " or ")
}

func newRuntimeCmd(g *globalFlags) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "runtime",
		Short: "Run a standalone FunctionRuntime server",
	})
	cmd.AddCommand(newRuntimeServeCmd(g))
	return cmd
}

// runtimeServeFlags are the flags of `bridge runtime serve`.
type runtimeServeFlags struct {
	kind                string
	listen              string
	drainTimeout        time.Duration
	maxInputBytes       int
	defaultTimeout      time.Duration
	maxTimeout          time.Duration
	registrationTimeout time.Duration
	allowedRoots        []string
	orphanGrace         time.Duration
	socketGroup         string
}

func newRuntimeServeCmd(g *globalFlags) *cobra.Command {
	cmd, _ := runtimeServeCmd(g)
	return cmd
}

// runtimeServeCmd is newRuntimeServeCmd, with the flags it parses into.
func runtimeServeCmd(g *globalFlags) (*cobra.Command, *runtimeServeFlags) {
	f := &runtimeServeFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve executor.v1.FunctionRuntime for one runtime kind, with gRPC health and reflection",
		Long: `Serve executor.v1.FunctionRuntime for one runtime kind (` + runtimeKinds() + `),
like the Function Runtime Server of a Runtime Pod. gRPC health and server
reflection are registered, so grpcurl works without proto files.

The server authenticates no caller: listen on loopback or a Unix socket
(created with mode 0600; with --socket-group GROUP, 0660 and that group,
so a bridge running as another user in GROUP can connect), and confine
registrations with --allowed-root. --allowed-root confines where the code
comes from, not what it runs: a caller also chooses the function's
environment (PATH included).
Without --allowed-root a registration's working_dir may be any directory
the server can enter, and a warning says so at start.

A registration whose caller is gone (a bridge killed without SIGTERM, a
killed bridge invoke) is unregistered once it has had nothing in flight,
no invocation and no FunctionStatus naming it (a live bridge polls each
of its registrations) for its idle_timeout_seconds plus --orphan-grace;
with 0 it stays until it is unregistered or the server stops.

On SIGTERM, SIGINT or SIGHUP the server stops accepting connections, drains every
registration for at most --drain-timeout (then cancels in-flight
invocations), closes every worker and exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRuntimeServe(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kind, "runtime", "python", "runtime kind: "+runtimeKinds())
	fl.StringVar(&f.listen, "listen", "127.0.0.1:9090", "listen address: host:port or unix:///path")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", functionruntime.DefaultDrainTimeout, "on shutdown, how long in-flight invocations may finish before they are cancelled")
	fl.IntVar(&f.maxInputBytes, "max-input-bytes", functionruntime.DefaultMaxInputBytes, "largest invocation input accepted")
	fl.DurationVar(&f.defaultTimeout, "default-timeout", functionruntime.DefaultInvokeTimeout, "invocation timeout when a request sets timeout_millis 0")
	fl.DurationVar(&f.maxTimeout, "max-timeout", functionruntime.DefaultMaxInvokeTimeout, "cap on a requested invocation timeout")
	fl.DurationVar(&f.registrationTimeout, "registration-timeout", functionruntime.DefaultRegistrationTimeout, "how long a registration may take to import or source its handler")
	fl.DurationVar(&f.orphanGrace, "orphan-grace", functionruntime.DefaultOrphanGrace, "unregister a registration with no invocation and no FunctionStatus from its caller for its idle_timeout_seconds plus this long (0: never)")
	fl.StringVar(&f.socketGroup, "socket-group", "", "group (name or id) whose members may connect to the unix socket too (mode 0660): a bridge running as another user")
	fl.StringArrayVar(&f.allowedRoots, "allowed-root", nil, "directory a registration's working_dir must be or lie beneath, symlinks resolved (repeatable; default: any directory)")
	return cmd, f
}

// serverOptions are the Server options the flags ask for.
func (f *runtimeServeFlags) serverOptions(ad functionruntime.Adapter, log zerolog.Logger) functionruntime.Options {
	return functionruntime.Options{
		Adapter: ad,
		Logger:  log,
		Limits: functionruntime.Limits{
			MaxInputBytes:       f.maxInputBytes,
			DefaultTimeout:      f.defaultTimeout,
			MaxTimeout:          f.maxTimeout,
			RegistrationTimeout: f.registrationTimeout,
		},
		OrphanGrace: f.orphanGrace,
	}
}

func runRuntimeServe(cmd *cobra.Command, g *globalFlags, f *runtimeServeFlags) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	logSysmon(log)
	kind, ok := kinds.Lookup(f.kind)
	if !ok {
		return usageError{fmt.Errorf("--runtime %q: want %s", f.kind, runtimeKinds())}
	}
	for name, v := range map[string]time.Duration{
		"--drain-timeout": f.drainTimeout, "--default-timeout": f.defaultTimeout,
		"--max-timeout": f.maxTimeout, "--registration-timeout": f.registrationTimeout,
	} {
		if v <= 0 {
			return usageError{fmt.Errorf("%s %s: must be positive", name, v)}
		}
	}
	if f.maxInputBytes <= 0 {
		return usageError{fmt.Errorf("--max-input-bytes %d: must be positive", f.maxInputBytes)}
	}
	if f.orphanGrace < 0 {
		return usageError{fmt.Errorf("--orphan-grace %s: must not be negative (0 turns reaping off)", f.orphanGrace)}
	}
	if f.defaultTimeout > f.maxTimeout {
		return usageError{fmt.Errorf("--default-timeout %s: must not exceed --max-timeout %s", f.defaultTimeout, f.maxTimeout)}
	}

	log = log.With().Str("runtime", f.kind).Logger()
	srv := functionruntime.NewServer(f.serverOptions(kind.New(), log))
	var grpcOpts []grpc.ServerOption
	if len(f.allowedRoots) > 0 {
		opt, err := functionruntime.AllowedRoots(f.allowedRoots)
		if err != nil {
			return usageError{fmt.Errorf("--allowed-root: %w", err)}
		}
		grpcOpts = append(grpcOpts, opt)
	}
	if err := functionruntime.CheckListenAddress(f.listen); err != nil {
		return usageError{fmt.Errorf("--listen: %w", err)}
	}
	listen := functionruntime.Listen
	if cmd.Flags().Changed("socket-group") {
		if !strings.HasPrefix(f.listen, "unix:") {
			return usageError{fmt.Errorf("--socket-group: applies to a unix:///path --listen address, not %q", f.listen)}
		}
		if _, err := functionruntime.LookupGroup(f.socketGroup); err != nil {
			return usageError{fmt.Errorf("--socket-group: %w", err)}
		}
		listen = func(address string) (net.Listener, error) { return functionruntime.ListenGroup(address, f.socketGroup) }
	}
	lis, err := listen(f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals()...)
	defer stop()
	maxprocs.Start(ctx)

	addr := lis.Addr().String()
	if lis.Addr().Network() == "unix" {
		addr = "unix:" + addr
		if filepath.IsAbs(lis.Addr().String()) {
			addr = "unix://" + lis.Addr().String()
		}
	}
	functionruntime.WarnIfExposed(log, lis.Addr())
	functionruntime.LogWorkerLimitMechanisms(log)
	if len(f.allowedRoots) == 0 {
		log.Warn().Msg("no --allowed-root: a registration may run its handler in any directory this server can enter; pass --allowed-root DIR to confine working_dir")
	} else {
		log.Info().Strs("allowed_roots", f.allowedRoots).Msg("working_dir confined to the allowed roots")
	}
	if f.orphanGrace > 0 {
		log.Info().Dur("orphan_grace_ms", f.orphanGrace).Msg("a registration with no invocation and no FunctionStatus from its caller for its idle timeout plus the orphan grace is unregistered as an orphan")
	} else {
		log.Info().Msg("--orphan-grace 0: registrations whose caller is gone stay until the server stops")
	}
	log.Info().Str("listen", addr).Msg("serving FunctionRuntime")
	if err := functionruntime.NewGRPCServer(srv, grpcOpts...).Serve(ctx, lis, f.drainTimeout); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info().Msg("FunctionRuntime server stopped")
	return nil
}
