// Package functionruntime owns the FunctionRuntime side of fnbridge: the
// executor.v1.FunctionRuntime gRPC server (registration table, states,
// fencing, digests, bounds), its in-process client, and the Adapter
// interface that the built-in python and bash adapters implement (package
// kinds lists them). It knows nothing about Restate.
//
// # Server
//
// NewServer builds a Server for one Adapter: one server serves one runtime
// kind, because RegisterFunctionRequest names no runtime. NewGRPCServer
// wraps it with gRPC health and reflection, Listen opens "host:port" or
// "unix:///path" listeners, and NewLocalClient calls a Server in-process
// with the same status errors a remote client gets.
//
// # Trust
//
// The server authenticates no caller; the contract makes it Pod-local.
// Listen creates a Unix socket with UnixSocketMode (0600) from the start:
// it binds inside a fresh 0700 directory next to the path, restricts the
// socket there and links it into place, so there is no moment in which the
// socket exists at its path with the umask's mode, and no process-wide
// umask change. The path must fit a socket address, with room for that
// directory (about 14 bytes); abstract sockets are refused. WarnIfExposed
// logs a warning for a TCP address that is not loopback. AllowedRoots
// (a grpc.ServerOption) refuses a network RegisterFunction whose
// working_dir, symlinks resolved, is not within one of its directories,
// and runs an accepted one in the resolved path; without it (the default)
// any directory is accepted. In-process callers are trusted.
//
// # Registration
//
// A registration is identified by Run UID and registration attempt, and is
// named afterwards by an opaque ID ("reg_" followed by a ULID) that is bound
// to both. States: REGISTERING → READY or FAILED; DRAINING while it is
// unregistered, superseded or shut down. RegisterFunction waits for
// initialization (at most Limits.RegistrationTimeout) and returns READY or
// FAILED; a FAILED registration stays in the table, readable through
// FunctionStatus with its fatal_error (at most 1 KiB of valid UTF-8, cut at
// a rune boundary and ending in "…"), until it is unregistered or superseded.
// Only READY and FAILED registrations answer FunctionStatus; REGISTERING and
// DRAINING ones, and stale IDs, get FailedPrecondition.
//
// Request validation (InvalidArgument, the message and ErrorInfo metadata
// "field" name the field):
//   - run_uid: 1 to 128 bytes of [A-Za-z0-9._-], starting with a letter or
//     digit.
//   - registration_attempt: 1 or more.
//   - working_dir: absolute, existing directory; within an allowed root
//     when the gRPC server has AllowedRoots.
//   - handler: non-empty, at most 256 bytes, then Adapter.ValidateHandler.
//   - env: names match [A-Za-z_][A-Za-z0-9_]* (at most 256 bytes) and do not
//     start with FNBRIDGE_ (reserved for the adapters, case-insensitively),
//     nor are one that changes how the interpreter or the dynamic loader
//     starts or runs the worker (BASH_ENV, ENV, SHELLOPTS, BASHOPTS,
//     BASH_XTRACEFD, POSIXLY_CORRECT, TMOUT, FUNCNEST, BASH_COMPAT,
//     GLIBC_TUNABLES, GCONV_PATH, LD_*: see
//     EnvNameProblem); values have no NUL; at most 1024 variables and 128 KiB in total,
//     counted as len(name)+len(value)+2 each.
//   - idle_timeout_seconds: 0 to 7 days. runtimed enforces idle timeouts
//     from last_activity_unix_nano; the server uses it only to bound how
//     long it keeps an orphan (below).
//   - registration_digest: "sha256:" and 64 lowercase hex digits.
//
// # Invocation
//
// One invocation runs at a time per registration and nothing is queued
// (ResourceExhausted). invocation_id is at most 128 bytes of UTF-8 without
// control characters; an empty one is replaced by a ULID. timeout_millis 0
// means Limits.DefaultTimeout (60 s); larger values are capped at
// Limits.MaxTimeout (15 min); negative is InvalidArgument. An empty
// content_type means application/json. input larger than
// Limits.MaxInputBytes (6 MiB) is InvalidArgument with reason
// INPUT_TOO_LARGE, not ResourceExhausted, because ResourceExhausted means
// "retry later" and the same payload will never fit.
//
// Results are bounded too: output at most Limits.MaxOutputBytes (6 MiB), and
// outputs — whose bounds docs/spec/function-runtime-server-contract.md ties
// to Run.status.outputs without stating them — follow Kubernetes-like
// bounds: at most 32 entries; keys of 1 to 63 bytes matching
// [A-Za-z_][A-Za-z0-9_.-]*; values of valid UTF-8 of at most 4 KiB; at most
// 16 KiB for all keys and values together. A result
// that breaks them fails with codes.Unknown, reason OUTPUTS_INVALID, which
// Classify treats as terminal.
//
// # Errors
//
// Every error is a gRPC status; those this package decides on carry a
// google.rpc.ErrorInfo with Domain ErrorDomain and one of the Reason*
// constants. Classify turns any error into an ErrorClass:
//
//	handler error            Unknown           HANDLER_ERROR           retryable
//	terminal handler error   Unknown           HANDLER_TERMINAL_ERROR  terminal
//	invalid result           Unknown           OUTPUTS_INVALID         terminal
//	worker crashed           Internal          WORKER_CRASHED          retryable
//	invocation timeout       DeadlineExceeded  INVOCATION_TIMEOUT      retryable
//	registration torn down   Aborted           INVOCATION_ABORTED      retryable
//	busy                     ResourceExhausted REGISTRATION_BUSY       retryable
//	stale/draining/unready   FailedPrecondition REGISTRATION_STALE/_DRAINING/_NOT_READY
//	worker restart failed    FailedPrecondition REGISTRATION_FAILED    (registration is FAILED)
//	unknown Run UID          NotFound          REGISTRATION_NOT_FOUND
//	lower attempt            FailedPrecondition ATTEMPT_SUPERSEDED
//	same attempt, new digest AlreadyExists     DIGEST_MISMATCH
//	same attempt, new fields AlreadyExists     REGISTRATION_MISMATCH
//
// Handler errors carry metadata error_type, exit_code and terminal; a
// terminal one whose handler gave a code (a Python TerminalError's code)
// also terminal_code, which the bridge makes the invocation's failure
// code (TerminalCode reads it).
//
// # Unregistration and shutdown
//
// UnregisterFunction drains for at most drain_timeout_millis (0 means
// Limits.DefaultDrainTimeout, 30 s; capped at 15 min) unless
// cancel_in_flight is set, then cancels the in-flight invocation (its caller
// gets Aborted), closes the worker and removes the registration.
// Server.Shutdown does the same for every registration and refuses new
// ones. A request that finds the registration already draining (a second
// Unregister, Shutdown, a higher attempt) shortens that drain when it asks
// for less waiting: cancel_in_flight or an earlier drain deadline takes
// effect at once, and Shutdown cancels every in-flight invocation when its
// context ends.
//
// # Orphans
//
// Idle unregistration is the caller's: runtimed (the bridge's pool) polls
// FunctionStatus and unregisters what it no longer wants. A caller killed
// outright never does, so with Options.OrphanGrace (bridge runtime serve's
// --orphan-grace, default DefaultOrphanGrace) the server unregisters a
// READY or FAILED registration with nothing in flight once it has had no
// activity and no FunctionStatus naming it for its idle_timeout_seconds
// plus the grace, and logs why at info; its caller, if alive after all,
// gets NotFound and registers again. A live caller's polls keep
// registrations it keeps past their idle timeout (min_warm). A call with a
// stale ID is not contact. In-process servers (the bridge's embedded
// runtime) leave OrphanGrace zero: their caller lives as long as they do.
//
// # Logs
//
// Every log line about a registration carries run_uid (and
// registration_id); lines about one invocation also carry invocation_id.
// Inputs and outputs are never logged.
package functionruntime
