package bridge

import (
	"context"
	"errors"
	"testing"

	"github.com/fnbridge/fnbridge/restate"
)

// Only Restate's CANCEL makes an ended attempt "cancelled" (a terminal
// 409); an attempt cut short by shutdown or a closed stream is retried,
// and its log line and span must not say it was cancelled.
func TestInterruptedNamesWhatEndedTheAttempt(t *testing.T) {
	failed := errors.New("rpc error: code = Canceled desc = context canceled")
	cases := []struct {
		name  string
		cause error
		want  Class
	}{
		{"Restate's CANCEL", restate.ErrCancelled, ClassCancelled},
		{"the stream closed or shutdown", nil, ClassUnavailable},
		{"a suspension", restate.ErrSuspended, ClassUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(c.cause)
			got, ok := classifyCtx(ctx, failed).(*Error)
			if !ok || got.Class != c.want {
				t.Fatalf("classifyCtx: %v, want class %v", got, c.want)
			}
			p := &pool{h: &HandlerConfig{}}
			if e := p.classifyInvoke(ctx, failed); e.Class != c.want {
				t.Fatalf("classifyInvoke: %v, want class %v", e, c.want)
			}
			if c.want != ClassCancelled {
				var te *restate.TerminalError
				if errors.As(toRestate(got), &te) || errors.Is(toRestate(got), restate.ErrCancelled) {
					t.Fatalf("an interrupted attempt became %v: it must stay retryable", toRestate(got))
				}
			}
		})
	}
}
