package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/restate"
)

// contextEndpoint is the bridge's stepctx.Server and its listener.
type contextEndpoint struct {
	srv    *stepctx.Server
	l      net.Listener
	url    string // what functions dial (stepctx.EnvAddr)
	dir    string // private socket directory to remove; "" when configured
	served chan error
}

// startContext serves the context endpoint when a handler is in steps
// mode (for a one-off run, when its handler is); it warns when the
// runtimes may not reach it.
func (b *Bridge) startContext() error {
	if b.cfg.manifestOnly {
		return nil
	}
	run := b.cfg.oneOffRun
	steps := false
	for key, p := range b.pools {
		steps = steps || (run == "" || key == run) && p.h.StepsMode()
	}
	if !steps {
		return nil
	}
	ce := &contextEndpoint{srv: stepctx.NewServer(stepctx.Config{Logger: b.log}), served: make(chan error, 1)}
	l, dir, err := b.listenContext()
	if err != nil {
		return err
	}
	ce.dir = dir
	ce.l, ce.url = l, stepctx.URL(l)
	go func() {
		err := ce.srv.Serve(l)
		if !errors.Is(err, http.ErrServerClosed) {
			b.log.Error().Err(err).Str("context", ce.url).Msg("the durable-steps context endpoint stopped accepting connections: steps-mode functions cannot make context calls until the bridge restarts")
		}
		ce.served <- err
	}()
	b.ctxEnd = ce
	unix := l.Addr().Network() == "unix"
	for kind, raddr := range b.cfg.Runtimes {
		if run != "" && kind != b.pools[run].h.Runtime {
			continue // a one-off run uses its handler's runtime only
		}
		if unix && raddr != "" && !strings.HasPrefix(raddr, "unix://") {
			b.log.Warn().Str("runtime", kind).Str("context", ce.url).
				Msgf("runtimes.%s is reached over TCP but the context endpoint is a unix socket: durability: steps handlers of that runtime work only if it shares this host's filesystem; otherwise set context_listen to a host:port it can reach", kind)
		}
	}
	if !unix {
		if !IsLoopback(l.Addr().String()) {
			b.log.Warn().Str("context", ce.url).Msg("context_listen is plaintext TCP on a non-loopback address: only a trusted network may reach it (every request still needs its attempt's token)")
		}
	}
	b.log.Info().Str("context", ce.url).Msg("serving the durable-steps context endpoint")
	return nil
}

// listenContext listens where the context endpoint serves; dir is the
// private socket directory it created, if any.
func (b *Bridge) listenContext() (l net.Listener, dir string, err error) {
	addr := b.cfg.ContextListen
	what := b.cfg.contextListenSource()
	if run := b.cfg.oneOffRun; run != "" && addr != "" {
		// A serving replica of this configuration may hold addr.
		what = fmt.Sprintf("the one-off context endpoint (beside %s %s)", what, addr)
		network, address, _ := stepctx.ParseAddr(addr) // checked at load
		switch {
		case network == "tcp":
			host, _, _ := net.SplitHostPort(address)
			addr = net.JoinHostPort(host, "0") // the host a remote runtime dials
		case b.cfg.Runtimes[b.pools[run].h.Runtime] == "":
			addr = "" // embedded: a private socket is reachable
		default:
			if l, err = listenBeside(address); err != nil {
				return nil, "", fmt.Errorf("%s: %w", what, err)
			}
			return l, "", nil
		}
	}
	if addr == "" {
		dir, err = functionruntime.PrivateTempDir("ctx") // 0700, swept once its bridge is dead
		if err != nil {
			return nil, "", fmt.Errorf("%s: creating the private socket directory: %w", what, err)
		}
		addr = "unix://" + filepath.Join(dir, "ctx.sock")
	}
	if l, err = stepctx.Listen(addr); err != nil {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil, "", fmt.Errorf("%s %s: %w", what, addr, err)
	}
	return l, dir, nil
}

// maxBesideSockets bounds the socket names listenBeside tries.
const maxBesideSockets = 32

