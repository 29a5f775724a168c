// Command bridge runs fnbridge: a Restate service deployment whose handlers
// are Python and Bash functions executed through FunctionRuntime.
//
// Subcommands live one per file; this file holds the root command, the
// flags every subcommand shares, and the configuration loading of those
// that run the configuration.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/internal/sysmon"
	"github.com/fnbridge/fnbridge/internal/version"
)

// globalFlags are the flags accepted by every subcommand.
type globalFlags struct {
	logLevel  string
	logFormat string
}

// main starts on the process's first thread, where sysmon.Apply must run
// (the parent-death signal a supervisor set lives there); main unlocks
// it once that is decided.
func init() { runtime.LockOSThread() }

func main() {
	// Installed (or linked) as `fnbridge` on a function's PATH, the binary
	// is the durable-steps context command of Bash functions.
	if filepath.Base(os.Args[0]) == "fnbridge" {
		if longRunning(os.Args[1:], "agent") {
			_ = sysmon.Apply() // the agent has no log; untuned is still correct
		}
		runtime.UnlockOSThread()
		os.Exit(ctxMain(os.Args[1:]))
	}
	// Whatever this binary is called, it is the command Bash workers
	// reach as fnbridge (through a link of that name on their PATH).
	functionruntime.DeclareContextCommand()
	if a := os.Args[1:]; longRunning(a, "serve") || longRunning(a, "dev") || longRunning(a, "runtime", "serve") || longRunning(a, "ctx", "agent") {
		sysmonErr = sysmon.Apply()
	}
	runtime.UnlockOSThread()
	os.Exit(runBridge(os.Args[1:], os.Stdout, os.Stderr))
}

// sysmonErr is why main could not re-execute the process with sysmon's
// tuning (internal/sysmon); the serving commands log it.
var sysmonErr error

// logSysmon logs sysmonErr, if any: the process serves as well without
// the tuning, at some more CPU per invocation.
func logSysmon(log zerolog.Logger) {
	if sysmonErr != nil {
		log.Debug().Err(sysmonErr).Msg("sysmon: could not re-execute with " + sysmon.Setting + "; serving without it")
	}
}

// longRunning reports whether args run the subcommand path cmd, the words
// of the command line once the global flags (and their values) are left
// out. Only main uses it: the re-execution it decides on must happen
// before anything else runs, and never in a test process.
func longRunning(args []string, cmd ...string) bool {
	var words []string
	for i := 0; i < len(args) && len(words) < len(cmd); i++ {
		switch a := args[i]; {
		case a == "--":
			return false
		case a == "--log-level" || a == "--log-format":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			words = append(words, a)
		}
	}
	return slices.Equal(words, cmd)
}

// stopSignals are the signals that stop a command gracefully: SIGTERM,
// SIGINT, and SIGHUP (its terminal closed) unless it is ignored, as nohup
// has it: catching it would undo nohup.
func stopSignals() []os.Signal {
	sigs := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// runBridge runs the bridge command line args and returns its exit status.
func runBridge(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(separateOperands(root, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	if code, ok := ctxExitStatus(stderr, err); ok { // bridge ctx ...: its exit statuses
		return code
	}
	fmt.Fprintln(stderr, "bridge:", err)
	if inCtx(cmd) {
		return ctxExitUsage // cobra's own errors, as fnbridge exits on them
	}
	if cmd != nil && cmd.Name() == "invoke" && cmd.Parent() == root {
		return invokeExitStatus(err)
	}
	// As bridge invoke: 2 when nothing started because the configuration
	// file or a flag is wrong, so a script or a supervisor can tell a
	// mistake to fix from a failure to retry.
	var ce *bridge.ConfigError
	var ue usageError
	if errors.As(err, &ce) || errors.As(err, &ue) {
		return invokeExitUsage
	}
	if cmd == root && strings.HasPrefix(err.Error(), "unknown command ") {
		// A misspelt command (bridge servee): cobra finds it before any
		// argument check of ours runs.
		return invokeExitUsage
	}
	return 1
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "bridge",
		Short:         "Run Python and Bash functions as durable Restate services",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error (bridge invoke on a terminal: warn for the bridge, info for the function)")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "json", "log format: json or console (bridge invoke on a terminal: console)")
	// Checked for every command, those that log nothing included: a
	// misspelt flag is never silently taken for the default.
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if _, err := newLogger(g.logLevel, g.logFormat, io.Discard); err != nil {
			return usageError{err}
		}
		return nil
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{plainFlagError(err)} })
	root.AddCommand(newVersionCmd(), newServeCmd(g, nil), newDevCmd(g), newInvokeCmd(g), newManifestCmd(g), newRuntimeCmd(g), newKeygenCmd(), newCtxCmd())
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			// cobra's completion command shows its help for a shell it
			// does not know, and exits 0.
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageError{fmt.Errorf("unknown shell %q for %q: want bash, zsh, fish or powershell", args[0], cmd.CommandPath())}
				}
				return cmd.Help()
			}
			c.Args = cobra.ArbitraryArgs
		}
	}
	usageArgs(root)
	return root
}

