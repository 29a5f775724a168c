package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"unicode/utf8"

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

// clientCmd is a command of n arguments (usage names them) that makes
// context calls with the environment's client; run's errors other than a
// *ctxExit are mapped by callFailed.
func clientCmd(use, short string, n int, run func(ctx context.Context, cmd *cobra.Command, c *stepctx.Client, args []string) error) *cobra.Command {
	_, operands, _ := strings.Cut(use, " ")
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != n {
				return exitf(ctxExitUsage, "usage: %s", strings.TrimSpace(cmd.CommandPath()+" "+operands))
			}
			return nonEmptyOperands(cmd, operands, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := ctxClient()
			if err != nil {
				return err
			}
			defer c.Close()
			if err := run(cmd.Context(), cmd, c, args); err != nil {
				var ce *ctxExit
				if errors.As(err, &ce) {
					return err
				}
				return callFailed(err)
			}
			return nil
		},
	}
}

// nonEmptyOperands refuses an empty name or id operand as the bad
// argument it is (exit 2), before any call: the endpoint would refuse it
// too, as a failed call (exit 3).
func nonEmptyOperands(cmd *cobra.Command, operands string, args []string) error {
	for i, op := range strings.Fields(operands) {
		switch op {
		case "NAME", "ID", "INVOCATION_ID":
			if i < len(args) && args[i] == "" {
				// exitf says "fnbridge: " already.
				return exitf(ctxExitUsage, "%s: %s is empty", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), op)
			}
		}
	}
	return nil
}

// valueCmd is a command NAME|ID JSON|- writing the JSON value with write.
func valueCmd(use, short string, write func(c *stepctx.Client, ctx context.Context, name string, v []byte) error) *cobra.Command {
	return clientCmd(use, short, 2, func(ctx context.Context, cmd *cobra.Command, c *stepctx.Client, args []string) error {
		v, err := jsonArg(cmd, args[1])
		if err != nil {
			return err
		}
		return write(c, ctx, args[0], v)
	})
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
	if !utf8.Valid(in) {
		// json.Valid lets such bytes through in strings; JSON is UTF-8,
		// and a Python function reading the value could not decode it.
		return nil, exitf(ctxExitUsage, "the value holds bytes that are not UTF-8: JSON text is UTF-8")
	}
	// The whitespace around a value is JSON's, not the value's: the
	// newline of echo or a here-string is not stored (Python's encoder
	// writes none either).
	return bytes.Trim(in, " \t\r\n"), nil
}

// printFound prints a value read, or exits 1 printing nothing when the
// read found none.
func printFound(cmd *cobra.Command, what string, r *stepctx.Result) error {
	if r == nil {
		return &ctxExit{code: ctxExitAbsent}
	}
	return printResult(cmd, what, *r)
}

func newCtxKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "key",
		Short: "Print the virtual object key or workflow id (also $" + functionruntime.EnvKey + "); works in both durability modes",
		Args:  exactArgs(0, "fnbridge key"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, ok := os.LookupEnv(functionruntime.EnvKey)
			if !ok && os.Getenv(stepctx.EnvAddr) == "" {
				// No context either: maybe no invocation at all, or one
				// of a plain service in function mode; say both.
				return exitf(ctxExitError, "%s is not set: not inside an invocation of a virtual_object or workflow handler (a plain service's invocations have no key)", functionruntime.EnvKey)
			}
			if !ok {
				return exitf(ctxExitError, "%s is not set: this handler's service is a plain service (type: service), whose invocations have no key; keys belong to services of type virtual_object or workflow", functionruntime.EnvKey)
			}
			return writeOut(cmd, []byte(k+"\n"))
		},
	}
}

func newCtxStateCmd() *cobra.Command {
	root := subcommandsOnly(&cobra.Command{
		Use:   "state",
		Short: "Durable state of a virtual object or workflow: get, set, clear, clear-all, keys",
		Long: `Durable state of a virtual object or workflow; values are JSON.
A shared handler reads state but cannot change it: set, clear and clear-all
then fail with the reason on stderr and exit status 100.`,
	})
	root.AddCommand(
		clientCmd("get NAME", "Print the JSON value of NAME; print nothing and exit 1 when it has none", 1,
			func(ctx context.Context, cmd *cobra.Command, c *stepctx.Client, args []string) error {
				v, found, err := c.GetState(ctx, args[0])
				switch {
				case err != nil:
					return err
				case !found:
					return printFound(cmd, "state "+args[0], nil)
				}
				return printFound(cmd, "state "+args[0], &stepctx.Result{Value: v})
			}),
		valueCmd("set NAME JSON|-", "Set NAME to the JSON value (- reads it from stdin)", (*stepctx.Client).SetState),
		clientCmd("clear NAME", "Remove NAME", 1, func(ctx context.Context, _ *cobra.Command, c *stepctx.Client, args []string) error {
			return c.ClearState(ctx, args[0])
		}),
		clientCmd("clear-all", "Remove every state key", 0, func(ctx context.Context, _ *cobra.Command, c *stepctx.Client, _ []string) error {
			return c.ClearAllState(ctx)
		}),
		stateKeysCmd(),
	)
	return root
}

