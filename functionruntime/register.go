package functionruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// RegisterFunction creates or resumes the registration of one Run UID and
// registration attempt.
//
// It waits until initialization has finished (bounded by
// Limits.RegistrationTimeout) and returns the resulting state: READY, or
// FAILED, whose fatal_error FunctionStatus then reads. Initialization does
// not depend on the RPC's context: when the caller gives up first it gets
// Canceled or DeadlineExceeded, initialization goes on, and retrying the
// same request picks up the same registration ("Retrying an uncertain
// Pod-local RegisterFunction RPC for the same registration attempt is
// idempotent"). Only an identical request is a retry: one that repeats the
// Run UID, attempt and digest with any other field or registration
// metadata is AlreadyExists and changes nothing.
//
// A repeat that finds the registration DRAINING (being unregistered or
// superseded) returns it with state DRAINING; the caller registers again
// once it is gone, or with a higher attempt.
func (s *Server) RegisterFunction(ctx context.Context, req *executorv1.RegisterFunctionRequest) (*executorv1.RegisterFunctionResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextStatus(err)
	}
	p, err := validateRegister(req, s.limits)
	if err != nil {
		return nil, err
	}
	if err := checkKind(ctx, s.adapter.Kind()); err != nil {
		return nil, err
	}
	if err := checkWorkingDir(p.dir); err != nil {
		return nil, err
	}
	if err := s.adapter.ValidateHandler(p.handler); err != nil {
		return nil, invalidArgument("handler", "%v", err)
	}
	limits, err := workerLimitsOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkLeastWorkerLimits(s.adapter.Kind(), limits); err != nil {
		return nil, err
	}
	if p.interpreter, err = interpreterOf(ctx, s.adapter); err != nil {
		return nil, err
	}
	if p.inline, err = inlineOf(ctx, s.adapter); err != nil {
		return nil, err
	}
	LogWorkerLimitMechanisms(s.log)
	procs, mem := proc.Enforced()
	warnUnenforced(s.log, p.handler, p.dir, limits, procs, mem)

	reg, err := s.admit(p, limits)
	if err != nil {
		return nil, err
	}
	select {
	case <-reg.initDone:
	case <-ctx.Done():
		return nil, contextStatus(ctx.Err())
	}
	s.mu.Lock()
	state := reg.state
	s.mu.Unlock()
	return &executorv1.RegisterFunctionResponse{Registration: reg.ref(), State: state}, nil
}

// admit applies the registration fence under the lock and returns the
// registration the request resolves to, starting initialization when it is
// new. Only one caller can create a given attempt's registration, so
// concurrent duplicate calls never start two workers.
func (s *Server) admit(p registerParams, limits WorkerLimits) (*registration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, statusError(codes.Unavailable, ReasonShuttingDown, map[string]string{"run_uid": p.runUID},
			"the Runtime Server is shutting down and accepts no registrations")
	}
	prev := s.regs[p.runUID]
	if prev != nil {
		switch {
		case p.attempt == prev.attempt && p.digest != prev.digest:
			return nil, statusError(codes.AlreadyExists, ReasonDigestMismatch,
				map[string]string{"run_uid": p.runUID, "registration_attempt": fmt.Sprint(p.attempt)},
				"run_uid %s attempt %d is already registered with a different registration_digest; the registration was not replaced",
				p.runUID, p.attempt)
		case p.attempt == prev.attempt:
			// The contract returns the current registration for the same
			// Run UID, attempt and digest; we do only for an identical
			// request (docs/ARCHITECTURE.md says why): anyone can compute
			// the digest and it leaves out working_dir, so otherwise a
			// caller that registered first with its own handler would
			// have the Run UID's owner invoke that handler.
			if fields, words := prev.differences(p, limits); len(fields) > 0 {
				return nil, statusError(codes.AlreadyExists, ReasonRegistrationMismatch,
					map[string]string{"run_uid": p.runUID, "registration_attempt": fmt.Sprint(p.attempt), "field": strings.Join(fields, ",")},
					"run_uid %s attempt %d is already registered with another %s; the registration was not replaced",
					p.runUID, p.attempt, strings.Join(words, " and another "))
			}
			return prev, nil
		case p.attempt < prev.attempt:
			return nil, statusError(codes.FailedPrecondition, ReasonAttemptSuperseded,
				map[string]string{"run_uid": p.runUID, "registration_attempt": fmt.Sprint(p.attempt), "current_attempt": fmt.Sprint(prev.attempt)},
				"run_uid %s attempt %d is older than the current registration attempt %d",
				p.runUID, p.attempt, prev.attempt)
		}
	}

	id := newRegistrationID()
	log := s.log.With().Str("run_uid", p.runUID).Str("registration_id", id).Int32("registration_attempt", p.attempt).Logger()
	lifeCtx, cancel := context.WithCancelCause(context.Background())
	reg := &registration{
		id:          id,
		runUID:      p.runUID,
		attempt:     p.attempt,
		digest:      p.digest,
		idleTimeout: p.idleTimeout,
		log:         log,
		spec: WorkerSpec{
			RunUID:  p.runUID,
			Dir:     p.dir,
			Handler: p.handler,
			Env:     copyEnv(p.env),
			Logger:  log,
			Limits:  limits,

			Interpreter:  p.interpreter,
			Inline:       p.inline,
			StartTimeout: s.limits.RegistrationTimeout,
			DirInfo:      dirInfo(p.dir),
		},
		lifeCtx:    lifeCtx,
		cancelLife: cancel,
		initDone:   make(chan struct{}),
		removed:    make(chan struct{}),
		state:      stateRegistering,
	}
	s.regs[p.runUID] = reg
	// "A higher registration attempt supersedes an older local registration
	// and creates a new opaque registration ID": the older one is torn down
	// (in-flight invocation cancelled, worker closed) before the new worker
	// starts, so a Run never has two live workers here.
	// When an Unregister is already draining the older one, its drain is
	// cut short all the same.
	ownsPrev := prev != nil && prev.beginTeardownLocked(time.Now(), fmt.Sprintf("superseded by registration attempt %d", p.attempt))
	log.Info().Str("handler", p.handler).Str("working_dir", p.dir).Dur("idle_timeout_ms", p.idleTimeout).Str("limits", limits.Encode()).Msg("registering function")
	go s.initialize(reg, prev, ownsPrev)
	return reg, nil
}

