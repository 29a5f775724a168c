package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// Exit statuses of the fnbridge command (`bridge ctx ...`), the Bash API
// of the durable context. A CMD run by `fnbridge run` that fails
// retryably passes its own status through instead.
const (
	// ctxExitError: the context call could not be made (no endpoint in
	// the environment, a refused request, a broken connection). Not 1,
	// which a read that found nothing exits with (ctxExitAbsent), so
	// that `fnbridge state get` tells "absent" from "failed".
	ctxExitError = 3
	// ctxExitUsage: bad arguments.
	ctxExitUsage = 2
	// ctxExitStopped: the attempt suspended or ended; the script must stop
	// (the bridge stops its processes anyway). 75 is EX_TEMPFAIL: the
	// invocation continues in a later attempt.
	ctxExitStopped = 75
	// ctxExitTerminal: a terminal failure (a step's CMD exited 100, or a
	// callee or timer failed terminally), recorded and replayed as such.
	ctxExitTerminal = 100
)

// noFailMessage is the failure's message of a `fnbridge fail` given none
// (the shell function's too): still terminal, as asked, and never an
// empty message at the caller.
const noFailMessage = "the function failed (fnbridge fail was given no message)"

// ctxExit is an error that carries the command's exit status; msg, when
// set, goes to stderr.
type ctxExit struct {
	code int
	msg  string
}

func (e *ctxExit) Error() string { return e.msg }

func exitf(code int, format string, args ...any) error {
	return &ctxExit{code: code, msg: fmt.Sprintf(format, args...)}
}

// ctxExitStatus reports the exit status of an error returned by a
// command of newCtxCmd, printing its message to stderr; ok is false for
// other errors.
func ctxExitStatus(stderr io.Writer, err error) (code int, ok bool) {
	var e *ctxExit
	if !errors.As(err, &e) {
		return 0, false
	}
	if e.msg != "" {
		fmt.Fprintln(stderr, "fnbridge:", oneLine(e.msg))
	}
	return e.code, true
}

// oneLine is msg as printed after "fnbridge: ": its newlines and tabs
// made spaces (the runtime takes a failure's message from the last line
// of stderr, and the shell function's answers, through the step agent,
// are one line too) and the client's own "fnbridge context: " left out,
// which would say fnbridge twice.
func oneLine(msg string) string {
	msg = strings.TrimPrefix(msg, stepctx.ClientErrorPrefix)
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		return r
	}, msg)
}

// subcommandsOnly makes cmd, which only groups subcommands, refuse a
// missing or unknown subcommand with a usage error. Left to cobra, a
// mistyped `fnbridge state gte count` printed the help on stdout, where a
// script captures it as the value, and exited 0.
func subcommandsOnly(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		if len(args) == 0 {
			return usageError{fmt.Errorf("%s needs a subcommand: %s", c.CommandPath(), strings.Join(names, ", "))}
		}
		return usageError{fmt.Errorf("unknown command %q for %q; its subcommands: %s", args[0], c.CommandPath(), strings.Join(names, ", "))}
	}
	return cmd
}

// usageError is a command line the command cannot take.
type usageError struct{ error }

// inCtx reports whether cmd is the ctx command or one of its subcommands.
func inCtx(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Name() == "ctx" && c.HasParent() && !c.Parent().HasParent() {
			return true
		}
	}
	return false
}

// ctxMain runs the binary invoked as `fnbridge`: newCtxCmd is the root.
func ctxMain(args []string) int {
	return runCtx(args, os.Stdin, os.Stdout, os.Stderr)
}

func runCtx(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newCtxCmd()
	root.Use = "fnbridge"
	// A function's command, not an interactive tool: no shell completion
	// scripts among its subcommands.
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetArgs(separateOperands(root, args))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	if code, ok := ctxExitStatus(stderr, err); ok {
		return code
	}
	// cobra's own errors: unknown command or flag, wrong argument count.
	fmt.Fprintln(stderr, "fnbridge:", err)
	return ctxExitUsage
}

