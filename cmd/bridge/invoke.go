package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge"
)

func newInvokeCmd(g *globalFlags) *cobra.Command {
	var configPath, key string
	cmd := &cobra.Command{
		Use:   "invoke Service/handler 'JSON'",
		Short: "Run one configured function once, locally, without Restate",
		Long: "Run one configured function once through the same FunctionRuntime path\n" +
			"as bridge serve, without Restate: a developer's inner loop.\n" +
			"The output goes to stdout; outputs and logs go to stderr: on a terminal,\n" +
			"console logs, the function's own lines from info and the bridge's from\n" +
			"warn, unless --log-level/--log-format say otherwise (JSON at info when\n" +
			"stderr is redirected).\n" +
			"A durability: steps function runs against a local journal: every step\n" +
			"executes once and calls/sends fail (they need Restate). A wait longer\n" +
			"than the handler's suspend_after suspends as under Restate: the attempt\n" +
			"ends, and when the wait is over a new attempt replays the journal.\n" +
			"A virtual object's or workflow's handler gets --key (default empty) and,\n" +
			"with durable steps, state that starts empty and lasts for this one run.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.interactiveLogger(cmd)
			if err != nil {
				return err
			}
			service, handler, ok := strings.Cut(args[0], "/")
			if !ok || service == "" || handler == "" {
				return fmt.Errorf("%q: want Service/handler", args[0])
			}
			if !json.Valid([]byte(args[1])) {
				return fmt.Errorf("input %q is not valid JSON", args[1])
			}
			cfg, err := loadConfig(configPath, "")
			if err != nil {
				return err
			}
			// Its own identity: on a remote runtime a one-off run must not
			// share, nor unregister at its end, the registrations of a
			// `bridge serve` with the same instance.
			cfg.Instance = bridge.OneOffInstance(cfg.Instance)
			// Nor bind the context endpoint such a serve holds; the
			// variable still says which host a remote runtime dials.
			if err := applyContextListen(cfg, ""); err != nil {
				return err
			}
			cfg.ForOneOffRun(service, handler)
			b, err := bridge.New(cfg, bridge.Options{Logger: log})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals()...)
			defer stop()
			stderr := cmd.ErrOrStderr()
			res, err := b.InvokeLocal(ctx, service, handler, key, []byte(args[1]), func(s bridge.LocalSuspension) {
				// Why the function's code runs again from the top.
				fmt.Fprintf(stderr, "bridge invoke: suspended until %s (%s, longer than suspend_after %s); resuming then by replay (attempt %d)\n",
					clockTime(s.Until), s.Waiting, s.SuspendAfter, s.Attempt+1)
			})
			_ = b.Close(context.Background())
			if err != nil {
				return err
			}
			for k, v := range res.Outputs {
				fmt.Fprintf(stderr, "output %s=%s\n", k, v)
			}
			out := res.Output
			if len(out) == 0 || out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	addConfigFlag(cmd, &configPath)
	cmd.Flags().StringVar(&key, "key", "", "the virtual object key or workflow id (FNBRIDGE_KEY) of a keyed handler")
	return cmd
}

// clockTime is t as the local wall clock, with the date when not today.
func clockTime(t time.Time) string {
	t = t.Local()
	if t.Format(time.DateOnly) == time.Now().Format(time.DateOnly) {
		return t.Format(time.TimeOnly)
	}
	return t.Format(time.DateTime)
}
