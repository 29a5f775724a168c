package functionruntime

import (
	"context"
	"errors"
	"fmt"

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
}

// Worker is one registration's warm process. The server calls Invoke at most
// once at a time.
type Worker interface {
	// Invoke runs the handler once. ctx carries the invocation deadline and
	// cancellation; when ctx ends first the worker's process group is killed
	// (TERM, then KILL after a short grace), Invoke returns ctx.Err(), and
	// the next Invoke transparently starts a fresh worker. A restart that
	// fails returns an error wrapping ErrWorkerFailed.
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

// HandlerError is a failure raised by the handler itself (a Python exception,
// a non-zero Bash status). Terminal failures must not be retried.
type HandlerError struct {
	Terminal bool   // handler asked not to be retried
	Type     string // exception class name, or "exit" for Bash
	Message  string
	ExitCode int // Bash status, 0 for Python
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