// differences names each setting of p and limits that differs from what
// reg was registered with (everything that decides what its worker runs
// and how), as request fields and in words for the message.
func (reg *registration) differences(p registerParams, limits WorkerLimits) (fields, words []string) {
	add := func(differs bool, field, word string) {
		if differs {
			fields, words = append(fields, field), append(words, word)
		}
	}
	add(p.dir != reg.spec.Dir, "working_dir", "working_dir")
	add(p.handler != reg.spec.Handler, "handler", "handler")
	add(!maps.Equal(p.env, reg.spec.Env), "env", "env")
	add(p.idleTimeout != reg.idleTimeout, "idle_timeout_seconds", "idle_timeout_seconds")
	add(limits != reg.spec.Limits, WorkerLimitsMetadata, "set of worker limits ("+WorkerLimitsMetadata+" metadata)")
	add(p.interpreter != reg.spec.Interpreter, InterpreterMetadata, "interpreter ("+InterpreterMetadata+" metadata)")
	add(p.inline != reg.spec.Inline, SubshellMetadata, "choice of subshell ("+SubshellMetadata+" metadata)")
	return fields, words
}

// initialize tears down the superseded registration, if any, then starts
// the worker and settles the registration on READY or FAILED.
func (s *Server) initialize(reg, prev *registration, ownsPrev bool) {
	defer close(reg.initDone)
	if prev != nil {
		if ownsPrev {
			_ = s.teardown(prev, goneCause(fmt.Sprintf("superseded by registration attempt %d", reg.attempt)), context.Background())
		} else {
			// Its teardown's owner cancels the in-flight invocation at
			// once: admit cut its drain short.
			<-prev.removed
		}
	}
	if reg.lifeCtx.Err() != nil {
		// Unregistered or superseded before Start: nothing to start.
		s.settle(reg, nil, context.Cause(reg.lifeCtx))
		return
	}
	timedOut := make(chan struct{})
	t := time.AfterFunc(s.limits.RegistrationTimeout, func() {
		close(timedOut)
		reg.cancelLife(errRegistrationTimeout)
	})
	w, err := s.adapter.Start(reg.lifeCtx, reg.spec)
	if w != nil {
		w = &limitedWorker{Worker: w, limits: reg.spec.Limits}
	}
	if !t.Stop() {
		<-timedOut
		err = fmt.Errorf("initialization did not finish within %s", s.limits.RegistrationTimeout)
	} else if err == nil && reg.lifeCtx.Err() != nil {
		err = context.Cause(reg.lifeCtx)
	}
	if late := s.settle(reg, w, err); late != nil {
		_ = closeWorker(reg, late)
	}
}

