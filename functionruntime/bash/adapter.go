package bash

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
)

//go:embed bootstrap.bash
var bootstrap string

// bootstrapStub is the worker's -c script: it sources the bootstrap file
// named by its first argument with the rest as positional parameters, so
// $0 stays the worker's name in bash's own messages. A bash older than
// MinBashVersion is refused first, by name: the bootstrap would not even
// parse there.
const bootstrapStub = `((BASH_VERSINFO[0] > 4 || BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] >= 4)) || { builtin printf 'E bash %s\n' "$BASH_VERSION" >&4; builtin exit 1; }; builtin . "$1" "${@:2}"`

// MinBashVersion is the oldest bash the worker runs on (bootstrapStub
// tests it): the bootstrap uses 4.4's ${var@a} and 4.2's [[ -v ]].
const MinBashVersion = "4.4"

// Kind is the runtime kind this adapter serves.
const Kind = "bash"

// TerminalExitStatus is the exit status with which a handler asks for a
// terminal failure, one that must not be retried.
const TerminalExitStatus = 100

// AttemptEndedStatus is the exit status of a fnbridge command whose
// attempt suspended or ended; a function given a step context that exits
// with it ends as functionruntime.AttemptEndedType.
const AttemptEndedStatus = 75

// Environment variables of an invocation given a step context.
const (
	ContextEnv      = "FNBRIDGE_CONTEXT"
	ContextTokenEnv = "FNBRIDGE_CONTEXT_TOKEN"
)

// InputFileEnv names the environment variable that holds the path of the
// file holding the invocation's payload.
const InputFileEnv = "FNBRIDGE_INPUT_FILE"

// DefaultMaxOutput bounds a function's stdout when Options.MaxOutput is zero.
const DefaultMaxOutput = 16 << 20

// maxName bounds each part of the handler string.
const maxName = 128

// Options configures the adapter. The zero value is ready to use.
type Options struct {
	// Interpreter is the bash executable, a name looked up in the server's
	// PATH when New runs, or a path. Default "bash".
	Interpreter string
	// Grace is how long a worker's process group gets between SIGTERM and
	// SIGKILL. Default 2s.
	Grace time.Duration
	// MaxLogLine bounds one log line in bytes; the rest is dropped.
	// Default 16 KiB.
	MaxLogLine int
	// MaxOutput bounds the function's stdout in bytes. Default 16 MiB.
	MaxOutput int
	// NoSubreaper keeps the server process from becoming a child subreaper
	// (see package proc). Orphans of handlers are then reaped by init.
	NoSubreaper bool
	// ContextCommand is the executable behind the fnbridge command on a
	// worker's PATH (see the package doc, Durable steps): a name looked up
	// in the server's PATH when New runs, or a path. Default: the running
	// executable when it is the bridge (it called
	// functionruntime.DeclareContextCommand, or is named bridge or
	// fnbridge), else none.
	ContextCommand string
	// NoContextCommand puts no fnbridge command on workers' PATH.
	NoContextCommand bool
}

type adapter struct {
	opts    Options
	exe     string
	lookErr error
	ctxCmd  string // resolved ContextCommand; "" for none
	ctxErr  error
}

// New returns the Bash adapter. The interpreter is looked up now; a missing
// interpreter is reported by Start.
func New(opts Options) functionruntime.Adapter {
	// proc.Settings defaults both adapters alike.
	s := proc.Settings{Interpreter: opts.Interpreter, Grace: opts.Grace, MaxLogLine: opts.MaxLogLine,
		MaxOutput: opts.MaxOutput, NoSubreaper: opts.NoSubreaper}.WithDefaults("bash", DefaultMaxOutput)
	opts.Interpreter, opts.Grace, opts.MaxLogLine, opts.MaxOutput = s.Interpreter, s.Grace, s.MaxLogLine, s.MaxOutput
	a := &adapter{opts: opts}
	a.exe, a.lookErr = proc.LookInterpreter(opts.Interpreter)
	if !opts.NoContextCommand {
		a.ctxCmd, a.ctxErr = proc.ResolveContextCommand(opts.ContextCommand)
	}
	return a
}

// Kind returns "bash".
func (a *adapter) Kind() string { return Kind }

// RunsInline marks the adapter as honouring WorkerSpec.Inline (see the
// package doc, Inline invocations).
func (a *adapter) RunsInline() {}

// ValidateHandler accepts file.function with a safe file stem and a bash
// function name; see the package doc.
func (a *adapter) ValidateHandler(handler string) error {
	return ValidateHandler(handler)
}

// ValidateHandler checks a handler string as the adapter's ValidateHandler
// does, without an adapter: configuration checks use it so they never
// accept a handler the runtime would refuse.
func ValidateHandler(handler string) error {
	_, _, err := splitHandler(handler)
	return err
}

