package proc

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A worker slower to start than an invocation's timeout still comes back:
// the restart after a kill runs under the supervisor, not under the
// invocation that needs it, so an invocation that gives up waiting leaves
// it going and the next one gets it. (Started under each invocation's own
// deadline, every restart was abandoned half-way and the worker never
// came back while the registration read READY.)
func TestRestartOutlivesTheInvocationThatWaitsForIt(t *testing.T) {
	var starts atomic.Int32
	gate := make(chan struct{})       // a restart blocks here, as a slow import does
	entered := make(chan struct{}, 4) // a start began
	start := func(ctx context.Context) (Session, error) {
		n := starts.Add(1)
		entered <- struct{}{}
		if n > 1 {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return shSession(t, `while read x <&3; do echo ok >&4; done`, Limits{})
	}
	s := superviseStart(t, start)
	<-entered
	l := zerolog.Nop()

	// An invocation whose context ends mid-call kills the worker.
	ctx, cancel := context.WithCancel(context.Background())
	err := s.Do(ctx, &l, func(sess Session) error {
		cancel()
		buf := make([]byte, 8)
		_, err := sess.Proc().Responses().Read(buf) // nothing comes: Interrupt cuts it
		return &ProtocolError{Err: err}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("killed invocation: %v, want it cancelled", err)
	}
	<-entered // the restart began at once

	// The next invocation ends while the restart is still on (held at
	// the gate until after it returned).
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = s.Do(ctx, &l, func(Session) error { t.Error("the handler ran without a worker"); return nil })
	if !errors.Is(err, ErrRestarting) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("invocation during the restart: %v, want ErrRestarting and its deadline", err)
	}

	close(gate)
	if _, err := invokeLine(s); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if n := starts.Load(); n != 2 {
		t.Fatalf("%d starts, want 2: the first and one restart, not abandoned and begun again", n)
	}
}

// A restart that fails in the background, after an invocation killed the
// worker, is reported at once to the WithRestartFailed of the invocation's
// context, with the error the next invocation returns. (Unreported, the
// registration read READY until that invocation found the failure.)
func TestFailedBackgroundRestartIsReported(t *testing.T) {
	var starts atomic.Int32
	start := func(ctx context.Context) (Session, error) {
		if starts.Add(1) > 1 {
			return nil, errors.New("broken module now")
		}
		return shSession(t, `while read x <&3; do echo ok >&4; done`, Limits{})
	}
	s := superviseStart(t, start)
	reported := make(chan error, 4)
	l := zerolog.Nop()

	// An invocation whose context ends mid-call kills the worker; the
	// restart begins in the background and fails.
	ctx, cancel := context.WithCancel(WithRestartFailed(context.Background(), func(err error) { reported <- err }))
	defer cancel()
	err := s.Do(ctx, &l, func(sess Session) error {
		cancel()
		buf := make([]byte, 8)
		_, err := sess.Proc().Responses().Read(buf) // nothing comes: Interrupt cuts it
		return &ProtocolError{Err: err}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("killed invocation: %v, want it cancelled", err)
	}
	var got error
	select {
	case got = <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("the failed background restart was not reported")
	}
	if !errors.Is(got, s.cfg.ErrFailed) || !strings.Contains(got.Error(), "broken module now") {
		t.Fatalf("reported %v, want the restart's error wrapping ErrFailed", got)
	}
	_, next := invokeLine(s)
	if next == nil || next.Error() != got.Error() {
		t.Fatalf("next invocation: %v, want the reported %v", next, got)
	}
}

// A restart that Close ends is not a failure to report.
func TestRestartEndedByCloseIsNotReported(t *testing.T) {
	var starts atomic.Int32
	entered := make(chan struct{}, 4)
	start := func(ctx context.Context) (Session, error) {
		if starts.Add(1) > 1 {
			entered <- struct{}{}
			<-ctx.Done() // a slow restart, until Close
			return nil, ctx.Err()
		}
		return shSession(t, `while read x <&3; do echo ok >&4; done`, Limits{})
	}
	s := superviseStart(t, start)
	var reports atomic.Int32
	l := zerolog.Nop()
	ctx, cancel := context.WithCancel(WithRestartFailed(context.Background(), func(error) { reports.Add(1) }))
	defer cancel()
	_ = s.Do(ctx, &l, func(sess Session) error {
		cancel()
		buf := make([]byte, 8)
		_, err := sess.Proc().Responses().Read(buf)
		return &ProtocolError{Err: err}
	})
	<-entered
	if err := s.Close(); err != nil { // returns once the restart ended
		t.Fatal(err)
	}
	if n := reports.Load(); n != 0 {
		t.Fatalf("%d reports of a restart Close ended, want none", n)
	}
}

// A worker killed between invocations is discarded at once (its pipes and
// cgroup released) and a fresh one started, without waiting for the next
// invocation: a registration seldom leased (the pool leases the most
// recently used first) held a dead worker's descriptors until its
// idle_timeout, which `make chaos` saw as descriptors leaking.
func TestWorkerKilledWhileIdleIsReplacedAtOnce(t *testing.T) {
	var starts atomic.Int32
	started := make(chan Session, 4)
	s := superviseStart(t, func(context.Context) (Session, error) {
		sess, err := shSession(t, `while read x <&3; do echo ok >&4; done`, Limits{})
		if err == nil {
			starts.Add(1)
			started <- sess
		}
		return sess, err
	})
	first := <-started
	if err := syscall.Kill(first.Proc().Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case next := <-started:
		if next == first {
			t.Fatal("the killed worker's session came back")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no fresh worker after the idle one was killed")
	}
	if _, err := first.Proc().Requests().Write([]byte("x\n")); err == nil || !errors.Is(err, os.ErrClosed) {
		t.Errorf("the dead worker's request pipe is still open (write: %v)", err)
	}
	if pid, err := invokeLine(s); err != nil || pid == first.Proc().Pid() {
		t.Fatalf("next invocation: pid %d, %v; want the fresh worker", pid, err)
	}
	if n := starts.Load(); n != 2 {
		t.Errorf("%d starts, want the first and one restart", n)
	}
}