// listenBeside listens on a socket of its own next to path, in the
// directory a remote runtime shares: the first of path.invoke-1, -2, ...
// that is free or stale, so a killed run's socket is taken over rather
// than left to pile up.
func listenBeside(path string) (net.Listener, error) {
	var err error
	for i := 1; i <= maxBesideSockets; i++ {
		var l net.Listener
		if l, err = stepctx.Listen(fmt.Sprintf("unix://%s.invoke-%d", path, i)); err == nil {
			return l, nil
		}
	}
	return nil, err
}

// ForOneOffRun readies c for a one-off run of service/handler (`bridge
// invoke`), which may run beside a serving replica of c holding
// context_listen: the context endpoint starts only if that handler is in
// steps mode, and on an address of its own: a TCP context_listen's host
// on a port the system picks; for a unix one, a socket next to it (in the
// directory a remote runtime shares) or, for an embedded runtime, a
// private one, as with context_listen empty.
func (c *Config) ForOneOffRun(service, handler string) { c.oneOffRun = service + "/" + handler }

// ForManifest readies c for a bridge that only answers what it serves
// (`bridge manifest`): it starts no context endpoint, so it neither needs
// nor takes a context_listen a serving replica holds.
func (c *Config) ForManifest() { c.manifestOnly = true }

// closeContext stops the context endpoint and removes its private
// directory.
func (b *Bridge) closeContext(ctx context.Context) error {
	ce := b.ctxEnd
	if ce == nil {
		return nil
	}
	err := ce.srv.Shutdown(ctx)
	<-ce.served
	if ce.dir != "" {
		err = errors.Join(err, os.RemoveAll(ce.dir))
	}
	return err
}

// runSteps is one steps-mode attempt: it opens an Attempt on j, invokes
// the function with the endpoint and token as gRPC metadata, and waits
// for the function's result or the attempt's end (suspension, a step
// failed retryably, the journal failed), whichever comes first; on the
// latter it cancels the invocation (the runtime kills its processes) and
// returns once the registration is released. The Attempt is closed on
// every path, so its token is stale afterwards.
//
// The error is the function's classified failure (*Error) or, when the
// attempt ended first, Attempt.Err (stepsToRestate maps both).
// suspendUnwindGrace is how long a suspended Python function has to
// unwind (fnbridge.Suspended through its finally blocks) and answer before
// its worker is stopped: no code of the attempt runs past it, and one that
// returns within it keeps its worker warm. An abandoned step's runtime
// gets it too, to read its worker's death and say why.
const suspendUnwindGrace = time.Second

// abandoned reports whether err ended an attempt because a step's process
// went away before completing it.
func abandoned(err error) bool {
	var sf *stepctx.StepFailedError
	return errors.As(err, &sf) && sf.Abandoned
}

// stopAfterUnwind cancels the function's invocation with cause once it
// has finished, or suspendUnwindGrace has passed.
func stopAfterUnwind(cause error, cancel context.CancelCauseFunc, finished <-chan struct{}) {
	t := time.NewTimer(suspendUnwindGrace)
	defer t.Stop()
	select {
	case <-finished:
	case <-t.C:
	}
	cancel(cause)
}