// usageArgs makes every argument check of c and its subcommands a
// usageError (exit 2: nothing started), as a flag error is; cobra's are
// plain errors.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				if len(args) > 0 && cmd.Flags().Lookup("config") != nil && !strings.Contains(cmd.Use, " ") && !cmd.HasAvailableSubCommands() {
					// `bridge serve bridge.yaml` (a command taking no
					// operands: its Use names none): cobra says "unknown
					// command", which leaves the user guessing.
					err = fmt.Errorf("%s takes no arguments (got %q): the configuration file is given with --config FILE", cmd.CommandPath(), args[0])
				}
				return usageError{err}
			}
			return nil
		}
	}
	for _, s := range c.Commands() {
		usageArgs(s)
	}
}

// goParseError is the tail Go's parsers give a flag's error, which names
// them (strconv.ParseInt, time.ParseDuration) rather than what the flag
// wants.
var goParseError = regexp.MustCompile(`: (strconv\.Parse(\w+): parsing "[^"]*": (invalid syntax|value out of range)|time: .*duration.*)$`)

// plainFlagError says in a flag's error what the flag wants instead of
// which Go parser refused its value.
func plainFlagError(err error) error {
	msg := err.Error()
	m := goParseError.FindStringSubmatch(msg)
	if m == nil {
		return err
	}
	want := "want a duration such as 30s, 5m or 1h"
	switch {
	case m[3] == "value out of range":
		want = "out of range"
	case m[2] == "Bool":
		want = "want true or false"
	case m[2] == "Float":
		want = "want a number"
	case m[2] != "":
		want = "want a whole number"
	}
	return errors.New(strings.TrimSuffix(msg, m[0]) + ": " + want)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the fnbridge version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "fnbridge", version.Version)
			return err
		},
	}
}

// logger builds the process logger from the global flags; a bad value is an
// error naming the flag rather than a silent default.
func (g *globalFlags) logger() (zerolog.Logger, error) {
	return newLogger(g.logLevel, g.logFormat, os.Stderr)
}

// interactiveLogger is logger for a command a person runs to read its
// result (bridge invoke): when stderr is a terminal, --log-level and
// --log-format left unset default to warn and console, so the output is
// not buried under JSON lines; the function's own lines still show from
// info up, since seeing what it prints is why one runs it by hand.
// Redirected, the defaults stay info and json, for whatever reads them.
func (g *globalFlags) interactiveLogger(cmd *cobra.Command) (zerolog.Logger, error) {
	d := interactiveLogDefaults(g.logLevel, g.logFormat, cmd.Flags().Changed("log-level"), cmd.Flags().Changed("log-format"), isTerminal(os.Stderr))
	if d.handlerLevel == "" {
		return newLogger(d.level, d.format, os.Stderr)
	}
	floor, err := parseLogLevel(d.level)
	if err != nil {
		return zerolog.Nop(), err
	}
	w, err := logWriter(d.format, os.Stderr)
	if err != nil {
		return zerolog.Nop(), err
	}
	// The logger lets the function's lines through from handlerLevel; the
	// writer holds the bridge's own records to the terminal's level.
	w = handlerLinesWriter{w: zerolog.LevelWriterAdapter{Writer: w}, min: floor}
	return newLogger(d.handlerLevel, "", w)
}

