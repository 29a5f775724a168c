package restate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// keyedServer serves one handler h of the keyed service "D" of type typ.
func keyedServer(t *testing.T, mode restate.ProtocolMode, typ restate.ServiceType, deliverCancel bool, fn restate.HandlerFunc) (*restate.Endpoint, string) {
	t.Helper()
	htype := map[restate.ServiceType]restate.HandlerType{restate.ServiceTypeVirtualObject: restate.HandlerTypeExclusive,
		restate.ServiceTypeWorkflow: restate.HandlerTypeWorkflow}[typ]
	return serveService(t, mode, restate.Service{Name: "D", Type: typ, Handlers: []restate.Handler{
		{Name: "h", Type: htype, Fn: fn, DeliverCancel: deliverCancel}}})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Rule (spec, Eager state): "If k ∈ state_map: the SDK records a
// GetEagerStateCommandMessage with the result inlined"; "If k ∉ state_map
// and partial_state = false: ... with void"; "If k ∉ state_map and
// partial_state = true: the SDK falls back to the lazy path"; and
// "SetStateCommand, ClearStateCommand, and ClearAllStateCommand MUST also
// update the SDK's local view of state_map so subsequent reads within the
// same invocation see the new value."
func TestStateEagerAndLazy(t *testing.T) {
	counter := func(ctx restate.Context, _ []byte) ([]byte, error) {
		out := map[string]any{"key": ctx.Key()}
		v, found, err := ctx.GetState("count")
		if err != nil {
			return nil, err
		}
		out["count"], out["found"] = string(v), found
		if _, found, err = ctx.GetState("none"); err != nil {
			return nil, err
		}
		out["none"] = found
		if err := ctx.SetState("count", []byte("2")); err != nil {
			return nil, err
		}
		v, _, err = ctx.GetState("count")
		if err != nil {
			return nil, err
		}
		out["after"] = string(v)
		keys, err := ctx.StateKeys()
		if err != nil {
			return nil, err
		}
		out["keys"] = keys
		if err := ctx.ClearState("other"); err != nil {
			return nil, err
		}
		return mustJSON(out), nil
	}
	for _, v := range versions {
		for _, c := range []struct {
			name    string
			eager   map[string]string
			partial bool
			want    []wire.MessageType
		}{
			{"eager, complete", map[string]string{"count": "1", "other": "x"}, false, []wire.MessageType{
				wire.GetEagerStateCommandType, wire.GetEagerStateCommandType, wire.SetStateCommandType, wire.GetEagerStateCommandType,
				wire.GetEagerStateKeysCommandType, wire.ClearStateCommandType, wire.OutputCommandType, wire.EndMessageType}},
			{"lazy (partial, nothing eager)", nil, true, []wire.MessageType{
				wire.GetLazyStateCommandType, wire.GetLazyStateCommandType, wire.SetStateCommandType, wire.GetEagerStateCommandType,
				wire.GetLazyStateKeysCommandType, wire.ClearStateCommandType, wire.OutputCommandType, wire.EndMessageType}},
		} {
			t.Run(fmt.Sprintf("v%d/%s", v, c.name), func(t *testing.T) {
				_, url := keyedServer(t, restate.BidiStream, restate.ServiceTypeVirtualObject, false, counter)
				store := &restatetest.Keyed{State: map[string][]byte{"count": []byte("1"), "other": []byte("x")}}
				got := playSteps(t, url, v, "h", []any{restatetest.StartKeyed("inv_state", "k1", 1, c.eager, c.partial), restatetest.Input(nil)}, store.Complete)
				wantFrameTypes(t, got, c.want...)
				want := `{"after":"2","count":"1","found":true,"key":"k1","keys":["count","other"],"none":false}`
				if o := outputValue(t, got); o != want {
					t.Fatalf("output %s, want %s", o, want)
				}
				if len(store.State) != 1 || string(store.State["count"]) != "2" {
					t.Fatalf("state after the invocation %q, want count=2 only", store.State)
				}
			})
		}
	}
}

// Rule (spec, Awakeable identifier and Signals): an awakeable's id is
// surfaced to user code and handed to whoever completes it; its result is
// the signal of its index, a value or a failure (rejection).
func TestAwakeableResolvedAndRejected(t *testing.T) {
	publishThenAwait := func(ctx restate.Context, _ []byte) ([]byte, error) {
		id, f, err := ctx.Awakeable()
		if err != nil {
			return nil, err
		}
		if _, err := ctx.Run("publish", func(context.Context) ([]byte, error) { return []byte(id), nil }); err != nil {
			return nil, err
		}
		outs, err := ctx.Await([]restate.Future{f}, restate.AwaitAll, 20*time.Second)
		if err != nil {
			return nil, err
		}
		if outs[0].Failure != nil {
			return nil, outs[0].Failure
		}
		return outs[0].Value, nil
	}
	for _, v := range versions {
		for _, c := range []struct {
			name   string
			signal proto.Message
			check  func(t *testing.T, got []restatetest.Frame)
		}{
			{"resolved", restatetest.Signal(17, []byte(`"approved"`)), func(t *testing.T, got []restatetest.Frame) {
				if o := outputValue(t, got); o != `"approved"` {
					t.Fatalf("output %s", o)
				}
			}},
			{"rejected", restatetest.SignalFailure(17, 500, "not today"), func(t *testing.T, got []restatetest.Frame) {
				o, _ := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2])
				if o.GetFailure().GetCode() != 500 || o.GetFailure().GetMessage() != "not today" {
					t.Fatalf("output %v, want the rejection as a terminal failure", o)
				}
			}},
		} {
			t.Run(fmt.Sprintf("v%d/%s", v, c.name), func(t *testing.T) {
				_, url := keyedServer(t, restate.BidiStream, restate.ServiceTypeService, false, publishThenAwait)
				var id string
				got := playSteps(t, url, v, "h", []any{restatetest.Start("inv_awk", 1), restatetest.Input(nil)}, func(f restatetest.Frame) []proto.Message {
					if p, ok := restatetest.Message[*servicev1.ProposeRunCompletionMessage](f); ok {
						id = string(p.GetValue())
						return []proto.Message{c.signal}
					}
					return nil
				})
				if !strings.HasPrefix(id, "sign_1") {
					t.Fatalf("published id %q, want sign_1...", id)
				}
				c.check(t, got)
			})
		}
	}
}