// errRegistrationTimeout ends a Start that exceeded RegistrationTimeout.
var errRegistrationTimeout = errors.New("registration timeout")

// closeWorker closes w, logging and returning a failure.
func closeWorker(reg *registration, w Worker) error {
	err := w.Close()
	if err != nil {
		reg.log.Warn().Err(err).Msg("closing worker")
		err = fmt.Errorf("run_uid %s: close worker: %w", reg.runUID, err)
	}
	return err
}

// settle records the outcome of Start. A worker of a draining registration is
// kept for teardown to close; one that arrives too late is closed at once.
func (s *Server) settle(reg *registration, w Worker, err error) (toClose Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reg.state != stateRegistering {
		reg.worker = w // draining: teardown closes it
		return nil
	}
	if err != nil {
		reg.state = stateFailed
		reg.fatalError = fatalText(err)
		reg.log.Error().Str("fatal_error", reg.fatalError).Msg("registration failed")
		// A worker Start returned after its deadline must not live on
		// behind a FAILED registration: the caller closes it.
		return w
	}
	reg.worker = w
	reg.state = stateReady
	reg.lastActivity = s.now()
	reg.log.Info().Msg("registration ready")
	return nil
}

func copyEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = v
	}
	return out
}

// workerLimitsOf reads the registration's worker limits from the request
// metadata ([WorkerLimitsMetadata]); without it the defaults apply.
// KindMetadata is the RegisterFunction metadata key naming the runtime
// kind the caller configured the handler for (python, bash). A server of
// another kind refuses the registration (InvalidArgument, field
// "fnbridge-runtime-kind metadata"): a server address given for the wrong
// kind must never run a bash handler's file.function as a python
// module.function, which a directory holding both file.sh and file.py
// would allow. Without it (another client of the contract) nothing is
// checked.
const KindMetadata = "fnbridge-runtime-kind"

// checkKind refuses a registration meant for another runtime kind
// (KindMetadata).
func checkKind(ctx context.Context, kind string) error {
	vals := metadata.ValueFromIncomingContext(ctx, KindMetadata)
	switch {
	case len(vals) == 0:
		return nil
	case len(vals) > 1:
		return invalidArgument(KindMetadata+" metadata", "given %d times, want once", len(vals))
	case vals[0] != kind:
		return invalidArgument(KindMetadata+" metadata", "this FunctionRuntime server runs %s handlers, not %s ones: the address configured for %s serves another kind", kind, strconvQuote(vals[0]), strconvQuote(vals[0]))
	}
	return nil
}

func workerLimitsOf(ctx context.Context) (WorkerLimits, error) {
	vals := metadata.ValueFromIncomingContext(ctx, WorkerLimitsMetadata)
	switch len(vals) {
	case 0:
		return DefaultWorkerLimits(), nil
	case 1:
		l, err := ParseWorkerLimits(vals[0])
		if err != nil {
			return WorkerLimits{}, invalidArgument(WorkerLimitsMetadata+" metadata", "%v", err)
		}
		return l, nil
	}
	return WorkerLimits{}, invalidArgument(WorkerLimitsMetadata+" metadata", "given %d times, want once", len(vals))
}

// checkLeastWorkerLimits refuses limits under what a worker of kind
// starts with ([MinWorkerLimits]): every start would fail.
func checkLeastWorkerLimits(kind string, l WorkerLimits) error {
	least := MinWorkerLimits(kind)
	for _, c := range []struct {
		name     string
		v, least int64
	}{{"open_files", l.OpenFiles, least.OpenFiles}, {"processes", l.Processes, least.Processes}} {
		if c.v > 0 && c.v < c.least {
			return invalidArgument(WorkerLimitsMetadata+" metadata", "%s %d is fewer than %d, the fewest a %s worker starts with", c.name, c.v, c.least, kind)
		}
	}
	return nil
}

var mechanismsOnce sync.Once

// LogWorkerLimitMechanisms logs, once per process, how worker limits are
// enforced here: the rlimits always, cgroups where the server can create
// them. The process limit needs a cgroup, so it is named on its own.
func LogWorkerLimitMechanisms(log zerolog.Logger) {
	mechanismsOnce.Do(func() {
		desc, processes := proc.Mechanisms()
		logWorkerLimits(log, desc, processes, proc.StaleWorkersKilled())
	})
}