func (b *Bridge) runSteps(ctx context.Context, p *pool, j stepctx.Journal, invocationID string, input []byte, contentType string) (*Result, string, error) {
	if b.ctxEnd == nil {
		return nil, "", errors.New("bridge: the context endpoint is not running")
	}
	// The function's timeout runs from about now (a little later, when its
	// invocation starts) and counts its waits too: waits end on the open
	// stream only within its first half, so the code after the last of
	// them has at least the other half; a later wait suspends, and the
	// next attempt has a whole timeout again.
	deadline := time.Now().Add(p.h.Timeout.Std() / 2)
	a, err := b.ctxEnd.srv.Open("", j, stepctx.WithSuspendAfter(p.h.SuspendAfter.Std()), stepctx.WithDeadline(deadline), stepctx.WithHandler(b.keyed[p].info))
	if err != nil {
		return nil, "", err
	}
	defer a.Close()
	// fnbridge.Suspended unwinds a Python function (its finally blocks and
	// with exits run) and its warm worker answers; only one that has not
	// within suspendUnwindGrace is stopped. So a suspension, which ends
	// the restate attempt's ctx at once, reaches a Python function's
	// InvokeFunction through stopAfterUnwind. A Bash function's shell has
	// no such unwinding: it is stopped at once.
	python := p.h.Runtime == "python"
	base := ctx
	if python {
		base = context.WithoutCancel(ctx)
	}
	ictx, cancel := context.WithCancelCause(base)
	defer cancel(nil)
	finished := make(chan struct{})
	if python {
		stop := context.AfterFunc(ctx, func() {
			if cause := context.Cause(ctx); errors.Is(cause, restate.ErrSuspended) {
				stopAfterUnwind(cause, cancel, finished)
			} else {
				cancel(cause)
			}
		})
		defer stop()
	}
	ictx = metadata.AppendToOutgoingContext(ictx, functionruntime.MetadataContext, b.ctxEnd.url, functionruntime.MetadataContextToken, a.Token(),
		functionruntime.MetadataContextOrdered, "true")
	if a.Fresh() {
		ictx = metadata.AppendToOutgoingContext(ictx, functionruntime.MetadataContextFresh, "true")
	}
	type result struct {
		res    *Result
		runUID string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		res, uid, err := p.invoke(ictx, invocationID, input, contentType)
		close(finished)
		done <- result{res, uid, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-a.Done():
		// Why the function is stopped: its span says so. A step abandoned
		// (the process running it went away) gets the grace too: the
		// runtime, left to see its worker die, says why (a worker limit,
		// which the attempt's end could not know).
		if (python && errors.Is(a.Err(), stepctx.ErrSuspended)) || abandoned(a.Err()) {
			stopAfterUnwind(a.Err(), cancel, finished)
		} else {
			cancel(a.Err())
		}
		r = <-done
	}
	// Close first: if nothing ended the attempt before, its end is
	// ErrClosed and the function's own result stands.
	a.Close()
	if aerr := a.Err(); !errors.Is(aerr, stepctx.ErrClosed) {
		if abandoned(aerr) && functionruntime.ErrorInfo(r.err).GetMetadata()["error_type"] == functionruntime.LimitExceededType {
			// A worker limit killed the step's process: the limit, named
			// (and terminal, as outside a step), not "abandoned".
			return nil, r.runUID, r.err
		}
		var e *Error
		if abandoned(aerr) && errors.As(r.err, &e) && e.Class == ClassTimeout {
			// The function's timeout killed it in the step: a timeout
			// (504), as outside a step, not a process gone astray.
			return nil, r.runUID, r.err
		}
		return nil, r.runUID, aerr
	}
	// The restate attempt can end (a suspension, a CANCEL) before the
	// context endpoint has marked the stepctx attempt ended; then the
	// function's invoke returns cancelled, and the restate context's
	// cause says what really happened.
	if r.err != nil && ctx.Err() != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, restate.ErrSuspended):
			return nil, r.runUID, stepctx.ErrSuspended
		case errors.Is(cause, restate.ErrCancelled):
			return nil, r.runUID, restate.ErrCancelled
		default:
			return nil, r.runUID, restate.ErrAttemptEnded
		}
	}
	return r.res, r.runUID, r.err
}

// cancelledFailure is the invocation's end when the function saw its
// cancellation (a wait failed with 409) and then failed terminally without
// a code of its own (a Bash exit 100): code 409 with the function's own
// message. A failure with its own code (a Python TerminalError, fnbridge
// fail --code) keeps it, as the Restate SDKs keep a TerminalError's: a
// caller can still tell a compensation's 422 from the cancellation.
func cancelledFailure(err error, cancelled *atomic.Bool) error {
	var e *Error
	if cancelled.Load() && errors.As(err, &e) && e.Class == ClassTerminal && e.Code == 0 {
		return &restate.TerminalError{Code: restate.CodeCancelled, Message: e.Message}
	}
	return err
}