// newCtxCmd is the fnbridge command: `bridge ctx ...`, or the root when
// the binary is invoked as fnbridge. It reaches the attempt's context
// endpoint through FNBRIDGE_CONTEXT and FNBRIDGE_CONTEXT_TOKEN. Arguments
// and payloads are data: CMD is executed directly, never through a shell.
func newCtxCmd() *cobra.Command {
	root := subcommandsOnly(&cobra.Command{
		Use:   "ctx",
		Short: "Durable steps from a Bash function: run, sleep, call, send, await, state, awakeables, promises",
		Long: `Durable steps from a Bash function (or any process it starts), through the
attempt's context endpoint (` + stepctx.EnvAddr + `, ` + stepctx.EnvToken + `).

Exit statuses: 0 success; 100 terminal failure (recorded: the same on replay;
also a call the handler may not make, such as a state write from a shared
handler, and a wait the invocation's cancellation interrupted); 75 the
attempt suspended or ended, stop now; 3 the context call could not be made
(no endpoint, a refused request, a broken connection); 2 bad arguments
(also those only the bridge can tell, such as a handle this attempt did not
issue); 1 (state get, promise peek only) nothing to print: absent or unresolved.
fnbridge run passes through the status of a CMD that failed retryably.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	})
	root.AddCommand(newCtxKeyCmd(), newCtxStateCmd(), newCtxPromiseCmd(), newCtxCancelCmd(), newCtxAgentCmd(), newCtxFailCmd())
	root.AddCommand(newCtxAwakeableCmds()...)
	root.AddCommand(newCtxRunCmd(), newCtxSleepCmd(), newCtxCallCmd(), newCtxSendCmd(), newCtxAwaitCmd(),
		newCtxValueCmd("invocation-id", "Print the invocation id", func(ctx context.Context, c *stepctx.Client) (string, error) {
			return c.InvocationID(ctx)
		}),
		newCtxValueCmd("random", "Print a random integer in [0, 2^53), the same on every attempt", func(ctx context.Context, c *stepctx.Client) (string, error) {
			_, n, err := c.Random(ctx)
			return strconv.FormatUint(n, 10), err
		}),
		newCtxValueCmd("uuid", "Print a random UUID (version 4), the same on every attempt", func(ctx context.Context, c *stepctx.Client) (string, error) {
			return c.UUID(ctx)
		}),
	)
	root.SetHelpFunc(ctxHelp)
	return root
}

// ctxHelp prints a fnbridge command's help the way cobra does, but true to
// how its operands are read (separateOperands): a command whose operands
// are data does not list -h/--help, which it takes for a name or payload,
// and the footer points to `fnbridge help COMMAND`, which works for every
// command, rather than to `COMMAND --help`, which does not.
func ctxHelp(c *cobra.Command, _ []string) {
	if dataCommand(c) {
		if f := c.Flags().Lookup("help"); f != nil {
			f.Hidden = true
		}
	}
	w := c.OutOrStdout()
	if text := strings.TrimRightFunc(cmp.Or(c.Long, c.Short), unicode.IsSpace); text != "" {
		fmt.Fprintf(w, "%s\n\n", text)
	}
	root := c.Root().Name()
	helpPath := root + " help" + strings.TrimPrefix(c.CommandPath(), root)
	fmt.Fprint(w, strings.Replace(c.UsageString(),
		fmt.Sprintf("Use %q for more information", c.CommandPath()+" [command] --help"),
		fmt.Sprintf("Use %q for more information", helpPath+" [command]"), 1))
}

// ctxClient is the client of the environment's endpoint.
func ctxClient() (*stepctx.Client, error) {
	c, err := stepctx.ClientFromEnv()
	if err != nil {
		return nil, exitf(ctxExitError, "%v", err)
	}
	return c, nil
}

// callFailed is the exit of a context call that returned err: a call
// that failed terminally alone (refused, or its wait interrupted by the
// invocation's cancellation) is a terminal failure; a request the
// endpoint found malformed (400: a handle this attempt did not issue, a
// value out of range) is bad arguments, as it would be had the command
// known.
func callFailed(err error) error {
	var e *stepctx.Error
	var cf *stepctx.CallFailedError
	var te *stepctx.TextError
	switch {
	case errors.As(err, &te):
		return exitf(ctxExitUsage, "%v", te)
	case errors.As(err, &e) && e.Ended():
		return exitf(ctxExitStopped, "%s", e.Message)
	case errors.As(err, &e) && e.Status == http.StatusBadRequest:
		return exitf(ctxExitUsage, "%v", err)
	case errors.As(err, &cf):
		return exitf(ctxExitTerminal, "%s", cf.Failure.Message)
	}
	return exitf(ctxExitError, "%v", err)
}

func terminal(what string, f *stepctx.Failure) error {
	return exitf(ctxExitTerminal, "%s failed (code %d): %s", what, f.Code, f.Message)
}

// runUsage says what is wrong with fnbridge run's operands (NAME -- CMD
// [ARG...], after --var VAR), in the words of the shell function's own
// check (__fnb_run_usage in the Bash bootstrap).
func runUsage(args []string) string {
	switch {
	case len(args) == 0:
		return "run: NAME -- CMD is missing"
	case args[0] == "--":
		return "run: NAME is missing before --"
	case args[0] == "":
		return "run: NAME is empty (an unset variable?)"
	case len(args) == 1:
		return fmt.Sprintf("run %s: -- CMD is missing after NAME", args[0])
	case args[1] != "--" && strings.HasPrefix(args[0], "-"):
		return fmt.Sprintf("run: unknown option %s (only --var VAR may come before NAME)", args[0])
	case args[1] != "--":
		return fmt.Sprintf("run %s: want -- between NAME and CMD, not %s", args[0], args[1])
	}
	if len(args) > 2 && args[2] == "" {
		return fmt.Sprintf("run %s: CMD is empty (an unset variable?)", args[0])
	}
	return fmt.Sprintf("run %s: CMD is missing after --", args[0])
}

func newCtxRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run [--var VAR] NAME -- CMD [ARG...]",
		Short: "Run CMD once as the durable step NAME; its stdout is the step's value",
		Long: `Run CMD (executed directly, not through a shell) as the durable step NAME.
Its stdout is journaled and printed; on replay the recorded stdout is printed
and CMD does not run. CMD exiting 100 is a terminal failure: its stdout is the
message, printed on stderr, and fnbridge exits 100, on replay too. Any other
non-zero status fails the attempt, which ends there: the bridge stops the
function, so no code after this fnbridge run runs (not even || handlers),
and Restate retries the attempt, running CMD again. To handle a failure in
the script itself (retry after fnbridge sleep, alert, clean up), make CMD
exit 0 and print its outcome, e.g.
  fnbridge run try1 -- sh -c 'curl -fsS "$0" || echo FAILED' URL
CMD's stdin and stderr are fnbridge's.

In the function's own shell (not in $(...), a pipeline or a child process)
fnbridge is a shell function that takes steps without starting a process
for itself, and runs a builtin CMD (printf, echo, true, false, test, :) in the
shell; there --var VAR assigns the value to the shell variable VAR instead
of printing it, so  fnbridge run --var v NAME -- CMD  costs no fork at all
where  v=$(fnbridge run NAME -- CMD)  forks a subshell.`,
		// Parsed by hand, as the shell function does: NAME is whatever
		// comes first (a name starting with - included, which cobra would
		// take for a flag), and everything after -- is CMD's.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
				return cmd.Help()
			}
			// The inherited flags (--log-level, ...) may come first: cobra
			// leaves them to a command that parses its own.
			for len(args) > 1 && strings.HasPrefix(args[0], "--") && args[0] != "--" && !strings.HasPrefix(args[0], "--var") {
				flag, _, inline := strings.Cut(args[0][2:], "=")
				if cmd.InheritedFlags().Lookup(flag) == nil {
					break
				}
				n := 2
				if inline {
					n = 1
				}
				if err := cmd.InheritedFlags().Parse(args[:min(n, len(args))]); err != nil {
					return exitf(ctxExitUsage, "%v", err)
				}
				args = args[min(n, len(args)):]
			}
			toVar := false
			switch {
			case len(args) > 0 && args[0] == "--var":
				toVar, args = true, args[min(2, len(args)):]
			case len(args) > 0 && strings.HasPrefix(args[0], "--var="):
				toVar, args = true, args[1:]
			}
			if len(args) < 3 || args[1] != "--" || args[0] == "" || args[2] == "" {
				return exitf(ctxExitUsage, "%s; usage: fnbridge run [--var VAR] NAME -- CMD [ARG...]", runUsage(args))
			}
			if toVar {
				return exitf(ctxExitUsage, "run --var works only in the function's own shell, where fnbridge is a shell function; in a subshell or a child process capture stdout instead: v=$(fnbridge run NAME -- CMD)")
			}
			name, argv := args[0], args[2:]
			c, err := ctxClient()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			// Before the step starts: a run left open would refuse every
			// later context call of the attempt.
			out, err := stepStdout()
			if err != nil {
				return exitf(ctxExitError, "run %s: a file for the step's stdout: %v", name, err)
			}
			defer out.Close()
			rec, h, err := c.RunStart(ctx, name)
			if err != nil {
				return callFailed(err)
			}
			if rec != nil {
				// A recorded step reads none of its stdin: whether CMD read
				// it cannot be known, and a pipe it shares with the code
				// around it (producer | while read ...; do fnbridge run ...)
				// is that code's input, which reading lost.
				if rec.Failure != nil {
					return exitf(ctxExitTerminal, "run %s: %s", name, rec.Failure.Message)
				}
				return writeOut(cmd, rec.Value)
			}
			return executeStep(cmd, c, name, h, argv, out)
		},
	}
	return cmd
}

// stepStdout is the file CMD's stdout goes to, as in the shell function:
// the value is what CMD printed by the time it exited, and a background
// child of it that keeps the descriptor open neither holds the step up (a
// pipe would, until the child closed it) nor writes into another step's
// value. A memfd needs no writable directory (the function's TMPDIR may
// have none).
func stepStdout() (*os.File, error) {
	fd, err := unix.MemfdCreate("fnbridge-step", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "fnbridge-step"), nil
}

// executeStep runs argv for the run handle h, its stdout to outFile, and
// reports its outcome.
func executeStep(cmd *cobra.Command, c *stepctx.Client, name, h string, argv []string, outFile *os.File) error {
	ctx := cmd.Context()
	x := exec.Command(argv[0], argv[1:]...)
	x.Stdin, x.Stdout, x.Stderr = cmd.InOrStdin(), outFile, cmd.ErrOrStderr()
	status, why := 0, ""
	err := x.Run()
	if errors.Is(err, syscall.ENOEXEC) {
		// A script without a #! line: the function's own shell runs it
		// with bash (bash's rule for such files), so a child process
		// does too, rather than failing every attempt with "exec format
		// error".
		x = scriptCommand(x.Path, argv[1:])
		x.Stdin, x.Stdout, x.Stderr = cmd.InOrStdin(), outFile, cmd.ErrOrStderr()
		err = x.Run()
	}
	if err != nil {
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			status = ee.ExitCode()
			why = fmt.Sprintf("%s exited with status %d", argv[0], status)
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				status = 128 + int(ws.Signal())
				why = fmt.Sprintf("%s was killed by signal %d (%v)", argv[0], int(ws.Signal()), ws.Signal())
			}
		case errors.Is(err, exec.ErrNotFound):
			status, why = 127, fmt.Sprintf("%s: no such program on PATH (a shell function is not one: a step runs a program)", argv[0])
		case errors.Is(err, fs.ErrNotExist):
			status, why = 127, fmt.Sprintf("%s: no such file", argv[0])
		case errors.Is(err, fs.ErrPermission):
			status, why = 126, fmt.Sprintf("%s is not executable (permission denied)", argv[0])
		default:
			status, why = 126, fmt.Sprintf("%s could not be started: %v", argv[0], err)
		}
	}
	out, err := readAll(outFile)
	if err != nil && status == 0 {
		// Reported like a failed CMD, so the run does not stay open.
		status, why = 126, fmt.Sprintf("reading %s's stdout: %v", argv[0], err)
	}
	outcome, exit := stepOutcome(name, status, why, out)
	if err := c.RunComplete(ctx, h, outcome); err != nil {
		if outcome.Retryable == nil {
			return callFailed(err)
		}
		exit.msg += fmt.Sprintf(" (reporting it failed: %v)", err)
	}
	if exit != nil {
		return exit
	}
	return writeOut(cmd, out)
}

// scriptCommand runs the file at path, which the kernel would not execute
// (no #! line), as a bash script, as bash itself does for such a command;
// bash refuses a binary file with status 126. Without bash on PATH, sh
// runs it, as execvp(3) would.
func scriptCommand(path string, args []string) *exec.Cmd {
	shell, err := exec.LookPath("bash")
	if err != nil {
		shell = "/bin/sh"
	}
	return exec.Command(shell, append([]string{path}, args...)...)
}

// readAll reads what f holds now, from its start (a writer that goes on
// cannot keep the read going).
func readAll(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, st.Size()))
}

// stepOutcome is what a step's CMD that ended with status (why says how)
// and printed out journals, and how fnbridge run then exits (nil: 0,
// printing out). Shared by the command and the step agent.
func stepOutcome(name string, status int, why string, out []byte) (stepctx.RunOutcome, *ctxExit) {
	switch status {
	case 0:
		return stepctx.RunOutcome{Result: stepctx.Result{Value: out}}, nil
	case ctxExitTerminal:
		msg := strings.TrimRight(string(out), "\n")
		if msg == "" {
			msg = why
		}
		f := &stepctx.Failure{Code: 500, Message: msg}
		return stepctx.RunOutcome{Result: stepctx.Result{Failure: f}}, &ctxExit{code: ctxExitTerminal, msg: fmt.Sprintf("run %s: %s", name, msg)}
	default:
		return stepctx.RunOutcome{Retryable: &stepctx.RetryableFailure{Message: why}},
			&ctxExit{code: status, msg: fmt.Sprintf("run %s: %s; the attempt fails and Restate retries it", name, why)}
	}
}

func writeOut(cmd *cobra.Command, b []byte) error {
	if _, err := cmd.OutOrStdout().Write(b); err != nil {
		return exitf(ctxExitError, "writing stdout: %v", err)
	}
	return nil
}

// printResult prints a value followed by a newline, or fails terminally.
func printResult(cmd *cobra.Command, what string, r stepctx.Result) error {
	if r.Failure != nil {
		return terminal(what, r.Failure)
	}
	return writeOut(cmd, append(r.Value, '\n'))
}

// parseCtxDuration reads 90, 1.5, .5 or 1. (seconds, as sleep(1) takes
// them), 90s, 5m, 1h, 1m30s, 250ms; what names the operand or flag in
// the error ("duration", "--delay").
func parseCtxDuration(what, s string) (time.Duration, error) {
	in := s
	// A plain number of seconds, negative included, so that -1 is told it
	// is negative rather than that it lacks a unit.
	if whole, frac, dotted := strings.Cut(strings.TrimPrefix(s, "-"), "."); (isDigits(whole) || dotted && whole == "") && (frac == "" || isDigits(frac)) && (whole != "" || frac != "") {
		s += "s"
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && durationSyntax.MatchString(strings.TrimPrefix(s, "-")):
		// Well formed, so too long for a duration: say the bound, as
		// Python's fnbridge.sleep does.
		return 0, exitf(ctxExitUsage, "%s %q: must be at most %d seconds (about 292 years)", what, in, int64(math.MaxInt64/time.Second))
	case err != nil:
		return 0, exitf(ctxExitUsage, "%s %q: want seconds (90, 1.5) or a number with a unit (90s, 5m, 1h, 250ms)", what, in)
	case d < 0:
		return 0, exitf(ctxExitUsage, "%s %q: must not be negative", what, in)
	}
	return d, nil
}

// durationSyntax is what time.ParseDuration reads, whatever the size.
var durationSyntax = regexp.MustCompile(`^([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func newCtxSleepCmd() *cobra.Command {
	var async bool
	cmd := &cobra.Command{
		Use:   "sleep [--async] DURATION",
		Short: "Sleep durably: 90 or 1.5 (seconds), 90s, 5m, 1h; --async prints a handle for await",
		Args:  exactArgs(1, "fnbridge sleep [--async] DURATION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := parseCtxDuration("duration", args[0])
			if err != nil {
				return err
			}
			return awaitable(cmd, async,
				func(ctx context.Context, c *stepctx.Client) (string, error) { return c.SleepAsync(ctx, d) },
				func(ctx context.Context, c *stepctx.Client) (stepctx.Result, error) { return c.Sleep(ctx, d) },
				func(r stepctx.Result) error {
					if r.Failure != nil {
						return terminal("sleep", r.Failure)
					}
					return nil
				})
		},
	}
	cmd.Flags().BoolVar(&async, "async", false, "print a handle instead of waiting")
	return cmd
}

// awaitable makes a context call that waits for a result, handled by done;
// with async it starts the call and prints its handle for await instead.
func awaitable(cmd *cobra.Command, async bool,
	start func(context.Context, *stepctx.Client) (string, error),
	wait func(context.Context, *stepctx.Client) (stepctx.Result, error),
	done func(stepctx.Result) error) error {
	c, err := ctxClient()
	if err != nil {
		return err
	}
	defer c.Close()
	if async {
		h, err := start(cmd.Context(), c)
		if err != nil {
			return callFailed(err)
		}
		return writeOut(cmd, []byte(h+"\n"))
	}
	r, err := wait(cmd.Context(), c)
	if err != nil {
		return callFailed(err)
	}
	return done(r)
}

func exactArgs(n int, usage string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return exitf(ctxExitUsage, "usage: %s", usage)
		}
		return nil
	}
}

// callFlags are the flags of call and send.
type callFlags struct {
	key, idempotencyKey string
	headers             []string
}

func (f *callFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.key, "key", "", "virtual object or workflow key")
	cmd.Flags().StringVar(&f.idempotencyKey, "idempotency-key", "", "idempotency key of the call")
	cmd.Flags().StringArrayVar(&f.headers, "header", nil, "header NAME=VALUE (repeatable)")
}

// request builds the call from SERVICE/HANDLER and an optional JSON
// payload ("-" reads it from stdin).
func (f *callFlags) request(cmd *cobra.Command, args []string) (stepctx.CallRequest, error) {
	service, handler, ok := strings.Cut(args[0], "/")
	if !ok || service == "" || handler == "" || strings.Contains(handler, "/") {
		return stepctx.CallRequest{}, exitf(ctxExitUsage, "%q: want SERVICE/HANDLER", args[0])
	}
	req := stepctx.CallRequest{Service: service, Handler: handler, Key: f.key, IdempotencyKey: f.idempotencyKey}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return req, exitf(ctxExitUsage, "--header %q: want NAME=VALUE", h)
		}
		if req.Headers == nil {
			req.Headers = map[string]string{}
		}
		req.Headers[k] = v
	}
	if len(args) == 2 {
		in := []byte(args[1])
		if args[1] == "-" {
			var err error
			if in, err = io.ReadAll(cmd.InOrStdin()); err != nil {
				return req, exitf(ctxExitError, "reading the payload from stdin: %v", err)
			}
		}
		if !json.Valid(in) {
			return req, exitf(ctxExitUsage, "the payload is not valid JSON")
		}
		if !utf8.Valid(in) {
			return req, exitf(ctxExitUsage, "the payload holds bytes that are not UTF-8: JSON text is UTF-8")
		}
		req.Input = in
	}
	return req, nil
}

