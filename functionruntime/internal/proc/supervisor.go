package proc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ErrClosed is returned by [Supervisor.Do] once the supervisor is closed.
var ErrClosed = errors.New("worker is closed")

// ErrRestarting is wrapped, with the invocation context's error, by
// [Supervisor.Do] when the invocation ended while its worker was still
// being restarted: the handler did not run. The restart goes on.
var ErrRestarting = errors.New("the worker was still restarting")

// restartFailedKey is the context key of [WithRestartFailed]'s report.
type restartFailedKey struct{}

// WithRestartFailed returns ctx carrying report, for the contexts of the
// invocations a [Supervisor] runs ([Supervisor.Do]). Once an invocation
// under such a context ran, a restart of the worker that fails (one begun
// in the background after an invocation killed or lost the worker, or one
// an invocation waits for) is reported at once: the supervisor calls
// report with the error the next invocation would return, wrapping
// SupervisorConfig.ErrFailed, instead of leaving the failure unseen until
// that invocation. report is called without any of the supervisor's locks
// held, never for a restart Close ended, and may run while the invocation
// that waits for the restart returns the same error.
func WithRestartFailed(ctx context.Context, report func(error)) context.Context {
	return context.WithValue(ctx, restartFailedKey{}, report)
}

// Session is an adapter's live worker: a process plus its protocol state.
type Session interface {
	// Proc is the worker process.
	Proc() *Process
	// Stop terminates the process (see [Process.Terminate]) and releases
	// whatever else the session owns. It must be idempotent.
	Stop(grace time.Duration)
}

// ProtocolError marks a failure of the conversation with the worker (a
// broken or closed pipe, an interrupted read, a malformed frame), as
// opposed to a failure the handler reported. The session is unusable after
// it.
type ProtocolError struct{ Err error }

func (e *ProtocolError) Error() string { return e.Err.Error() }
func (e *ProtocolError) Unwrap() error { return e.Err }

// DiscardSession is a call's answer (Err) after which its session must
// not serve again: [Supervisor.Do] stops the session, its whole process
// group, before it returns Err, and the next call gets a fresh one. An
// adapter returns it when an invocation left processes or threads
// running (see [Process.Leftovers]) that must not run beside its retry
// or into the next invocations. Err nil: the call succeeded, and Do
// returns nil (the call's result stands).
type DiscardSession struct{ Err error }

func (e *DiscardSession) Error() string {
	if e.Err == nil {
		return "session discarded after a successful call"
	}
	return e.Err.Error()
}
func (e *DiscardSession) Unwrap() error { return e.Err }

// SupervisorConfig configures a [Supervisor].
type SupervisorConfig struct {
	// Name describes the worker in errors ("python worker").
	Name string
	// Start starts and initialises a fresh session. It must honour ctx
	// and leave nothing running when it fails.
	Start func(ctx context.Context) (Session, error)
	// Grace is the SIGTERM-to-SIGKILL grace period.
	Grace time.Duration
	// StartTimeout bounds a restart (the registration's initialization
	// bound); 0: only Close ends one. A restart runs on its own, not under
	// the invocation that needs it, so a worker slower to start than an
	// invocation's timeout still comes back for the next one.
	StartTimeout time.Duration
	// ErrCrashed is wrapped by errors for a worker that died during an
	// invocation; ErrFailed by errors for a restart that failed.
	ErrCrashed, ErrFailed error
}

// Supervisor keeps one registration's session alive across invocations:
// it restarts a worker that died or was killed, kills the worker when an
// invocation's context ends, and classifies failures. Concurrent calls of
// Do are serialised (the server makes none); Close may run concurrently
// with Do.
type Supervisor struct {
	cfg  SupervisorConfig
	life context.Context // cancelled by Close
	stop context.CancelFunc

	callMu sync.Mutex // serialises Do: the protocol has one invocation in flight

	mu         sync.Mutex
	cur        Session  // nil when no live session
	restarting *restart // the restart in progress, if any
	closed     bool
	onFailed   func(error) // from the last invocation's context (WithRestartFailed)
}

// restart is one start of a fresh session; done is closed once sess or
// err is set.
type restart struct {
	done chan struct{}
	sess Session
	err  error
}