// Rule (spec, Suspension): an invocation awaiting an awakeable suspends
// on its signal (waiting_signals, with CANCEL); the runtime resumes it
// with the signal replayed and the await completes without running
// anything again. REQUEST_RESPONSE suspends at once.
func TestAwakeableSuspensionAndResumption(t *testing.T) {
	first := servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED
	awaitIt := func(ctx restate.Context, _ []byte) ([]byte, error) {
		_, f, err := ctx.Awakeable()
		if err != nil {
			return nil, err
		}
		outs, err := ctx.Await([]restate.Future{f}, restate.AwaitAll, time.Hour)
		if err != nil {
			return nil, err
		}
		return outs[0].Value, nil
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			ep, _ := keyedServer(t, restate.RequestResponse, restate.ServiceTypeService, false, awaitIt)
			attempt := func(msgs ...any) []restatetest.Frame {
				req := httptest.NewRequest(http.MethodPost, "/invoke/D/h", bytes.NewReader(restatetest.Encode(msgs...)))
				req.Header.Set("Content-Type", restatetest.ContentType(v))
				rec := httptest.NewRecorder()
				ep.ServeHTTP(rec, req)
				frames, err := restatetest.Decode(rec.Body.Bytes())
				if err != nil || rec.Code != http.StatusOK {
					t.Fatalf("HTTP %d, %v", rec.Code, err)
				}
				return frames
			}
			got := attempt(restatetest.Start("inv_rr", 1), restatetest.Input(nil))
			wantFrameTypes(t, got, wire.SuspensionMessageType)
			s, _ := restatetest.Message[*servicev1.SuspensionMessage](got[0])
			want := &servicev1.SuspensionMessage{WaitingCompletions: []uint32{}, WaitingSignals: []uint32{1, 17}}
			if v == 7 {
				want = &servicev1.SuspensionMessage{AwaitingOn: &servicev1.Future{WaitingSignals: []uint32{1, 17}, CombinatorType: first}}
			}
			if !proto.Equal(s, want) {
				t.Fatalf("suspension %v, want %v", s, want)
			}
			got = attempt(restatetest.Start("inv_rr", 2), restatetest.Input(nil), restatetest.Signal(17, []byte("42")))
			wantFrameTypes(t, got, wire.OutputCommandType, wire.EndMessageType)
			if o := outputValue(t, got); o != "42" {
				t.Fatalf("output %s, want the signal's value", o)
			}
		})
	}
}