func newCtxCallCmd() *cobra.Command {
	var f callFlags
	var async bool
	cmd := &cobra.Command{
		Use:   "call [flags] SERVICE/HANDLER [JSON|-]",
		Short: "Call a handler durably and print its result; --async prints a handle for await",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request(cmd, args)
			if err != nil {
				return err
			}
			return awaitable(cmd, async,
				func(ctx context.Context, c *stepctx.Client) (string, error) { return c.CallAsync(ctx, req) },
				func(ctx context.Context, c *stepctx.Client) (stepctx.Result, error) { return c.Call(ctx, req) },
				func(r stepctx.Result) error { return printResult(cmd, "call "+args[0], r) })
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&async, "async", false, "print a handle instead of waiting for the result")
	return cmd
}

func newCtxSendCmd() *cobra.Command {
	var f callFlags
	var delay string
	cmd := &cobra.Command{
		Use:   "send [flags] SERVICE/HANDLER [JSON|-]",
		Short: "Send a one-way call durably and print the callee's invocation id",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := f.request(cmd, args)
			if err != nil {
				return err
			}
			var d time.Duration
			if delay != "" {
				if d, err = parseCtxDuration("--delay", delay); err != nil {
					return err
				}
			}
			c, err := ctxClient()
			if err != nil {
				return err
			}
			defer c.Close()
			id, err := c.Send(cmd.Context(), stepctx.SendRequest{CallRequest: req, Delay: d})
			if err != nil {
				return callFailed(err)
			}
			return writeOut(cmd, []byte(id+"\n"))
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&delay, "delay", "", "deliver after this long: 90 or 1.5 (seconds), 90s, 5m, 1h")
	return cmd
}

