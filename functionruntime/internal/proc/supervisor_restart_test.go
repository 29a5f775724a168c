package proc

import (
	"context"
	"errors"
	"sync/atomic"
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
		p, err := Start(Config{Path: "/bin/sh", Args: []string{"-c", `while read x <&3; do echo ok >&4; done`},
			Dir: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}, Logger: zerolog.Nop()})
		if err != nil {
			return nil, err
		}
		return &testSession{Base{P: p, Tmp: t.TempDir()}}, nil
	}
	first, err := start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	s := NewSupervisor(SupervisorConfig{Name: "test worker", Start: start, ErrCrashed: errTestCrash, ErrFailed: errors.New("failed")}, first)
	t.Cleanup(func() { _ = s.Close() })
	l := zerolog.Nop()

	// An invocation whose context ends mid-call kills the worker.
	ctx, cancel := context.WithCancel(context.Background())
	err = s.Do(ctx, &l, func(sess Session) error {
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