// Rule (spec, Commands): a workflow's handlers await (GetPromise), peek
// (PeekPromise) and complete (CompletePromise) its promises; a promise
// completed once cannot be completed again, which the completion reports
// as a failure.
func TestPromises(t *testing.T) {
	wf := func(ctx restate.Context, _ []byte) ([]byte, error) {
		var trail []string
		peek, err := ctx.PeekPromise("approval")
		if err != nil {
			return nil, err
		}
		trail = append(trail, fmt.Sprintf("peek:%v", peek))
		f, err := ctx.Promise("approval")
		if err != nil {
			return nil, err
		}
		outs, err := ctx.Await([]restate.Future{f}, restate.AwaitAll, 20*time.Second)
		if err != nil {
			return nil, err
		}
		trail = append(trail, "get:"+string(outs[0].Value))
		if peek, err = ctx.PeekPromise("approval"); err != nil {
			return nil, err
		}
		trail = append(trail, "peek:"+string(peek.Value))
		err = ctx.CompletePromise("approval", restate.Outcome{Value: []byte(`"again"`)})
		var te *restate.TerminalError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("second completion: %v, want a terminal error", err)
		}
		trail = append(trail, fmt.Sprintf("again:%d", te.Code))
		if err := ctx.CompletePromise("result", restate.Outcome{Failure: &restate.TerminalError{Code: 400, Message: "denied"}}); err != nil {
			return nil, err
		}
		return mustJSON(trail), nil
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			_, url := keyedServer(t, restate.BidiStream, restate.ServiceTypeWorkflow, false, wf)
			store := &restatetest.Keyed{}
			got := playSteps(t, url, v, "h", []any{restatetest.StartKeyed("inv_wf", "signup-1", 1, nil, true), restatetest.Input(nil)}, func(f restatetest.Frame) []proto.Message {
				out := store.Complete(f)
				// A shared handler resolves the promise while run awaits it.
				if _, ok := restatetest.Message[*servicev1.GetPromiseCommandMessage](f); ok {
					out = append(out, store.Resolve("approval", []byte(`"yes"`))...)
				}
				return out
			})
			wantFrameTypes(t, got, wire.PeekPromiseCommandType, wire.GetPromiseCommandType, wire.PeekPromiseCommandType,
				wire.CompletePromiseCommandType, wire.CompletePromiseCommandType, wire.OutputCommandType, wire.EndMessageType)
			if o := outputValue(t, got); o != `["peek:\u003cnil\u003e","get:\"yes\"","peek:\"yes\"","again:409"]` {
				t.Fatalf("output %s", o)
			}
			if f := store.Promises["result"]; f == nil || f.GetCode() != 400 || f.GetMessage() != "denied" {
				t.Fatalf("promise result = %v, want the rejection", f)
			}
		})
	}
}

// Rule (spec, Commands): "CompleteAwakeableCommand: Resolve a
// previously-created awakeable in another invocation"; SendSignalCommand
// "is also used internally to cancel invocations": the built-in CANCEL
// index with a void result.
func TestCompleteAwakeableAndCancelInvocation(t *testing.T) {
	h := func(ctx restate.Context, _ []byte) ([]byte, error) {
		if err := ctx.CompleteAwakeable("sign_1other", restate.Outcome{Value: []byte(`{"ok":1}`)}); err != nil {
			return nil, err
		}
		if err := ctx.CompleteAwakeable("sign_1third", restate.Outcome{Failure: &restate.TerminalError{Message: "no"}}); err != nil {
			return nil, err
		}
		return nil, ctx.CancelInvocation("inv_1victim")
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			_, url := keyedServer(t, restate.BidiStream, restate.ServiceTypeService, false, h)
			got := playSteps(t, url, v, "h", []any{restatetest.Start("inv_c", 1), restatetest.Input(nil)}, nil)
			wantFrameTypes(t, got, wire.CompleteAwakeableCommandType, wire.CompleteAwakeableCommandType, wire.SendSignalCommandType,
				wire.OutputCommandType, wire.EndMessageType)
			a, _ := restatetest.Message[*servicev1.CompleteAwakeableCommandMessage](got[0])
			b, _ := restatetest.Message[*servicev1.CompleteAwakeableCommandMessage](got[1])
			s, _ := restatetest.Message[*servicev1.SendSignalCommandMessage](got[2])
			if a.GetAwakeableId() != "sign_1other" || string(a.GetValue().GetContent()) != `{"ok":1}` ||
				b.GetFailure().GetCode() != 500 || b.GetFailure().GetMessage() != "no" {
				t.Fatalf("CompleteAwakeable commands %v, %v", a, b)
			}
			if s.GetTargetInvocationId() != "inv_1victim" || s.GetIdx() != 1 || s.GetVoid() == nil {
				t.Fatalf("SendSignal %v, want CANCEL (1, void) to inv_1victim", s)
			}
		})
	}
}