// NewSupervisor supervises first, the session the adapter's Start created.
func NewSupervisor(cfg SupervisorConfig, first Session) *Supervisor {
	life, stop := context.WithCancel(context.Background())
	s := &Supervisor{cfg: cfg, life: life, stop: stop, cur: first}
	if first != nil {
		s.watch(first)
	}
	return s
}

// watch discards sess when its worker exits while no invocation holds it
// (killed between invocations: an OOM kill, an operator, a chaos test):
// its pipes and cgroup go at once, not at the next invocation, which may
// not come before idle_timeout when the registration is seldom leased, and
// a fresh worker starts, as after a worker lost in an invocation. An
// invocation in flight deals with the death itself; the watcher waits for
// it to end, then finds sess no longer current.
func (s *Supervisor) watch(sess Session) {
	go func() {
		select {
		case <-sess.Proc().Exited():
		case <-s.life.Done():
			return
		}
		s.callMu.Lock()
		defer s.callMu.Unlock()
		s.mu.Lock()
		current := s.cur == sess
		s.mu.Unlock()
		if current {
			s.discard(sess)
		}
	}()
}

// Do runs one invocation: it obtains a live session (starting a fresh one
// if the last died or was killed), routes log lines to logger, and calls
// call with the session. When call returns a [ProtocolError] the session is
// stopped and the error is classified: ctx's error if ctx ended (wrapped,
// so errors.Is works), [ErrClosed] if the supervisor was closed, otherwise
// a crash wrapping cfg.ErrCrashed. Other errors from call are the
// handler's and are returned as they are.
func (s *Supervisor) Do(ctx context.Context, logger *zerolog.Logger, call func(Session) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: invocation not started: %w", s.cfg.Name, err)
	}
	s.callMu.Lock()
	defer s.callMu.Unlock()
	sess, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	p := sess.Proc()
	p.BeginInvocation(logger)
	before := p.cg.counters()
	stopWatch := context.AfterFunc(ctx, p.Interrupt)
	err = call(sess)
	// The context may have ended after the answer came in, too late to
	// change it: Interrupt's deadlines stay on the pipes, so the worker can
	// take no more invocations, though this one stands.
	interrupted := !stopWatch()
	var ds *DiscardSession
	discardAsked := errors.As(err, &ds)
	if discardAsked {
		err = ds.Err
	}

	var pe *ProtocolError
	if errors.As(err, &pe) {
		after := p.cg.counters() // before the cgroup goes with the worker
		var stuck string
		if ctx.Err() != nil {
			stuck = p.stuck(before, after) // while the worker is still there to look at
		}
		// Lines printed until the kill still belong to this invocation.
		s.discard(sess)
		p.EndInvocation()
		switch {
		case ctx.Err() != nil:
			err := fmt.Errorf("%s killed: invocation ended: %w", s.cfg.Name, ctx.Err())
			if stuck != "" {
				return &StuckError{Why: stuck, Err: err}
			}
			return err
		case s.life.Err() != nil:
			return fmt.Errorf("%s: %w during the invocation", s.cfg.Name, ErrClosed)
		}
		err = fmt.Errorf("%w: %s died during the invocation (%s; %s)%s",
			s.cfg.ErrCrashed, s.cfg.Name, p.ExitDescription(), pe.Err, LastLinesSuffix(p.RecentLines(3)))
		if limit, detail := p.limitHit(before, after, err, true); limit != "" {
			return &LimitError{Limit: limit, Detail: detail, InForce: p.inForce, Err: err}
		}
		return err
	}
	if s.life.Err() != nil {
		// Closed while the call ran: Close cancels in-flight work, so the
		// call is reported cancelled even if a status raced in before the
		// kill (Close cancels life before it signals the group).
		p.EndInvocation()
		return fmt.Errorf("%s: %w during the invocation", s.cfg.Name, ErrClosed)
	}
	p.SyncLogs()
	if discardAsked {
		// Before EndInvocation: the last lines of what it stops are
		// still this invocation's.
		s.discard(sess)
	}
	p.EndInvocation()
	if interrupted && !discardAsked {
		s.discard(sess)
	}
	if err != nil {
		if limit, detail := p.limitHit(before, p.cg.counters(), err, false); limit != "" {
			// A worker that hit a limit may be left short of it (leaked
			// descriptors, a fragmented heap): the next invocation gets a
			// fresh one.
			s.discard(sess)
			return &LimitError{Limit: limit, Detail: detail, InForce: p.inForce, Err: err}
		}
	}
	if !interrupted && !discardAsked {
		p.ReapStrays()
	}
	return err
}