// logDefaults is what interactiveLogDefaults chose.
type logDefaults struct {
	level, format string
	// handlerLevel, when set, is the level from which the function's own
	// lines show, below level.
	handlerLevel string
}

// interactiveLogDefaults picks interactiveLogger's level and format: each
// flag the user set wins, each one left unset takes the terminal default.
func interactiveLogDefaults(level, format string, levelSet, formatSet, terminal bool) logDefaults {
	d := logDefaults{level: level, format: format}
	if terminal && !levelSet {
		d.level, d.handlerLevel = "warn", "info"
	}
	if terminal && !formatSet {
		d.format = "console"
	}
	return d
}

// handlerLinesWriter passes a function's own lines (source "handler") at
// every level the logger lets through, and the bridge's own records only
// from min up.
type handlerLinesWriter struct {
	w   zerolog.LevelWriter
	min zerolog.Level
}

// handlerSource marks a function's line in a record's JSON. A string value
// holding it would have its quotes escaped, so only the field matches.
var handlerSource = []byte(`"source":"handler"`)

func (h handlerLinesWriter) Write(p []byte) (int, error) { return h.w.Write(p) }

// WriteLevel drops a bridge record below min, reporting it written.
func (h handlerLinesWriter) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	if level < h.min && !bytes.Contains(p, handlerSource) {
		return len(p), nil
	}
	return h.w.WriteLevel(level, p)
}

// newLogger writes level-filtered records to w in format; format "" takes
// w as the finished writer.
func newLogger(levelName, format string, w io.Writer) (zerolog.Logger, error) {
	level, err := parseLogLevel(levelName)
	if err != nil {
		return zerolog.Nop(), err
	}
	if format != "" {
		if w, err = logWriter(format, w); err != nil {
			return zerolog.Nop(), err
		}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// parseLogLevel reads --log-level, naming the flag when it is bad. Only
// the five documented names (any case): zerolog also reads numbers,
// fatal, panic and disabled, each of which would silence the warnings
// an operator needs.
func parseLogLevel(name string) (zerolog.Level, error) {
	switch strings.ToLower(name) {
	case "trace", "debug", "info", "warn", "error":
		return zerolog.ParseLevel(strings.ToLower(name))
	}
	return zerolog.NoLevel, fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", name)
}

// consoleTimeFormat is the time of a console log line: local, to the
// second (the records' own time field has no finer precision).
const consoleTimeFormat = "2006-01-02 15:04:05"

// logWriter formats records for w as --log-format asks.
func logWriter(format string, w io.Writer) (io.Writer, error) {
	switch format {
	case "json":
		return w, nil
	case "console":
		// Colour only on a terminal: console logs often land in files,
		// where a line needs its date and seconds (the writer's default is
		// "3:04PM").
		f, ok := w.(*os.File)
		return zerolog.ConsoleWriter{Out: w, NoColor: !ok || !isTerminal(f), TimeFormat: consoleTimeFormat}, nil
	default:
		return nil, fmt.Errorf("--log-format %q: want json or console", format)
	}
}

// isTerminal reports whether f is a terminal (a character device such as
// /dev/null is not).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// addConfigFlag registers --config, the configuration file of the
// subcommands that run it.
func addConfigFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "config", "bridge.yaml", "configuration file")
}

// loadConfig loads the configuration file and applies a --listen
// override, checked as the file's own listen is (bridge.CheckListen)
// before anything starts; serve then applies the same exposure rules to
// it (loadServeConfig).
func loadConfig(path, listen string) (*bridge.Config, error) {
	cfg, err := bridge.LoadConfig(path)
	if err != nil {
		return nil, usageError{err} // unreadable or wrong: nothing started
	}
	if listen != "" {
		if err := bridge.CheckListen(listen); err != nil {
			return nil, usageError{fmt.Errorf("--listen %v", err)}
		}
		cfg.Listen = listen
	}
	return cfg, nil
}
