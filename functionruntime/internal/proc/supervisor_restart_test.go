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