// acquire returns the live session or starts a new one.
func (s *Supervisor) acquire(ctx context.Context) (Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("%s: %w", s.cfg.Name, ErrClosed)
	}
	if report, ok := ctx.Value(restartFailedKey{}).(func(error)); ok && report != nil {
		s.onFailed = report
	}
	if s.cur != nil && s.cur.Proc().Alive() {
		return s.cur, nil
	}
	if s.cur != nil {
		// Died or was killed between invocations: clear out its group.
		s.cur.Stop(s.cfg.Grace)
		s.cur = nil
	}
	r := s.restartLocked()
	s.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		s.mu.Lock() // for the deferred Unlock
		return nil, fmt.Errorf("%s: %w when the invocation ended: %w", s.cfg.Name, ErrRestarting, ctx.Err())
	}
	s.mu.Lock()
	if r.err != nil {
		if s.life.Err() != nil {
			return nil, fmt.Errorf("%s: %w", s.cfg.Name, ErrClosed)
		}
		return nil, s.failed(r.err)
	}
	return r.sess, nil
}

// failed is the error of an invocation whose worker could not be
// restarted: err is why the restart failed.
func (s *Supervisor) failed(err error) error {
	return fmt.Errorf("%w: restarting %s: %w", s.cfg.ErrFailed, s.cfg.Name, err)
}

// restartLocked returns the restart in progress, or begins one: a fresh
// session started under the supervisor's life (and StartTimeout), never
// under an invocation's context, which may end first. A restart that fails
// is reported (see [WithRestartFailed]) as soon as it has. s.mu is held.
func (s *Supervisor) restartLocked() *restart {
	if s.restarting != nil {
		return s.restarting
	}
	r := &restart{done: make(chan struct{})}
	s.restarting = r
	go func() {
		ctx, cancel := s.life, context.CancelFunc(func() {})
		if s.cfg.StartTimeout > 0 {
			ctx, cancel = context.WithTimeout(s.life, s.cfg.StartTimeout)
		}
		sess, err := s.cfg.Start(ctx)
		cancel()
		s.mu.Lock()
		if err == nil && s.closed {
			sess.Stop(s.cfg.Grace)
			sess, err = nil, ErrClosed
		}
		if err == nil {
			s.cur = sess
			s.watch(sess)
		}
		r.sess, r.err = sess, err
		s.restarting = nil
		close(r.done)
		var report func(error)
		if err != nil && !s.closed && s.life.Err() == nil {
			report = s.onFailed
		}
		s.mu.Unlock()
		if report != nil {
			report(s.failed(err))
		}
	}()
	return r
}

// discard stops sess and forgets it if it is still current, and begins
// the restart at once, so the next invocation finds a worker ready.
func (s *Supervisor) discard(sess Session) {
	sess.Stop(s.cfg.Grace)
	s.mu.Lock()
	if s.cur == sess {
		s.cur = nil
	}
	if s.cur == nil && !s.closed && s.life.Err() == nil {
		s.restartLocked()
	}
	s.mu.Unlock()
}

// Close stops the current session (its whole process group) and refuses
// further invocations. An invocation in flight fails with [ErrClosed].
func (s *Supervisor) Close() error {
	s.stop()
	s.mu.Lock()
	s.closed = true
	cur := s.cur
	s.cur = nil
	r := s.restarting
	s.mu.Unlock()
	if cur != nil {
		cur.Stop(s.cfg.Grace)
	}
	if r != nil {
		// Start honours its context, which stop cancelled: it ends soon,
		// leaving nothing running, before Close returns.
		<-r.done
	}
	return nil
}

// LastLinesSuffix formats a few recent log lines for an error message:
// "; last log lines: a | b", or "" when there are none.
func LastLinesSuffix(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return "; last log lines: " + Clip(strings.Join(lines, " | "), 1024)
}