// splitHandler validates handler and returns its file stem and function.
func splitHandler(handler string) (stem, fn string, err error) {
	const want = `want file.function, e.g. "handler.main" for function main in handler.sh`
	stem, fn, ok := strings.Cut(handler, ".")
	switch {
	case handler == "":
		return "", "", fmt.Errorf("bash handler is empty: %s", want)
	case len(handler) > functionruntime.MaxHandlerBytes:
		// The FunctionRuntime server's bound, below two parts of maxName.
		return "", "", fmt.Errorf("bash handler is %d bytes, longer than %d", len(handler), functionruntime.MaxHandlerBytes)
	case strings.ContainsRune(handler, '/'):
		// Cut at the first '.', "../lib/x.main" would name the file "".
		return "", "", fmt.Errorf("bash handler %q is a path: name the file without its directory (the registration's working directory holds it) and without .sh: %s", handler, want)
	case !ok:
		return "", "", fmt.Errorf("bash handler %q has no function part: %s", handler, want)
	case strings.HasPrefix(fn, "sh."):
		return "", "", fmt.Errorf("bash handler %q: the .sh is implied, write %q: %s", handler, stem+"."+strings.TrimPrefix(fn, "sh."), want)
	case !isStem(stem):
		return "", "", fmt.Errorf("bash handler %q: file %q must be 1-%d ASCII letters, digits, '_' or '-', not starting with '-' (no '/', '..', or other characters; the .sh is implied): %s", handler, stem, maxName, want)
	case !isFuncName(fn):
		return "", "", fmt.Errorf("bash handler %q: function %q must be 1-%d ASCII letters, digits or '_', not starting with a digit: %s", handler, fn, maxName, want)
	case reservedNames[fn]:
		return "", "", fmt.Errorf("bash handler %q: function %q is a bash special builtin or reserved word, which bash may run in place of a function of that name: choose another name", handler, fn)
	case fn == "fnbridge" || strings.HasPrefix(fn, "__fnb_"):
		// The worker defines fnbridge in every invocation's shell after
		// the file (the handler would be replaced, and the caller's
		// payload would pick a context command, fnbridge fail, ...); the
		// __fnb_ names are its helpers, which the file's function would
		// replace.
		return "", "", fmt.Errorf("bash handler %q: function %q is the worker's own name (the fnbridge command, or one of its __fnb_ helpers): choose another name", handler, fn)
	}
	return stem, fn, nil
}

// reservedNames are refused as function names: a special builtin runs
// before a function of its name in POSIX mode (eval would run the payload
// as code), and a builtin or keyword name only invites confusion. (".",
// ":", "{", "}", "!", "[[" and "]]" are no identifiers: refused before.)
var reservedNames = map[string]bool{
	// special builtins and the builtins that evaluate, declare or alias
	"eval": true, "source": true, "exec": true, "exit": true, "builtin": true, "command": true,
	"trap": true, "set": true, "unset": true, "export": true, "readonly": true, "return": true, "shift": true,
	"times": true, "break": true, "continue": true, "declare": true, "typeset": true, "local": true,
	"let": true, "alias": true, "enable": true,
	// reserved words
	"if": true, "then": true, "else": true, "elif": true, "fi": true, "case": true, "esac": true, "for": true,
	"while": true, "until": true, "do": true, "done": true, "function": true, "select": true, "time": true,
	"coproc": true, "in": true,
}

func isStem(s string) bool {
	if s == "" || len(s) > maxName || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '-' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func isFuncName(s string) bool {
	if s == "" || len(s) > maxName || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// Start resolves file.sh, launches the worker, sources the file and checks
// the function exists.
func (a *adapter) Start(ctx context.Context, spec functionruntime.WorkerSpec) (functionruntime.Worker, error) {
	stem, fn, err := splitHandler(spec.Handler)
	if err != nil {
		return nil, err
	}
	if a.lookErr != nil {
		return nil, fmt.Errorf("bash interpreter %q: %w", a.opts.Interpreter, a.lookErr)
	}
	if a.ctxErr != nil {
		return nil, fmt.Errorf("fnbridge command %q (bash Options.ContextCommand): %w", a.opts.ContextCommand, a.ctxErr)
	}
	l := &launcher{opts: a.opts, exe: a.exe, ctxCmd: a.ctxCmd, spec: spec, file: stem + ".sh", function: fn}
	first, err := l.start(ctx)
	if err != nil {
		return nil, err
	}
	sup := proc.NewSupervisor(proc.SupervisorConfig{
		Name:         "bash worker",
		Start:        l.start,
		Grace:        a.opts.Grace,
		StartTimeout: spec.StartTimeout,
		ErrCrashed:   functionruntime.ErrWorkerCrashed,
		ErrFailed:    functionruntime.ErrWorkerFailed,
	}, first)
	return &worker{sup: sup}, nil
}

// resolveFile returns the real path of name inside dir, refusing anything
// that resolves outside dir (through '..' or symlinks) or is not a regular
// file.
func resolveFile(dir, name string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("working directory %q is not absolute", dir)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	if st, err := os.Stat(realDir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("working directory %q is not a directory", dir)
	}
	realFile, err := filepath.EvalSymlinks(filepath.Join(realDir, name))
	if err != nil {
		if os.IsNotExist(err) {
			return "", fmt.Errorf("handler file %s not found in %s", name, dir)
		}
		return "", fmt.Errorf("handler file %s: %w", name, err)
	}
	rel, err := filepath.Rel(realDir, realFile)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("handler file %s resolves to %s, outside the working directory %s", name, realFile, realDir)
	}
	st, err := os.Stat(realFile)
	if err != nil {
		return "", fmt.Errorf("handler file %s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("handler file %s is not a regular file", name)
	}
	return realFile, nil
}
