package functionruntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Adapter is one built-in runtime kind (python, bash; package kinds lists
// them). The server owns the registration table; an adapter owns worker
// processes and nothing else.
type Adapter interface {
	// Kind is the runtime kind this adapter serves: its name in package
	// kinds, "python" or "bash".
	Kind() string
	// ValidateHandler checks the handler string's syntax (and, for Bash,
	// that it cannot name a file outside the working directory). It runs
	// before any process starts; its error becomes InvalidArgument.
	ValidateHandler(handler string) error
	// Start launches the long-lived worker for one registration and performs
	// the import (Python) or source (Bash) there. An error is a permanent
	// initialization failure: the registration becomes FAILED and the
	// error text (bounded by the server) is its fatal_error.
	Start(ctx context.Context, spec WorkerSpec) (Worker, error)
}

// WorkerSpec is what an adapter needs to start a worker.
type WorkerSpec struct {
	RunUID  string
	Dir     string            // absolute, existing working directory
	Handler string            // already validated by ValidateHandler
	Env     map[string]string // registration env; the adapter adds only PATH, LANG, HOME
	Logger  zerolog.Logger    // carries run_uid; handler logs go here
	Limits  WorkerLimits      // applied to every process of the worker
	// Interpreter is the interpreter the registration named
	// ([InterpreterMetadata]); empty: the adapter's own choice.
	Interpreter string
	// Inline runs the registration's invocations one after another in the
	// worker's own shell rather than each in a subshell of its own
	// ([SubshellMetadata] "false"; only for an [InlineRunner] adapter).
	Inline bool
	// StartTimeout bounds a restart of the worker after it died or was
	// killed (Limits.RegistrationTimeout, as the first start); 0: none.
	StartTimeout time.Duration
	// DirInfo is Dir as the server found it at registration (nil: not
	// pinned). Every start of the worker, restarts included, checks it
	// with CheckDir.
	DirInfo os.FileInfo
}

// CheckDir refuses to start a worker in a Dir that is no longer the
// directory found at registration: one replaced since, by another
// directory or by a symlink to one (which --allowed-root checked only at
// registration). A worker restarted after a crash runs where the
// registration was accepted, or not at all.
func (s WorkerSpec) CheckDir() error {
	if s.DirInfo == nil {
		return nil
	}
	fi, err := os.Stat(s.Dir)
	if err != nil {
		return fmt.Errorf("working directory %s: %w", s.Dir, err)
	}
	if !os.SameFile(fi, s.DirInfo) {
		return fmt.Errorf("working directory %s is no longer the directory registered there (it was replaced since, or became a symlink): register again", s.Dir)
	}
	return nil
}

// Worker is one registration's warm process. The server calls Invoke at most
// once at a time.
type Worker interface {
	// Invoke runs the handler once. ctx carries the invocation deadline and
	// cancellation; when ctx ends first the worker's process group is killed
	// (TERM, then KILL after a short grace), Invoke returns ctx.Err(), and
	// a fresh worker starts at once (bounded by WorkerSpec.StartTimeout);
	// the next Invoke waits for it. A restart that fails returns an error
	// wrapping ErrWorkerFailed.
	Invoke(ctx context.Context, inv Invocation) (Result, error)
	// Close stops the worker's process group and reaps it.
	Close() error
}

// Invocation is one call of the handler.
type Invocation struct {
	ID          string
	Input       []byte
	ContentType string
	Logger      zerolog.Logger // carries run_uid and invocation_id
	// Context is the durable-steps context endpoint of this attempt (from
	// the InvokeFunction metadata); nil for a plain function.
	Context *StepContext
	// Env is the per-invocation environment (from the InvokeFunction
	// metadata [MetadataEnv]; names from [InvocationEnvNames]), exported
	// for this invocation only; nil when there is none.
	Env map[string]string
}

// Result is a handler's successful return.
type Result struct {
	Output      []byte
	ContentType string
	Outputs     map[string]string
}

// ErrWorkerFailed marks a worker that could not be (re)started: the
// registration becomes FAILED.
var ErrWorkerFailed = errors.New("worker failed")

// InvalidOutputsType is the HandlerError.Type an adapter gives a result it
// cannot pass on (a bad FNBRIDGE_OUTPUTS line, an output Python cannot
// encode): the server reports it as its own check of the result does,
// reason OUTPUTS_INVALID, so a caller sees one reason for one kind of
// failure whichever side found it.
const InvalidOutputsType = "InvalidOutputs"

// OutputTooLargeType and UnserializableOutputType are the HandlerError
// types of an output over an adapter's own bound and of a Python return
// value JSON cannot encode: invalid results too, reported as
// InvalidOutputsType is.
const (
	OutputTooLargeType       = "OutputTooLarge"
	UnserializableOutputType = "UnserializableOutput"
)

// HandlerError is a failure raised by the handler itself (a Python exception,
// a non-zero Bash status). Terminal failures must not be retried.
type HandlerError struct {
	Terminal bool   // handler asked not to be retried
	Type     string // exception class name, or "exit" for Bash
	Message  string
	ExitCode int // Bash status, 0 for Python
	// Code is a terminal failure's code as the handler gave it (a Python
	// TerminalError's code, 1..65535); 0 when it gave none (500).
	Code int
}

// HandlerFailure lets the worker supervisor recognise a resource limit
// that surfaced as a handler error (a MemoryError, a status of 128+SIGXFSZ).
func (e *HandlerError) HandlerFailure() (typ, message string, exitCode int) {
	return e.Type, e.Message, e.ExitCode
}

func (e *HandlerError) Error() string {
	kind := "handler failed"
	if e.Terminal {
		kind = "handler failed terminally"
	}
	if e.Type != "" {
		return fmt.Sprintf("%s: %s: %s", kind, e.Type, e.Message)
	}
	return fmt.Sprintf("%s: %s", kind, e.Message)
}

// ErrWorkerCrashed marks a worker that died during an invocation (killed,
// crashed interpreter). The invocation fails retryably; the next one gets a
// fresh worker.
var ErrWorkerCrashed = errors.New("worker crashed")

// WorkerLimits bound every worker of a registration; a zero field is
// unlimited. Memory and FileSize are bytes, Processes and OpenFiles counts.
// They reach the server out of band, as gRPC metadata
// [WorkerLimitsMetadata] on RegisterFunction, because the contract's
// messages carry no such field; a registration without it gets
// [DefaultWorkerLimits].
type WorkerLimits struct {
	Memory    int64
	Processes int64
	OpenFiles int64
	FileSize  int64
	CPU       time.Duration
}

// WorkerLimitsMetadata is the RegisterFunction metadata key carrying
// [WorkerLimits.Encode].
const WorkerLimitsMetadata = "fnbridge-worker-limits"

// Default worker limits. They keep one handler from exhausting the host
// without getting in the way of ordinary functions: 1 GiB of memory and
// written file, 256 processes (far above what a handler forks, far below
// what takes a host down) and 1024 descriptors, the usual soft default.
// CPU is unlimited: RLIMIT_CPU counts a process's whole life, and a warm
// worker serves many invocations, each already bounded by its timeout.
const (
	DefaultWorkerMemory    = 1 << 30
	DefaultWorkerProcesses = 256
	DefaultWorkerOpenFiles = 1024
	DefaultWorkerFileSize  = 1 << 30
	DefaultWorkerCPU       = 0
)

// DefaultWorkerLimits returns the limits of a registration that sets none.
func DefaultWorkerLimits() WorkerLimits {
	return WorkerLimits{
		Memory:    DefaultWorkerMemory,
		Processes: DefaultWorkerProcesses,
		OpenFiles: DefaultWorkerOpenFiles,
		FileSize:  DefaultWorkerFileSize,
		CPU:       DefaultWorkerCPU,
	}
}

// Encode is the metadata form: "memory=N,processes=N,open_files=N,file_size=N,cpu=MILLIS".
func (l WorkerLimits) Encode() string {
	return fmt.Sprintf("memory=%d,processes=%d,open_files=%d,file_size=%d,cpu=%d",
		l.Memory, l.Processes, l.OpenFiles, l.FileSize, l.CPU.Milliseconds())
}

// ParseWorkerLimits reads [WorkerLimits.Encode]'s form; every key must be
// present once, so a typo cannot silently lift a limit.
func ParseWorkerLimits(s string) (WorkerLimits, error) {
	var l WorkerLimits
	fields := map[string]*int64{"memory": &l.Memory, "processes": &l.Processes, "open_files": &l.OpenFiles, "file_size": &l.FileSize}
	var cpu int64
	fields["cpu"] = &cpu
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		dst, ok := fields[k]
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || seen[k] || err != nil || n < 0 {
			return WorkerLimits{}, fmt.Errorf("%q is not a limit (want %s)", kv, DefaultWorkerLimits().Encode())
		}
		seen[k] = true
		*dst = n
	}
	if len(seen) != len(fields) {
		return WorkerLimits{}, fmt.Errorf("%q lacks a limit (want every key of %s)", s, DefaultWorkerLimits().Encode())
	}
	l.CPU = time.Duration(cpu) * time.Millisecond
	return l, nil
}

// Describe names the limit (a config key) with its value for messages.
func (l WorkerLimits) Describe(limit string) string {
	switch limit {
	case "memory":
		return "memory limit of " + FormatSize(l.Memory)
	case "file_size":
		return "file_size limit of " + FormatSize(l.FileSize)
	case "processes":
		return fmt.Sprintf("processes limit of %d", l.Processes)
	case "open_files":
		return fmt.Sprintf("open_files limit of %d", l.OpenFiles)
	case "cpu":
		return "cpu limit of " + l.CPU.String()
	}
	return limit + " limit"
}

// FormatSize writes n bytes the way a configuration would ("512Mi").
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