// DeliverCancel: the CANCEL signal fails the wait it beats with
// ErrCancelled (once) instead of ending the attempt; the handler goes on
// (a journaled compensation step, a later wait that completes) and its
// return is the output. On replay the same wait sees it again, so the
// journal the handler reproduces is the same.
func TestDeliverCancel(t *testing.T) {
	compensating := func(ctx restate.Context, _ []byte) ([]byte, error) {
		timer, err := ctx.Sleep(time.Hour)
		if err != nil {
			return nil, err
		}
		_, err = ctx.Await([]restate.Future{timer}, restate.AwaitAll, 20*time.Second)
		if !errors.Is(err, restate.ErrCancelled) {
			return nil, fmt.Errorf("the wait returned %v, want ErrCancelled", err)
		}
		if _, err := ctx.Run("undo", func(context.Context) ([]byte, error) { return []byte("undone"), nil }); err != nil {
			return nil, fmt.Errorf("compensation after the cancel: %w", err)
		}
		short, err := ctx.Sleep(time.Millisecond)
		if err != nil {
			return nil, err
		}
		if _, err := ctx.Await([]restate.Future{short}, restate.AwaitAll, 20*time.Second); err != nil {
			return nil, fmt.Errorf("a wait after the cancel was taken: %w", err)
		}
		return nil, &restate.TerminalError{Code: restate.CodeCancelled, Message: "cancelled after undo"}
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			_, url := keyedServer(t, restate.BidiStream, restate.ServiceTypeService, true, compensating)
			got := playSteps(t, url, v, "h", []any{restatetest.Start("inv_dc", 1), restatetest.Input(nil)}, func(f restatetest.Frame) []proto.Message {
				if s, ok := restatetest.Message[*servicev1.SleepCommandMessage](f); ok {
					if s.GetResultCompletionId() == 1 {
						return []proto.Message{restatetest.Cancel()}
					}
					return []proto.Message{restatetest.SleepDone(s.GetResultCompletionId())}
				}
				return nil
			})
			wantFrameTypes(t, got, wire.SleepCommandType, wire.RunCommandType, wire.ProposeRunCompletionMessageType,
				wire.SleepCommandType, wire.OutputCommandType, wire.EndMessageType)
			o, _ := restatetest.Message[*servicev1.OutputCommandMessage](got[4])
			if o.GetFailure().GetCode() != 409 || o.GetFailure().GetMessage() != "cancelled after undo" {
				t.Fatalf("output %v, want the handler's own failure", o)
			}

			// The replay: the cancel arrived before the timer, so the same
			// wait fails again and the recorded run is not executed.
			got = playSteps(t, url, v, "h", []any{restatetest.Start("inv_dc", 7), restatetest.Input(nil),
				restatetest.Sleep(1, 1), restatetest.Cancel(), restatetest.Run(2, "undo"), restatetest.RunValue(2, []byte("undone")),
				restatetest.Sleep(3, 1), restatetest.SleepDone(3)}, nil)
			wantFrameTypes(t, got, wire.OutputCommandType, wire.EndMessageType)
		})
	}
}

