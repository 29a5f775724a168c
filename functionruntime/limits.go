package functionruntime

import "time"

// Limits bounds what one Server accepts. The zero value of any field means
// its Default* constant; DefaultLimits documents every value. Bounds exist so
// that one misbehaving caller or handler cannot exhaust the Runtime Pod or
// produce responses the caller cannot record.
type Limits struct {
	// MaxInputBytes bounds InvokeFunctionRequest.input. A larger input is
	// rejected with InvalidArgument (reason INPUT_TOO_LARGE): retrying the
	// same payload can never succeed, so it must not look like the
	// retryable ResourceExhausted.
	MaxInputBytes int
	// MaxOutputBytes bounds the handler's output bytes. A larger output fails
	// the invocation with reason OUTPUTS_INVALID.
	MaxOutputBytes int
	// DefaultTimeout is used when timeout_millis is 0: "Zero means the
	// bounded gateway default, never unlimited runtime work."
	DefaultTimeout time.Duration
	// MaxTimeout caps timeout_millis; larger values are lowered to it.
	MaxTimeout time.Duration
	// RegistrationTimeout bounds Adapter.Start (import or source of the
	// handler). A Start that takes longer makes the registration FAILED.
	RegistrationTimeout time.Duration
	// DefaultDrainTimeout is used by UnregisterFunction when
	// drain_timeout_millis is 0 and cancel_in_flight is false.
	DefaultDrainTimeout time.Duration
	// MaxDrainTimeout caps drain_timeout_millis.
	MaxDrainTimeout time.Duration
	// MaxIdleTimeout bounds idle_timeout_seconds. The server only stores and
	// reports activity; runtimed enforces the idle timeout.
	MaxIdleTimeout time.Duration
	// MaxEnvVars bounds the number of registration environment variables.
	MaxEnvVars int
	// MaxEnvBytes bounds the registration environment, counted as the sum
	// of len(name)+len(value)+2 over all variables (the "NAME=value\0" form
	// a process receives).
	MaxEnvBytes int
	// Outputs bounds InvokeFunctionResponse.outputs.
	Outputs OutputLimits
}

// OutputLimits bounds the outputs map of one invocation.
// docs/spec/function-runtime-server-contract.md says outputs "follow the
// key, count, and value bounds used by Run.status.outputs"; those are not
// published, so these follow Kubernetes conventions (a key is at most a DNS
// label long; values are small strings kept in an object's status).
type OutputLimits struct {
	// MaxCount bounds the number of outputs.
	MaxCount int
	// MaxKeyBytes bounds one key. Keys match [A-Za-z_][A-Za-z0-9_.-]*.
	MaxKeyBytes int
	// MaxValueBytes bounds one value; values must be valid UTF-8.
	MaxValueBytes int
	// MaxTotalBytes bounds the sum of all key and value lengths.
	MaxTotalBytes int
}

// Default limits. They are exported so callers (the bridge, the CLI) can
// show or derive from them.
const (
	DefaultMaxInputBytes       = 6 << 20 // 6 MiB, the AWS Lambda synchronous payload bound
	DefaultMaxOutputBytes      = 6 << 20
	DefaultInvokeTimeout       = 60 * time.Second
	DefaultMaxInvokeTimeout    = 15 * time.Minute
	DefaultRegistrationTimeout = 60 * time.Second
	DefaultDrainTimeout        = 30 * time.Second
	DefaultMaxDrainTimeout     = 15 * time.Minute
	DefaultMaxIdleTimeout      = 7 * 24 * time.Hour
	DefaultMaxEnvVars          = 1024
	DefaultMaxEnvBytes         = 128 << 10 // 128 KiB; Linux caps one string at 128 KiB
	DefaultMaxOutputs          = 32
	DefaultMaxOutputKeyBytes   = 63
	DefaultMaxOutputValueBytes = 4 << 10  // 4 KiB
	DefaultMaxOutputsBytes     = 16 << 10 // 16 KiB

	// MaxFatalErrorBytes bounds FunctionStatusResponse.fatal_error: it is
	// "bounded diagnostic text, not logs".
	MaxFatalErrorBytes = 1 << 10
	// MaxInvocationIDBytes is the bound on invocation_id that
	// docs/spec/function-runtime-server-contract.md sets.
	MaxInvocationIDBytes = 128
	// MaxRunUIDBytes bounds run_uid; a Kubernetes UID is 36 bytes.
	MaxRunUIDBytes = 128
	// MaxHandlerBytes bounds the handler string before the adapter sees it.
	MaxHandlerBytes = 256
	// MaxWorkingDirBytes bounds working_dir (Linux PATH_MAX).
	MaxWorkingDirBytes = 4096
	// MaxContentTypeBytes bounds content_type.
	MaxContentTypeBytes = 256
	// MaxEnvNameBytes bounds one environment variable name.
	MaxEnvNameBytes = 256
)

