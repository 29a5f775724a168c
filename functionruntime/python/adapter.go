package python

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
)

//go:embed bootstrap.py
var bootstrap string

// bootstrapStub is the worker's -c code: it runs the bootstrap file named
// by its first argument as -c code runs, in __main__ with no __file__
// (multiprocessing's spawn would re-run a __main__ that has one in its
// children), under the name "<string>" its tracebacks are filtered by, and
// with sys.argv as the bootstrap expects it. It binds no name in __main__.
const bootstrapStub = `exec(compile(open(__import__("sys").argv.pop(1), "rb").read(), "<string>", "exec"))`

// Kind is the runtime kind this adapter serves.
const Kind = "python"

// DefaultMaxOutput bounds a function's JSON output when Options.MaxOutput
// is zero.
const DefaultMaxOutput = 16 << 20

// maxHandler bounds the handler string: the FunctionRuntime server's own
// bound, so what the adapter accepts is what a registration may carry.
const maxHandler = functionruntime.MaxHandlerBytes

// Options configures the adapter. The zero value is ready to use.
type Options struct {
	// Interpreter is the python executable, a name looked up in the
	// server's PATH when New runs, or a path. Default "python3".
	Interpreter string
	// Grace is how long a worker's process group gets between SIGTERM and
	// SIGKILL. Default 2s.
	Grace time.Duration
	// MaxLogLine bounds one log line in bytes; the rest is dropped.
	// Default 16 KiB.
	MaxLogLine int
	// MaxOutput bounds the JSON-encoded return value in bytes.
	// Default 16 MiB.
	MaxOutput int
	// NoSubreaper keeps the server process from becoming a child subreaper
	// (see package proc). Orphans of handlers are then reaped by init.
	NoSubreaper bool
}

type adapter struct {
	opts    Options
	lookErr error  // from looking Interpreter up at New
	interp  string // the interpreter found at New
}

// New returns the Python adapter. The interpreter is looked up now; a
// missing interpreter is reported by Start.
func New(opts Options) functionruntime.Adapter {
	// Options has proc.Settings's fields, so both adapters default alike.
	opts = Options(proc.Settings(opts).WithDefaults("python3", DefaultMaxOutput))
	a := &adapter{opts: opts}
	a.interp, a.lookErr = proc.LookInterpreter(opts.Interpreter)
	return a
}

// Kind returns "python".
func (a *adapter) Kind() string { return Kind }

// ValidateHandler accepts module.function where every dot-separated part is
// an ASCII Python identifier and there are at least two parts.
func (a *adapter) ValidateHandler(handler string) error {
	return ValidateHandler(handler)
}

// ValidateHandler checks a handler string as the adapter's ValidateHandler
// does, without an adapter: configuration checks use it so they never
// accept a handler the runtime would refuse.
func ValidateHandler(handler string) error {
	const want = `want module.function, e.g. "handler.main" (the module may be dotted: "pkg.sub.handler.main")`
	if handler == "" {
		return fmt.Errorf("python handler is empty: %s", want)
	}
	if len(handler) > maxHandler {
		return fmt.Errorf("python handler is %d bytes, longer than %d", len(handler), maxHandler)
	}
	if strings.ContainsRune(handler, '/') {
		return fmt.Errorf("python handler %q is a path: name the module with dots, relative to the registration's working directory, without .py: %s", handler, want)
	}
	parts := strings.Split(handler, ".")
	if len(parts) < 2 {
		return fmt.Errorf("python handler %q has no function part: %s", handler, want)
	}
	for _, p := range parts {
		if !isIdentifier(p) {
			return fmt.Errorf("python handler %q: %q is not a Python identifier (ASCII letters, digits, '_', not starting with a digit): %s", handler, p, want)
		}
	}
	return nil
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Start launches the worker and imports the handler module in it.
func (a *adapter) Start(ctx context.Context, spec functionruntime.WorkerSpec) (functionruntime.Worker, error) {
	if err := ValidateHandler(spec.Handler); err != nil {
		return nil, err
	}
	if err := checkDir(spec.Dir); err != nil {
		return nil, err
	}
	it, err := a.interpreter(ctx, spec)
	if err != nil {
		return nil, err
	}
	spec.Logger.Info().Str("interpreter", it.Path).Str("python_version", it.Version).Str("chosen_by", it.ChosenBy).
		Str("virtual_env", it.VirtualEnv).Msg("python interpreter")
	i := strings.LastIndexByte(spec.Handler, '.')
	l := &launcher{opts: a.opts, interp: it, spec: spec, module: spec.Handler[:i], function: spec.Handler[i+1:]}
	first, err := l.start(ctx)
	if err != nil {
		return nil, err
	}
	sup := proc.NewSupervisor(proc.SupervisorConfig{
		Name:         "python worker",
		Start:        l.start,
		Grace:        a.opts.Grace,
		StartTimeout: spec.StartTimeout,
		ErrCrashed:   functionruntime.ErrWorkerCrashed,
		ErrFailed:    functionruntime.ErrWorkerFailed,
	}, first)
	return &worker{sup: sup, maxOutput: a.opts.MaxOutput}, nil
}

func checkDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("working directory %q is not absolute", dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("working directory %q is not a directory", dir)
	}
	return nil
}

// interpreter resolves the registration's interpreter (ResolveInterpreter)
// with the adapter's default as the fallback.
func (a *adapter) interpreter(ctx context.Context, spec functionruntime.WorkerSpec) (Interpreter, error) {
	fallback := a.interp
	if a.lookErr != nil {
		fallback = ""
	}
	it, err := ResolveInterpreter(ctx, spec.Dir, spec.Interpreter, fallback)
	if errors.Is(err, errNoFallback) {
		return Interpreter{}, fmt.Errorf("python interpreter %q (%s, as dir has no %s): %w", a.opts.Interpreter, ChosenByPath, VenvInterpreter, a.lookErr)
	}
	return it, err
}

// CheckInterpreter accepts what a registration may name as its
// interpreter (see the package function).
func (a *adapter) CheckInterpreter(interpreter string) error { return CheckInterpreter(interpreter) }