// A send is no wait: under a pending CANCEL it returns the callee's
// invocation id (the message went out, the callee runs), and the
// cancellation reaches the handler at its next wait, as in the SDKs.
func TestSendIsNoCancellationPoint(t *testing.T) {
	for _, v := range versions {
		// Without DeliverCancel the handler's context ends with the
		// CANCEL: its send ends cancelled, and so does the invocation.
		t.Run(fmt.Sprintf("v%d/without DeliverCancel", v), func(t *testing.T) {
			var sendErr error
			h := func(ctx restate.Context, _ []byte) ([]byte, error) {
				_, sendErr = ctx.Send(restate.SendRequest{CallRequest: restate.CallRequest{Service: "Other", Handler: "later"}})
				return nil, sendErr
			}
			_, url := keyedServer(t, restate.BidiStream, restate.ServiceTypeService, false, h)
			start := []any{restatetest.Start("inv_s", 2), restatetest.Input(nil), restatetest.Cancel()}
			got := playSteps(t, url, v, "h", start, (&restatetest.Completer{}).Complete)
			o, _ := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2])
			if !errors.Is(sendErr, restate.ErrCancelled) || o.GetFailure().GetCode() != 409 {
				t.Fatalf("send %v, frames %v; want ErrCancelled and the output 409", sendErr, got)
			}
		})
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			var sendErr, waitErr error
			var sent string
			h := func(ctx restate.Context, _ []byte) ([]byte, error) {
				sent, sendErr = ctx.Send(restate.SendRequest{CallRequest: restate.CallRequest{Service: "Other", Handler: "later"}})
				timer, _ := ctx.Sleep(time.Hour)
				_, waitErr = ctx.Await([]restate.Future{timer}, restate.AwaitAll, 20*time.Second)
				return nil, waitErr
			}
			_, url := keyedServer(t, restate.BidiStream, restate.ServiceTypeService, true, h)
			start := []any{restatetest.Start("inv_s", 2), restatetest.Input(nil), restatetest.Cancel()}
			got := playSteps(t, url, v, "h", start, (&restatetest.Completer{}).Complete)
			if sendErr != nil || sent == "" {
				t.Fatalf("send under a pending CANCEL: %q %v, want the callee's invocation id", sent, sendErr)
			}
			if !errors.Is(waitErr, restate.ErrCancelled) {
				t.Fatalf("the wait after the send: %v, want ErrCancelled", waitErr)
			}
			o, _ := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2])
			if o.GetFailure().GetCode() != 409 {
				t.Fatalf("frames %v, want the output 409", got)
			}
		})
	}
}

// DeliverCancel, but the handler fails retryably before any wait saw the
// CANCEL: a retry would only run it again, so the invocation ends
// cancelled (409), as without DeliverCancel; a handler that saw it and
// then fails retryably is retried, to finish what it compensates.
// EndsCancelled tells the handler beforehand which it will be (for its
// log line and metrics).
func TestDeliverCancelUnseenRetryableFailureEnds(t *testing.T) {
	for _, v := range versions {
		for _, c := range []struct {
			name   string
			await  bool
			output bool
			// step: the failure is a step's (RunFail), which must not end
			// the attempt before these rules apply.
			step bool
		}{{"unseen", false, true, false}, {"seen", true, false, false}, {"unseen, a step failed", false, true, true}} {
			t.Run(fmt.Sprintf("v%d/%s", v, c.name), func(t *testing.T) {
				var ends atomic.Bool
				h := func(ctx restate.Context, _ []byte) ([]byte, error) {
					if c.step {
						_, run, err := ctx.RunStart("step")
						if err != nil {
							return nil, err
						}
						if err := ctx.RunFail(run, &restate.RetryableError{Message: "flaky"}); err != nil {
							return nil, err
						}
					}
					if c.await {
						timer, _ := ctx.Sleep(time.Hour)
						_, _ = ctx.Await([]restate.Future{timer}, restate.AwaitAll, 20*time.Second)
					}
					err := &restate.RetryableError{Message: "flaky"}
					if ctx.EndsCancelled(&restate.TerminalError{Code: 422}) {
						t.Error("EndsCancelled of a terminal failure: true, want false (it is the output)")
					}
					ends.Store(ctx.EndsCancelled(err))
					return nil, err
				}
				_, url := keyedServer(t, restate.BidiStream, restate.ServiceTypeService, true, h)
				start := []any{restatetest.Start("inv_u", 2), restatetest.Input(nil), restatetest.Cancel()}
				got := playSteps(t, url, v, "h", start, nil)
				last := got[len(got)-1].Type()
				if c.output && last != wire.EndMessageType || !c.output && last != wire.ErrorMessageType {
					t.Fatalf("frames %v", got)
				}
				if c.output {
					o, _ := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2])
					if o.GetFailure().GetCode() != 409 {
						t.Fatalf("output %v, want 409", o)
					}
				}
				if ends.Load() != c.output {
					t.Fatalf("EndsCancelled = %v, want %v", ends.Load(), c.output)
				}
			})
		}
	}
}