// stepsToRestate is what the endpoint gets for a runSteps error.
func stepsToRestate(err error) error {
	var sf *stepctx.StepFailedError
	var wa *stepctx.WaitAbandonedError
	var tl *stepctx.StepTooLargeError
	var te *restate.TerminalError
	switch {
	case errors.Is(err, stepctx.ErrSuspended), errors.Is(err, restate.ErrAttemptEnded):
		// The suspension is sent (or the attempt failed on the journal
		// side): nothing more is written.
		return restate.ErrAttemptEnded
	case errors.Is(err, restate.ErrCancelled):
		return restate.ErrCancelled
	case errors.As(err, &te):
		return te
	case errors.As(err, &sf):
		return &restate.RetryableError{Code: restate.CodeInternal, Message: sf.Error()}
	case errors.As(err, &wa):
		return &restate.RetryableError{Code: restate.CodeInternal, Message: wa.Error()}
	case errors.As(err, &tl):
		// Every retry would run the step to the same size: paused, as a
		// message over Restate's limit is.
		return &restate.RetryableError{Code: restate.CodeInternal, Message: tl.Error(), Pause: true, RetryAfter: PermanentRetryDelay}
	}
	return toRestate(err)
}

// errNoDurableContext pauses a steps-mode invocation on a restate
// endpoint without the durable-steps API.
var errNoDurableContext = &restate.RetryableError{Code: restate.CodeInternal, Pause: true, RetryAfter: PermanentRetryDelay,
	Message: "durability: steps needs the durable-steps API of the restate endpoint, which this build lacks"}

// stepsHandlerFunc is one steps-mode attempt under Restate: no wrapping
// run; the function's result is the invocation's Output.
func (b *Bridge) stepsHandlerFunc(p *pool) restate.HandlerFunc {
	return func(ctx restate.Context, input []byte) ([]byte, error) {
		start := time.Now()
		att := p.tel.startAttempt(ctx)
		var (
			res    *Result
			runUID string
			err    error
		)
		var cancelled atomic.Bool
		if dc, ok := ctx.(durableContext); ok {
			j := restateJournal{dc: dc, suspendAfter: p.h.SuspendAfter.Std(), cancelled: &cancelled,
				replaying: func() bool { return restate.Replaying(ctx) }}
			if err = b.keyed[p].checkKey(dc.Key()); err == nil {
				res, runUID, err = b.runSteps(b.keyed[p].withKey(att.context(ctx), dc.Key()), p, j, runtimeInvocationID(ctx.InvocationID()), input, contentTypeOf(ctx))
				err = cancelledFailure(err, &cancelled)
			}
		} else {
			err = errNoDurableContext
		}
		ev := b.log.Info()
		outcome := telemetry.OutcomeOK
		var out []byte
		if err == nil {
			out = res.Output
			if len(res.Outputs) > 0 {
				// No run wraps a steps-mode invocation to journal them in
				// (as durability: function does): they are logged here.
				ev = ev.Interface("outputs", res.Outputs)
			}
		} else {
			suspended := errors.Is(err, stepctx.ErrSuspended)
			cause := err
			err = stepsToRestate(err)
			outcome = attemptOutcome(ctx, true, err, cause)
			msg := err.Error()
			if af := (*restate.AttemptFailedError)(nil); errors.As(cause, &af) {
				msg = af.Error() // the endpoint's own failure, not only that it ended
			}
			if (outcome == telemetry.OutcomeRetryableFailure || outcome == telemetry.OutcomePaused) && ctx.EndsCancelled(err) {
				// Restate's CANCEL came while the function ran, and no
				// context call took it: the endpoint ends the invocation
				// cancelled rather than failing the attempt.
				outcome = telemetry.OutcomeCancelled
				msg = "cancelled by Restate (the invocation ends with 409, not retried); the attempt had failed: " + msg
			}
			if !suspended {
				ev = b.log.Warn().Str("error", msg)
			}
		}
		att.end(outcome, err)
		ev.Str("restate_invocation_id", ctx.InvocationID()).
			Str("service", p.service).Str("handler", p.h.Name).Str("durability", DurabilitySteps).
			Str("run_uid", runUID).Str("invocation_id", ctx.InvocationID()).
			Str("outcome", outcome.String()).Dur("duration_ms", time.Since(start)).
			Msg("invocation")
		return out, err
	}
}

// invokeSteps is `bridge invoke` of a steps-mode handler: attempts of the
// function against a localJournal, suspending as under Restate
// (invokeLocalSteps).
func (b *Bridge) invokeSteps(ctx context.Context, p *pool, input []byte) (*Result, error) {
	return b.invokeLocalSteps(ctx, p, input, nil)
}