// DefaultLimits returns the limits a Server uses for every zero field.
func DefaultLimits() Limits {
	return Limits{
		MaxInputBytes:       DefaultMaxInputBytes,
		MaxOutputBytes:      DefaultMaxOutputBytes,
		DefaultTimeout:      DefaultInvokeTimeout,
		MaxTimeout:          DefaultMaxInvokeTimeout,
		RegistrationTimeout: DefaultRegistrationTimeout,
		DefaultDrainTimeout: DefaultDrainTimeout,
		MaxDrainTimeout:     DefaultMaxDrainTimeout,
		MaxIdleTimeout:      DefaultMaxIdleTimeout,
		MaxEnvVars:          DefaultMaxEnvVars,
		MaxEnvBytes:         DefaultMaxEnvBytes,
		Outputs: OutputLimits{
			MaxCount:      DefaultMaxOutputs,
			MaxKeyBytes:   DefaultMaxOutputKeyBytes,
			MaxValueBytes: DefaultMaxOutputValueBytes,
			MaxTotalBytes: DefaultMaxOutputsBytes,
		},
	}
}

// withDefaults fills every zero (or negative) field from DefaultLimits and
// keeps each default no larger than its cap.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	pickInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pickDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	pickInt(&l.MaxInputBytes, d.MaxInputBytes)
	pickInt(&l.MaxOutputBytes, d.MaxOutputBytes)
	pickDur(&l.DefaultTimeout, d.DefaultTimeout)
	pickDur(&l.MaxTimeout, d.MaxTimeout)
	pickDur(&l.RegistrationTimeout, d.RegistrationTimeout)
	pickDur(&l.DefaultDrainTimeout, d.DefaultDrainTimeout)
	pickDur(&l.MaxDrainTimeout, d.MaxDrainTimeout)
	pickDur(&l.MaxIdleTimeout, d.MaxIdleTimeout)
	pickInt(&l.MaxEnvVars, d.MaxEnvVars)
	pickInt(&l.MaxEnvBytes, d.MaxEnvBytes)
	pickInt(&l.Outputs.MaxCount, d.Outputs.MaxCount)
	pickInt(&l.Outputs.MaxKeyBytes, d.Outputs.MaxKeyBytes)
	pickInt(&l.Outputs.MaxValueBytes, d.Outputs.MaxValueBytes)
	pickInt(&l.Outputs.MaxTotalBytes, d.Outputs.MaxTotalBytes)
	if l.DefaultTimeout > l.MaxTimeout {
		l.DefaultTimeout = l.MaxTimeout
	}
	if l.DefaultDrainTimeout > l.MaxDrainTimeout {
		l.DefaultDrainTimeout = l.MaxDrainTimeout
	}
	return l
}

// invokeTimeout turns timeout_millis into the bound of one invocation.
func (l Limits) invokeTimeout(millis int64) time.Duration {
	return requestedTimeout(millis, l.DefaultTimeout, l.MaxTimeout)
}

// drainTimeout turns drain_timeout_millis into the bound of a graceful drain.
func (l Limits) drainTimeout(millis int64) time.Duration {
	return requestedTimeout(millis, l.DefaultDrainTimeout, l.MaxDrainTimeout)
}

// requestedTimeout reads a request's *_millis field: 0 asks for def, and
// anything above max is capped at max (negative values were refused by
// validation).
func requestedTimeout(millis int64, def, max time.Duration) time.Duration {
	if millis == 0 {
		return def
	}
	if millis > max.Milliseconds() {
		return max
	}
	return time.Duration(millis) * time.Millisecond
}

// The smallest worker limits any built-in runtime's worker starts with;
// the configuration refuses less. Measured on Linux 6.18 with CPython 3.9
// to 3.13 and bash 5.2; [MinWorkerLimits] has each kind's own.
const (
	// MinWorkerOpenFiles is a Python worker's stdio and its three pipes,
	// moved to 6 and up while it still holds 3 to 5.
	MinWorkerOpenFiles = 9
	// MinWorkerProcesses is a Python worker and its guardian.
	MinWorkerProcesses = 2
	// MinWorkerMemory is what a Bash worker needs under RLIMIT_DATA
	// alone (1.75 MiB in a memory cgroup); a Python worker needs 8 to 13
	// MiB, as its version and build go.
	MinWorkerMemory = 1 << 20
)

// MinWorkerLimits returns the fewest open files and processes a worker of
// a built-in runtime kind starts with (nothing for another kind); a
// registration asking for less is refused. Both are fixed by how the
// worker starts, unlike memory, which depends on the interpreter's build.
func MinWorkerLimits(kind string) WorkerLimits {
	switch kind {
	case "python":
		return WorkerLimits{OpenFiles: MinWorkerOpenFiles, Processes: MinWorkerProcesses}
	case "bash":
		// bash puts the descriptors it opens at 10 and up; the worker
		// runs a guardian and a subshell per invocation beside itself.
		return WorkerLimits{OpenFiles: 14, Processes: 3}
	}
	return WorkerLimits{}
}