func newCtxAwaitCmd() *cobra.Command {
	var anyOf bool
	cmd := &cobra.Command{
		Use:   "await [--any] HANDLE...",
		Short: "Wait for handles (sleep/call --async, awakeable ids) and print their results, one line each",
		Long: `Wait for every HANDLE and print each result followed by a newline, in order
(an empty line for a timer or a failed one); any terminal failure is reported
on stderr and the exit status is 100. With --any, wait for the first to
complete and print its handle, then its result.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return exitf(ctxExitUsage, "usage: fnbridge await [--any] HANDLE...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := ctxClient()
			if err != nil {
				return err
			}
			defer c.Close()
			if anyOf {
				i, r, err := c.AwaitAny(cmd.Context(), args...)
				if err != nil {
					return callFailed(err)
				}
				if err := writeOut(cmd, []byte(args[i]+"\n")); err != nil {
					return err
				}
				return printResult(cmd, args[i], r)
			}
			rs, err := c.Await(cmd.Context(), args...)
			if err != nil {
				return callFailed(err)
			}
			var failed []string
			for i, r := range rs {
				if r.Failure != nil {
					failed = append(failed, fmt.Sprintf("%s failed (code %d): %s", args[i], r.Failure.Code, r.Failure.Message))
					r = stepctx.Result{}
				}
				if err := printResult(cmd, args[i], r); err != nil {
					return err
				}
			}
			if len(failed) > 0 {
				return exitf(ctxExitTerminal, "%s", strings.Join(failed, "\nfnbridge: "))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&anyOf, "any", false, "wait for the first handle to complete")
	return cmd
}

// newCtxValueCmd is a command without arguments printing one value.
func newCtxValueCmd(use, short string, get func(context.Context, *stepctx.Client) (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(0, "fnbridge "+use),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := ctxClient()
			if err != nil {
				return err
			}
			defer c.Close()
			v, err := get(cmd.Context(), c)
			if err != nil {
				return callFailed(err)
			}
			return writeOut(cmd, []byte(v+"\n"))
		},
	}
}

// newCtxFailCmd is `fnbridge fail` outside the function's own shell (a
// child process, a step's CMD), where the shell function of the same name
// cannot be: it cannot end the function from here, so it prints the
// message and exits 100, which a step's CMD turns into a terminal step
// failure and a function that exits with it into a terminal failure
// (code 500: only the function's own shell records a code).
func newCtxFailCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "fail [--code N] MESSAGE...",
		Short: "End the invocation with a terminal failure (in the function's own shell; elsewhere: print MESSAGE, exit 100)",
		Long: "End the invocation with a terminal failure carrying MESSAGE: in the function's\n" +
			"own shell, at once (in a subshell of it, $(...) or a pipeline's part, it\n" +
			"ends that subshell with 100: `|| exit` passes the failure on); elsewhere\n" +
			"(a child process, a step's CMD) it prints MESSAGE and exits 100, a\n" +
			"terminal failure of the step or function.\n\n" +
			"  --code N   the failure's code, 1 to 65535 (default 500), which the\n" +
			"             caller sees as the HTTP status; only the function's own\n" +
			"             shell and its subshells record it, elsewhere the code is 500\n\n" +
			"Everything after fail (and --code N) is the message, --help included:\n" +
			"the command always exits 100, so this help is only `fnbridge help fail` (or `bridge help ctx fail`).",
		// Whatever follows is the message ("-1 items left" too), and the
		// command always exits 100, as the shell function does: a usage
		// error's status would turn the terminal failure into a retry.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, note := "500", ""
			switch {
			case len(args) > 0 && args[0] == "--code":
				if len(args) > 1 {
					code = args[1]
					args = args[2:]
				} else {
					code, args = "", nil
				}
			case len(args) > 0 && strings.HasPrefix(args[0], "--code="):
				code, args = strings.TrimPrefix(args[0], "--code="), args[1:]
			}
			if n, err := strconv.Atoi(code); err != nil || n < 1 || n > 65535 || len(code) > 5 {
				note = fmt.Sprintf(" (fnbridge fail --code %q: want a code from 1 to 65535; failing with 500)", code)
			} else if n != 500 {
				note = fmt.Sprintf(" (fnbridge fail --code %d works in the function's own shell and its subshells only; from a child process the failure's code is 500)", n)
			}
			msg := strings.Join(args, " ")
			if msg == "" {
				msg = noFailMessage
			}
			return exitf(ctxExitTerminal, "%s%s", msg, note)
		},
	}
}
