package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/functionruntime"
)

func newInvokeCmd(g *globalFlags) *cobra.Command {
	var configPath, key string
	cmd := &cobra.Command{
		Use:   "invoke Service/handler ['JSON'|-]",
		Short: "Run one configured function once, locally, without Restate",
		Long: "Run one configured function once through the same FunctionRuntime path\n" +
			"as bridge serve, without Restate: a developer's inner loop.\n" +
			"The output goes to stdout; outputs and logs go to stderr: on a terminal,\n" +
			"console logs, the function's own lines from info and the bridge's from\n" +
			"warn, unless --log-level/--log-format say otherwise (JSON at info when\n" +
			"stderr is redirected).\n" +
			"A durability: steps function runs against a local journal: every step\n" +
			"executes once, and calls, sends, awakeables, promises and cancelling\n" +
			"fail (they need Restate). A wait longer than the handler's\n" +
			"suspend_after suspends as under Restate: the attempt ends, and when\n" +
			"the wait is over a new attempt replays the journal.\n" +
			"A virtual object's or workflow's handler gets --key (default empty) and,\n" +
			"with durable steps, state that starts empty and lasts for this one run.\n" +
			"The input - reads it from standard input; none is no input at all, as a\n" +
			"caller posting no body. A handler whose input_content_type is not JSON\n" +
			"(text/plain) gets the bytes as they are, with that content type.\n" +
			"Exit status: 0 success; 100 a terminal failure (Restate would not retry\n" +
			"it); 1 any other failure of the invocation (Restate would retry it, or\n" +
			"pause it until the configuration is fixed), or a call that needs\n" +
			"Restate; 2 bad arguments or configuration: nothing ran; 130 stopped\n" +
			"by a signal (Ctrl-C).",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fmt.Errorf("want Service/handler and its JSON input ('{}' for an empty object, - to read it from standard input, or leave it out for no input), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.interactiveLogger(cmd)
			if err != nil {
				return err
			}
			service, handler, ok := strings.Cut(args[0], "/")
			if !ok || service == "" || handler == "" {
				return fmt.Errorf("%q: want Service/handler", args[0])
			}
			var input []byte
			what := "the input on standard input"
			if len(args) == 2 && args[1] != "-" {
				input, what = []byte(args[1]), fmt.Sprintf("input %q", args[1])
			} else if len(args) == 2 {
				if f, ok := cmd.InOrStdin().(*os.File); ok && isTerminal(f) {
					fmt.Fprintln(cmd.ErrOrStderr(), "bridge invoke: reading the JSON input from standard input (end it with Ctrl-D)")
				}
				if input, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxStdinInput+1)); err != nil {
					return fmt.Errorf("reading the input from standard input: %w", err)
				}
				if len(input) > maxStdinInput {
					return fmt.Errorf("the input on standard input is over %d bytes", maxStdinInput)
				}
				what = fmt.Sprintf("the input on standard input (%d bytes)", len(input))
			}
			if len(key) > functionruntime.MaxInvocationEnvValue {
				return fmt.Errorf("--key is %d bytes, at most %d", len(key), functionruntime.MaxInvocationEnvValue)
			}
			if !utf8.ValidString(key) {
				return fmt.Errorf("--key %q is not UTF-8, which a Restate key always is", key)
			}
			cfg, err := loadConfig(configPath, "")
			if err != nil {
				return err
			}
			// An unknown handler and JSON input are checked here, before
			// any runtime starts, as the ingress would refuse them.
			h := cfg.Handler(service, handler)
			if h == nil {
				return cfg.UnknownHandler(service, handler)
			}
			if len(input) > 0 && bridge.IsJSON(h.LocalInputContentType()) && !json.Valid(input) {
				return fmt.Errorf("%s is not valid JSON (the input_content_type of %s/%s is %s)", what, service, handler, h.LocalInputContentType())
			}
			// Its own identity, derived from the replica's (FNBRIDGE_INSTANCE
			// applies, as to serve): on a remote runtime a one-off run must
			// not share, nor unregister at its end, the registrations of a
			// `bridge serve` with the same instance.
			if err := applyInstance(cfg, ""); err != nil {
				return err
			}
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
			res, err := b.InvokeLocal(ctx, service, handler, key, input, func(s bridge.LocalSuspension) {
				// Why the function's code runs again from the top.
				why := fmt.Sprintf("longer than suspend_after %s", s.SuspendAfter)
				if s.ByTimeout {
					why = fmt.Sprintf("past the first half of timeout %s, which counts short waits too", s.Timeout)
				}
				fmt.Fprintf(stderr, "bridge invoke: suspended until %s (%s, %s); resuming then by replay (attempt %d)\n",
					clockTime(s.Until), s.Waiting, why, s.Attempt+1)
			})
			_ = b.Close(context.Background())
			var unknown *bridge.UnknownHandlerError
			var keyRefused *bridge.KeyNotAllowedError
			switch {
			case err == nil:
			case errors.As(err, &unknown) || errors.As(err, &keyRefused):
				return err // nothing ran
			case ctx.Err() != nil:
				return invocationFailed{interrupted{err}}
			default:
				return invocationFailed{err}
			}
			for k, v := range res.Outputs {
				fmt.Fprintf(stderr, "output %s=%s\n", k, v)
			}
			out := res.Output
			if len(out) == 0 || out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			if _, err := cmd.OutOrStdout().Write(out); err != nil {
				return invocationFailed{fmt.Errorf("writing the output: %w", err)} // the function ran
			}
			return nil
		},
	}
	addConfigFlag(cmd, &configPath)
	cmd.Flags().StringVar(&key, "key", "", "the virtual object key or workflow id (FNBRIDGE_KEY) of a keyed handler")
	return cmd
}

// maxStdinInput bounds an input read from standard input: more than any
// runtime takes (6 MiB by default), so the runtime's own bound is what a
// user meets, with its message.
const maxStdinInput = 64 << 20

// Exit statuses of bridge invoke beyond 0 and cobra's usage errors.
const (
	invokeExitFailed   = 1   // the invocation failed; Restate would retry or pause it
	invokeExitUsage    = 2   // bad arguments or configuration: nothing ran
	invokeExitTerminal = 100 // a terminal failure, as fnbridge's exit 100
	invokeExitSignal   = 130 // stopped by SIGINT, SIGTERM or SIGHUP, as a shell reports 128+2
)

// interrupted marks a failure that a stop signal caused.
type interrupted struct{ error }

func (e interrupted) Unwrap() error { return e.error }

// invocationFailed marks an error of the invocation itself, as opposed to
// one of the command line or configuration.
type invocationFailed struct{ error }

func (e invocationFailed) Unwrap() error { return e.error }

// invokeExitStatus is bridge invoke's exit status for err.
func invokeExitStatus(err error) int {
	var failed invocationFailed
	if !errors.As(err, &failed) {
		return invokeExitUsage
	}
	var be *bridge.Error
	var in interrupted
	if errors.As(err, &in) {
		return invokeExitSignal
	}
	if errors.As(err, &be) && be.Class.Terminal() {
		return invokeExitTerminal
	}
	return invokeExitFailed
}

// clockTime is t as the local wall clock, with the date when not today.
func clockTime(t time.Time) string {
	t = t.Local()
	if t.Format(time.DateOnly) == time.Now().Format(time.DateOnly) {
		return t.Format(time.TimeOnly)
	}
	return t.Format(time.DateTime)
}