// logWorkerLimits logs the mechanisms, and at warn what the start's
// cleanup killed: processes that outlived a bridge are worth an operator's
// look (something in a function left its worker's process group).
func logWorkerLimits(log zerolog.Logger, desc string, processes bool, killed []string) {
	log.Info().Bool("processes_limit_enforced", processes).Str("mechanisms", desc).Msg("worker limits")
	if len(killed) > 0 {
		log.Warn().Strs("killed", killed).Msg("killed what stopped bridges left running in their worker cgroups")
	}
}

// unenforcedWarned keeps the handlers (working directory and handler) and
// fields already warned about by warnUnenforced.
var unenforcedWarned sync.Map

// warnUnenforced warns, once per handler and field, that a processes or
// memory limit it sets is not enforced as configured here. The defaults
// are left to the info line of LogWorkerLimitMechanisms: the runtime
// cannot tell them from the same value written out.
func warnUnenforced(log zerolog.Logger, handler, dir string, l WorkerLimits, processes, memory bool) {
	d := DefaultWorkerLimits()
	for _, c := range []struct {
		field    string
		set      bool
		msg, cfg string
	}{
		{"processes", !processes && l.Processes > 0 && l.Processes != d.Processes,
			"processes limit NOT enforced: no writable pids cgroup here (RLIMIT_NPROC counts per user, so it is not used)", fmt.Sprint(l.Processes)},
		{"memory", !memory && l.Memory > 0 && l.Memory != d.Memory,
			"memory limit bounds each process alone (RLIMIT_DATA), not the worker as a whole: no writable memory cgroup here", FormatSize(l.Memory)},
	} {
		if !c.set {
			continue
		}
		if _, seen := unenforcedWarned.LoadOrStore(dir+"\x00"+handler+"\x00"+c.field, true); !seen {
			log.Warn().Str("handler", handler).Str("working_dir", dir).Str("limit", c.field).Str("configured", c.cfg).Msg(c.msg)
		}
	}
}

// limitedWorker turns a worker's limit hit into a HandlerError naming the
// limit. It is terminal: the same input under the same limits fails again
// (the worker is fresh for the next try either way), except for cpu, which
// a warm worker accumulates over all its invocations.
// LimitExceededType is the HandlerError.Type (and the error_type of its
// status) of an invocation that hit a worker limit.
const LimitExceededType = "LimitExceeded"

type limitedWorker struct {
	Worker
	limits WorkerLimits
}

func (w *limitedWorker) Invoke(ctx context.Context, inv Invocation) (Result, error) {
	res, err := w.Worker.Invoke(ctx, inv)
	var le *proc.LimitError
	if err == nil || !errors.As(err, &le) {
		return res, err
	}
	he := &HandlerError{
		Terminal: le.Limit != proc.LimitCPU,
		Type:     LimitExceededType,
		Message:  fmt.Sprintf("%s exceeded (%s); the next invocation gets a fresh worker: %v", describeInForce(w.limits, le), le.Detail, le.Err),
	}
	var inner *HandlerError
	if errors.As(le.Err, &inner) {
		he.ExitCode = inner.ExitCode
	}
	return Result{}, he
}

// describeInForce names the limit le hit with the value the worker ran
// under, and the configured one beside it when the server lowered it to
// its own hard limit. A limit error that does not know the limits in
// force (zero) names the configured one.
func describeInForce(configured WorkerLimits, le *proc.LimitError) string {
	inForce := WorkerLimits(le.InForce)
	was, now := limitValue(configured, le.Limit), limitValue(inForce, le.Limit)
	if inForce == (WorkerLimits{}) || now == was {
		return configured.Describe(le.Limit)
	}
	return fmt.Sprintf("%s (%s configured, lowered to the server's hard limit)", inForce.Describe(le.Limit), was)
}

// limitValue writes one limit's value as Describe does.
func limitValue(l WorkerLimits, limit string) string {
	switch limit {
	case proc.LimitMemory:
		return FormatSize(l.Memory)
	case proc.LimitFileSize:
		return FormatSize(l.FileSize)
	case proc.LimitProcesses:
		return fmt.Sprint(l.Processes)
	case proc.LimitOpenFiles:
		return fmt.Sprint(l.OpenFiles)
	case proc.LimitCPU:
		return l.CPU.String()
	}
	return ""
}

// dirInfo is the working directory as found now, pinned for the
// registration's worker starts (WorkerSpec.CheckDir); nil when it cannot
// be read, and the first start then says why.
func dirInfo(dir string) os.FileInfo {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil
	}
	return fi
}
