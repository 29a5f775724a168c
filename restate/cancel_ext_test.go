package restate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// noCancelJournaled fails when frames journal anything only a CANCEL
// signal may cause, or anything at all after the RunCommand: a run
// proposal, an Output, an End.
func noCancelJournaled(t *testing.T, frames []restatetest.Frame) {
	t.Helper()
	for _, f := range frames {
		switch f.Type() {
		case wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType:
			t.Fatalf("frames %v journal a result although Restate never cancelled the invocation", frames)
		}
	}
}

// wantAttemptError checks that frames end with an ErrorMessage (the
// runtime retries the attempt) and journal nothing else but the run.
func wantAttemptError(t *testing.T, frames []restatetest.Frame, code uint32) {
	t.Helper()
	noCancelJournaled(t, frames)
	if len(frames) == 0 {
		t.Fatal("no frames, want an ErrorMessage")
	}
	e, ok := restatetest.Message[*servicev1.ErrorMessage](frames[len(frames)-1])
	if !ok || e.GetCode() != code {
		t.Fatalf("frames %v, want them to end with ErrorMessage %d", frames, code)
	}
}

// A run closure or handler that reports ErrCancelled on its own (the
// bridge does when its FunctionRuntime call was cancelled) must not turn
// into the terminal 409 that only Restate's CANCEL may journal.
func TestErrCancelledWithoutCancelSignalIsRetried(t *testing.T) {
	fromRun := func(ctx restate.Context, _ []byte) ([]byte, error) {
		return ctx.Run("invoke", func(context.Context) ([]byte, error) { return nil, restate.ErrCancelled })
	}
	fromHandler := func(restate.Context, []byte) ([]byte, error) {
		return nil, fmt.Errorf("worker: %w", restate.ErrCancelled)
	}
	for _, v := range versions {
		for name, fn := range map[string]restate.HandlerFunc{"run": fromRun, "handler": fromHandler} {
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				f := newFixture(t, restate.BidiStream, nil)
				if err := f.ep.Bind(restate.Service{Name: "C", Handlers: []restate.Handler{{Name: "h", Fn: fn}}}); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				s := restatetest.Open(ctx, f.client, restatetest.InvokeURL(f.url, "C", "h"), v)
				defer s.Close()
				got, err := s.Play([]any{restatetest.Start("inv_nc", 1), restatetest.Input(nil)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				wantAttemptError(t, got, uint32(restate.CodeUnavailable))
			})
		}
	}
}

// When the handler's context ends without a CANCEL signal (the stream
// closed, the server shutting down: the request context is done), nothing
// the handler or its run returns afterwards is journaled.
func TestRequestDoneJournalsNothing(t *testing.T) {
	results := map[string]func(ctx context.Context) ([]byte, error){
		"run returns ErrCancelled like the bridge": func(ctx context.Context) ([]byte, error) { return nil, restate.ErrCancelled },
		"run returns a terminal error":             func(context.Context) ([]byte, error) { return nil, &restate.TerminalError{Code: 422} },
		"run returns a value":                      func(context.Context) ([]byte, error) { return []byte("late"), nil },
		"run returns ctx.Err()":                    func(ctx context.Context) ([]byte, error) { return nil, ctx.Err() },
	}
	for _, v := range versions {
		for name, result := range results {
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				started := make(chan struct{})
				ep := restate.NewEndpoint(restate.Config{})
				err := ep.Bind(restate.Service{Name: "C", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, _ []byte) ([]byte, error) {
					out, err := ctx.Run("invoke", func(rctx context.Context) ([]byte, error) {
						close(started)
						<-rctx.Done()
						return result(rctx)
					})
					if err != nil && ctx.Err() != nil {
						return nil, restate.ErrCancelled // what a handler that maps a done ctx to cancellation does
					}
					return out, err
				}}}})
				if err != nil {
					t.Fatal(err)
				}
				s := restatetest.ServeStream(ep, "/invoke/C/h", v)
				if err := s.Send(restatetest.Start("inv_rd", 1), restatetest.Input(nil)); err != nil {
					t.Fatal(err)
				}
				<-started
				s.Cancel()
				status, frames, body, err := s.Wait()
				if status != 200 || err != nil {
					t.Fatalf("HTTP %d, %v: %q", status, err, body)
				}
				if len(frames) == 0 || frames[0].Type() != wire.RunCommandType {
					t.Fatalf("frames %v, want the RunCommand first", frames)
				}
				wantAttemptError(t, frames, uint32(restate.CodeUnavailable))
			})
		}
	}
}

// The one path that may journal 409: Restate's CANCEL, also when the run
// returns ErrCancelled itself.
func TestCancelSignalStillJournals409(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			started := make(chan struct{})
			ep := restate.NewEndpoint(restate.Config{})
			err := ep.Bind(restate.Service{Name: "C", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, _ []byte) ([]byte, error) {
				return ctx.Run("invoke", func(rctx context.Context) ([]byte, error) {
					close(started)
					<-rctx.Done()
					if !errors.Is(context.Cause(rctx), restate.ErrCancelled) {
						return nil, fmt.Errorf("cause %v, want ErrCancelled", context.Cause(rctx))
					}
					return nil, restate.ErrCancelled
				})
			}}}})
			if err != nil {
				t.Fatal(err)
			}
			s := restatetest.ServeStream(ep, "/invoke/C/h", v)
			if err := s.Send(restatetest.Start("inv_c", 1), restatetest.Input(nil)); err != nil {
				t.Fatal(err)
			}
			<-started
			if err := s.Send(restatetest.Cancel()); err != nil {
				t.Fatal(err)
			}
			_ = s.CloseSend()
			_, frames, _, err := s.Wait()
			if err != nil {
				t.Fatal(err)
			}
			wantStream(t, frames, restatetest.Run(1, "invoke"), outputFailure(409, "cancelled"), end)
		})
	}
}
