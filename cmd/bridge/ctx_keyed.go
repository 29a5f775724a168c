package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/functionruntime"
)

// The fnbridge commands of keyed services and awakeables: key, state,
// awakeable, resolve-awakeable, reject-awakeable, promise, cancel.

// ctxExitAbsent is the status of a read that found nothing (state get of
// a key without a value, promise peek of an unresolved promise): no
// output, so `if v=$(fnbridge state get n); then ...` tells them apart.
const ctxExitAbsent = 1

// withClient runs fn with the environment's client, mapping its error.
func withClient(cmd *cobra.Command, fn func(ctx context.Context, c *stepctx.Client) error) error {
	c, err := ctxClient()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := fn(cmd.Context(), c); err != nil {
		var ce *ctxExit
		if errors.As(err, &ce) {
			return err
		}
		return callFailed(err)
	}
	return nil
}

// jsonArg is a JSON payload argument: "-" reads it from stdin. It must be
// valid JSON: Python functions read the same values.
func jsonArg(cmd *cobra.Command, arg string) ([]byte, error) {
	in := []byte(arg)
	if arg == "-" {
		var err error
		if in, err = io.ReadAll(cmd.InOrStdin()); err != nil {
			return nil, exitf(ctxExitError, "reading the value from stdin: %v", err)
		}
	}
	if !json.Valid(in) {
		return nil, exitf(ctxExitUsage, "the value is not valid JSON (quote a string: '\"text\"')")
	}
	return in, nil
}

func newCtxKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "key",
		Short: "Print the virtual object key or workflow id (also $" + functionruntime.EnvKey + "); works in both durability modes",
		Args:  exactArgs(0, "fnbridge key"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, ok := os.LookupEnv(functionruntime.EnvKey)
			if !ok {
				return exitf(ctxExitError, "%s is not set: this handler's service is a plain service (type: service), whose invocations have no key; keys belong to services of type virtual_object or workflow", functionruntime.EnvKey)
			}
			return writeOut(cmd, []byte(k+"\n"))
		},
	}
}

func newCtxStateCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "state",
		Short: "Durable state of a virtual object or workflow: get, set, clear, clear-all, keys",
		Long: `Durable state of a virtual object or workflow; values are JSON.
A shared handler reads state but cannot change it: set, clear and clear-all
then fail with the reason on stderr and exit status 100.`,
	}
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Print the JSON value of NAME; print nothing and exit 1 when it has none",
		Args:  exactArgs(1, "fnbridge state get NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error {
				v, found, err := c.GetState(ctx, args[0])
				if err != nil {
					return err
				}
				if !found {
					return &ctxExit{code: ctxExitAbsent}
				}
				return writeOut(cmd, append(v, '\n'))
			})
		},
	}
	set := &cobra.Command{
		Use:   "set NAME JSON|-",
		Short: "Set NAME to the JSON value (- reads it from stdin)",
		Args:  exactArgs(2, "fnbridge state set NAME JSON"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := jsonArg(cmd, args[1])
			if err != nil {
				return err
			}
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error { return c.SetState(ctx, args[0], v) })
		},
	}
	clearCmd := &cobra.Command{
		Use:   "clear NAME",
		Short: "Remove NAME",
		Args:  exactArgs(1, "fnbridge state clear NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error { return c.ClearState(ctx, args[0]) })
		},
	}
	clearAll := &cobra.Command{
		Use:   "clear-all",
		Short: "Remove every state key",
		Args:  exactArgs(0, "fnbridge state clear-all"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error { return c.ClearAllState(ctx) })
		},
	}
	keys := &cobra.Command{
		Use:   "keys",
		Short: "Print the state keys, one per line, sorted",
		Args:  exactArgs(0, "fnbridge state keys"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error {
				ks, err := c.StateKeys(ctx)
				if err != nil {
					return err
				}
				var b strings.Builder
				for _, k := range ks {
					b.WriteString(k + "\n")
				}
				return writeOut(cmd, []byte(b.String()))
			})
		},
	}
	root.AddCommand(get, set, clearCmd, clearAll, keys)
	return root
}

func newCtxAwakeableCmds() []*cobra.Command {
	create := &cobra.Command{
		Use:   "awakeable",
		Short: "Create an awakeable and print its id; fnbridge await ID waits for its value",
		Long: `Create an awakeable and print its id (the same on every attempt). Hand the
id to whoever completes it: another handler (fnbridge resolve-awakeable) or
Restate's ingress (POST /restate/awakeables/ID/resolve). fnbridge await ID
prints its value, suspending the invocation meanwhile; a rejection is
reported on stderr with exit status 100.`,
		Args: exactArgs(0, "fnbridge awakeable"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error {
				id, err := c.Awakeable(ctx)
				if err != nil {
					return err
				}
				return writeOut(cmd, []byte(id+"\n"))
			})
		},
	}
	resolve := &cobra.Command{
		Use:   "resolve-awakeable ID JSON|-",
		Short: "Complete the awakeable ID with the JSON value",
		Args:  exactArgs(2, "fnbridge resolve-awakeable ID JSON"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := jsonArg(cmd, args[1])
			if err != nil {
				return err
			}
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error { return c.ResolveAwakeable(ctx, args[0], v) })
		},
	}
	reject := &cobra.Command{
		Use:   "reject-awakeable ID MESSAGE",
		Short: "Fail the awakeable ID with MESSAGE",
		Args:  exactArgs(2, "fnbridge reject-awakeable ID MESSAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error { return c.RejectAwakeable(ctx, args[0], args[1]) })
		},
	}
	return []*cobra.Command{create, resolve, reject}
}

func newCtxPromiseCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "promise",
		Short: "Durable promises of a workflow: get, peek, resolve, reject",
		Long: `Durable promises of a workflow, shared by its handlers. A rejected promise
makes get and peek report the rejection on stderr and exit 100.`,
	}
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Wait for the promise NAME and print its value",
		Args:  exactArgs(1, "fnbridge promise get NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error {
				r, err := c.Promise(ctx, args[0])
				if err != nil {
					return err
				}
				return printResult(cmd, "promise "+args[0], r)
			})
		},
	}
	peek := &cobra.Command{
		Use:   "peek NAME",
		Short: "Print the value of the promise NAME; print nothing and exit 1 while it is unresolved",
		Args:  exactArgs(1, "fnbridge promise peek NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error {
				r, err := c.PeekPromise(ctx, args[0])
				if err != nil {
					return err
				}
				if r == nil {
					return &ctxExit{code: ctxExitAbsent}
				}
				return printResult(cmd, "promise "+args[0], *r)
			})
		},
	}
	resolve := &cobra.Command{
		Use:   "resolve NAME JSON|-",
		Short: "Resolve the promise NAME with the JSON value",
		Args:  exactArgs(2, "fnbridge promise resolve NAME JSON"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := jsonArg(cmd, args[1])
			if err != nil {
				return err
			}
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error { return c.ResolvePromise(ctx, args[0], v) })
		},
	}
	reject := &cobra.Command{
		Use:   "reject NAME MESSAGE",
		Short: "Reject the promise NAME with MESSAGE",
		Args:  exactArgs(2, "fnbridge promise reject NAME MESSAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error { return c.RejectPromise(ctx, args[0], args[1]) })
		},
	}
	root.AddCommand(get, peek, resolve, reject)
	return root
}

func newCtxCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel INVOCATION_ID",
		Short: "Ask Restate to cancel the invocation INVOCATION_ID (inv_...)",
		Args:  exactArgs(1, "fnbridge cancel INVOCATION_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *stepctx.Client) error { return c.CancelInvocation(ctx, args[0]) })
		},
	}
}