// stateKeysCmd is `fnbridge state keys [-z]`: one name a line, or with -z
// each followed by a NUL byte, for names that hold a newline (a Python
// handler may write any text), which bash's readarray -d with an empty
// delimiter reads.
func stateKeysCmd() *cobra.Command {
	var nul bool
	cmd := clientCmd("keys", "Print the state keys, sorted, one a line (-z: each followed by a NUL byte)", 0, func(ctx context.Context, cmd *cobra.Command, c *stepctx.Client, _ []string) error {
		ks, err := c.StateKeys(ctx)
		if err != nil {
			return err
		}
		end := "\n"
		if nul {
			end = "\x00"
		}
		var b strings.Builder
		for _, k := range ks {
			b.WriteString(k + end)
		}
		return writeOut(cmd, []byte(b.String()))
	})
	cmd.Flags().BoolVarP(&nul, "null", "z", false, "end each name with a NUL byte, not a newline (names may hold newlines)")
	return cmd
}

func newCtxAwakeableCmds() []*cobra.Command {
	create := clientCmd("awakeable", "Create an awakeable and print its id; fnbridge await ID waits for its value", 0,
		func(ctx context.Context, cmd *cobra.Command, c *stepctx.Client, _ []string) error {
			id, err := c.Awakeable(ctx)
			if err != nil {
				return err
			}
			return writeOut(cmd, []byte(id+"\n"))
		})
	create.Long = `Create an awakeable and print its id (the same on every attempt). Hand the
id to whoever completes it: another handler (fnbridge resolve-awakeable) or
Restate's ingress (POST /restate/awakeables/ID/resolve). fnbridge await ID
prints its value, suspending the invocation meanwhile; a rejection is
reported on stderr with exit status 100.`
	return []*cobra.Command{
		create,
		valueCmd("resolve-awakeable ID JSON|-", "Complete the awakeable ID with the JSON value", (*stepctx.Client).ResolveAwakeable),
		rejectCmd("reject-awakeable [--code N] ID MESSAGE", "Fail the awakeable ID with MESSAGE (and the failure code N, default 500)", (*stepctx.Client).RejectAwakeable),
	}
}

// rejectCmd is reject-awakeable and promise reject: two operands and
// --code, the failure code the waiter's terminal failure carries.
func rejectCmd(use, short string, reject func(*stepctx.Client, context.Context, string, string, int) error) *cobra.Command {
	code := 500
	cmd := clientCmd(strings.Replace(use, "[--code N] ", "", 1), short, 2, func(ctx context.Context, _ *cobra.Command, c *stepctx.Client, args []string) error {
		if code < 1 || code > 65535 {
			return exitf(ctxExitUsage, "--code %d: want a failure code from 1 to 65535", code)
		}
		return reject(c, ctx, args[0], args[1], code)
	})
	cmd.Use = use
	cmd.Flags().IntVar(&code, "code", 500, "the failure code (1-65535)")
	return cmd
}

func newCtxPromiseCmd() *cobra.Command {
	root := subcommandsOnly(&cobra.Command{
		Use:   "promise",
		Short: "Durable promises of a workflow: get, peek, resolve, reject",
		Long: `Durable promises of a workflow, shared by its handlers. A rejected promise
makes get and peek report the rejection on stderr and exit 100.`,
	})
	root.AddCommand(
		newCtxPromiseGetCmd(),
		clientCmd("peek NAME", "Print the value of the promise NAME; print nothing and exit 1 while it is unresolved", 1,
			func(ctx context.Context, cmd *cobra.Command, c *stepctx.Client, args []string) error {
				r, err := c.PeekPromise(ctx, args[0])
				if err != nil {
					return err
				}
				return printFound(cmd, "promise "+args[0], r)
			}),
		valueCmd("resolve NAME JSON|-", "Resolve the promise NAME with the JSON value", (*stepctx.Client).ResolvePromise),
		rejectCmd("reject [--code N] NAME MESSAGE", "Reject the promise NAME with MESSAGE (and the failure code N, default 500)", (*stepctx.Client).RejectPromise),
	)
	return root
}

// newCtxPromiseGetCmd is promise get: it waits, or with --async prints a
// handle that await takes with other handles (a promise or a timeout).
func newCtxPromiseGetCmd() *cobra.Command {
	var async bool
	cmd := &cobra.Command{
		Use:   "get [--async] NAME",
		Short: "Wait for the promise NAME and print its value; --async prints a handle for await",
		Args:  exactArgs(1, "fnbridge promise get [--async] NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nonEmptyOperands(cmd, "NAME", args); err != nil {
				return err
			}
			return awaitable(cmd, async,
				func(ctx context.Context, c *stepctx.Client) (string, error) { return c.PromiseAsync(ctx, args[0]) },
				func(ctx context.Context, c *stepctx.Client) (stepctx.Result, error) { return c.Promise(ctx, args[0]) },
				func(r stepctx.Result) error { return printResult(cmd, "promise "+args[0], r) })
		},
	}
	cmd.Flags().BoolVar(&async, "async", false, "print a handle instead of waiting")
	return cmd
}

func newCtxCancelCmd() *cobra.Command {
	return clientCmd("cancel INVOCATION_ID", "Ask Restate to cancel the invocation INVOCATION_ID (inv_...)", 1,
		func(ctx context.Context, _ *cobra.Command, c *stepctx.Client, args []string) error {
			return c.CancelInvocation(ctx, args[0])
		})
}
