package restate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// stepsServer serves handlers of service "D" over h2c in the given mode.
func stepsServer(t *testing.T, mode restate.ProtocolMode, handlers map[string]restate.HandlerFunc) (*restate.Endpoint, string) {
	t.Helper()
	svc := restate.Service{Name: "D"}
	for name, fn := range handlers {
		svc.Handlers = append(svc.Handlers, restate.Handler{Name: name, Fn: fn})
	}
	return serveService(t, mode, svc)
}

// serveService serves svc (which tests name "D") over h2c in the given
// mode.
func serveService(t *testing.T, mode restate.ProtocolMode, svc restate.Service) (*restate.Endpoint, string) {
	t.Helper()
	ep := restate.NewEndpoint(restate.Config{ProtocolMode: mode})
	if err := ep.Bind(svc); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(ep)
	srv.Config = restate.NewHTTPServer("", ep)
	srv.Start()
	t.Cleanup(srv.Close)
	return ep, srv.URL
}

// playSteps runs one BIDI invocation of D/handler; the runtime side
// answers proposals, timers and calls at once.
func playSteps(t *testing.T, url string, v int, handler string, start []any, inject func(restatetest.Frame) []proto.Message) []restatetest.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := restatetest.Open(ctx, restatetest.NewH2CClient(), restatetest.InvokeURL(url, "D", handler), v)
	defer s.Close()
	got, err := s.Play(start, inject)
	if err != nil {
		t.Fatalf("after %v: %v", got, err)
	}
	return got
}

// openSteps opens a BIDI invocation of D/handler driven by hand (not Play,
// which answers proposals as restate-server does) and sends its start and
// an empty input; the stream closes when the test ends.
func openSteps(t *testing.T, url string, v int, handler, invocationID string) *restatetest.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s := restatetest.Open(ctx, restatetest.NewH2CClient(), restatetest.InvokeURL(url, "D", handler), v)
	t.Cleanup(s.Close)
	if err := s.Send(restatetest.Start(invocationID, 1), restatetest.Input(nil)); err != nil {
		t.Fatal(err)
	}
	return s
}

func frameTypes(fs []restatetest.Frame) []wire.MessageType {
	out := make([]wire.MessageType, len(fs))
	for i, f := range fs {
		out[i] = f.Type()
	}
	return out
}

func wantFrameTypes(t *testing.T, fs []restatetest.Frame, want ...wire.MessageType) {
	t.Helper()
	if fmt.Sprint(frameTypes(fs)) != fmt.Sprint(want) {
		t.Fatalf("frames %v, want types %v", fs, want)
	}
}

func outputValue(t *testing.T, fs []restatetest.Frame) string {
	t.Helper()
	for _, f := range fs {
		if o, ok := restatetest.Message[*servicev1.OutputCommandMessage](f); ok {
			if o.GetFailure() != nil {
				t.Fatalf("output failed: %v", o.GetFailure())
			}
			return string(o.GetValue().GetContent())
		}
	}
	t.Fatalf("no OutputCommand in %v", fs)
	return ""
}

// stepsHandler runs two steps, sleeps, calls and sends, counting the
// closures it executes.
func stepsHandler(executed *atomic.Int32) restate.HandlerFunc {
	return func(ctx restate.Context, _ []byte) ([]byte, error) {
		var trail []string
		for _, name := range []string{"a", "b"} {
			out, run, err := ctx.RunStart(name)
			if err != nil {
				return nil, err
			}
			if out == nil {
				executed.Add(1)
				if err := ctx.RunComplete(run, restate.Outcome{Value: []byte(name + "-ran")}); err != nil {
					return nil, err
				}
				out = &restate.Outcome{Value: []byte(name + "-ran")}
			}
			trail = append(trail, string(out.Value))
		}
		timer, err := ctx.Sleep(time.Minute)
		if err != nil {
			return nil, err
		}
		if _, err := ctx.Await([]restate.Future{timer}, restate.AwaitAll, 20*time.Second); err != nil {
			return nil, err
		}
		call, err := ctx.Call(restate.CallRequest{Service: "Other", Handler: "h", Key: "k", Input: []byte("q")})
		if err != nil {
			return nil, err
		}
		outs, err := ctx.Await([]restate.Future{call}, restate.AwaitAll, 20*time.Second)
		if err != nil {
			return nil, err
		}
		if f := outs[0].Failure; f != nil {
			trail = append(trail, fmt.Sprintf("call failed %d %s", f.Code, f.Message))
		} else {
			trail = append(trail, string(outs[0].Value))
		}
		id, err := ctx.Send(restate.SendRequest{CallRequest: restate.CallRequest{Service: "Other", Handler: "later"}, Delay: time.Hour})
		if err != nil {
			return nil, err
		}
		return []byte(strings.Join(append(trail, id), "|")), nil
	}
}

func TestStepsProcessing(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			var executed atomic.Int32
			_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"steps": stepsHandler(&executed)})
			c := &restatetest.Completer{CallResult: func(m *servicev1.CallCommandMessage) []byte { return []byte("called:" + string(m.GetParameter())) }}
			before := time.Now()
			got := playSteps(t, url, v, "steps", []any{restatetest.Start("inv_steps", 1), restatetest.Input(nil)}, c.Complete)
			after := time.Now()
			wantFrameTypes(t, got, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.RunCommandType, wire.ProposeRunCompletionMessageType,
				wire.SleepCommandType, wire.CallCommandType, wire.OneWayCallCommandType, wire.OutputCommandType, wire.EndMessageType)
			if out := outputValue(t, got); out != "a-ran|b-ran|called:q|inv_callee_2" {
				t.Fatalf("output %q", out)
			}
			if executed.Load() != 2 {
				t.Fatalf("%d closures executed, want 2", executed.Load())
			}
			s, _ := restatetest.Message[*servicev1.SleepCommandMessage](got[4])
			if w := s.GetWakeUpTime(); w < uint64(before.Add(time.Minute).UnixMilli()) || w > uint64(after.Add(time.Minute).UnixMilli()) {
				t.Fatalf("wake_up_time %d is not a minute after the sleep (%v..%v)", w, before, after)
			}
			call, _ := restatetest.Message[*servicev1.CallCommandMessage](got[5])
			if call.GetServiceName() != "Other" || call.GetHandlerName() != "h" || call.GetKey() != "k" || string(call.GetParameter()) != "q" {
				t.Fatalf("CallCommand %v", call)
			}
			send, _ := restatetest.Message[*servicev1.OneWayCallCommandMessage](got[6])
			if it := send.GetInvokeTime(); it < uint64(before.Add(time.Hour).UnixMilli()) || it > uint64(after.Add(time.Hour).UnixMilli()) {
				t.Fatalf("invoke_time %d is not an hour after the send", it)
			}
		})
	}
}

// A wait given up through its context (a durable-steps client that hung
// up) returns that context's error and journals nothing; the same future
// can be awaited again and completes.
func TestAwaitContextGivesUpAndTheFutureStays(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			sawSleep, abandoned := make(chan struct{}), make(chan struct{})
			h := func(ctx restate.Context, _ []byte) ([]byte, error) {
				timer, err := ctx.Sleep(time.Minute)
				if err != nil {
					return nil, err
				}
				wctx, cancel := context.WithCancel(context.Background())
				go func() { <-sawSleep; cancel() }()
				_, werr := ctx.AwaitContext(wctx, []restate.Future{timer}, restate.AwaitAll, 20*time.Second)
				close(abandoned)
				if _, err := ctx.Await([]restate.Future{timer}, restate.AwaitAll, 20*time.Second); err != nil {
					return nil, err
				}
				return []byte(fmt.Sprintf("gave up: %v; then the timer fired", werr)), nil
			}
			_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": h})
			// The timer fires only once the first wait was given up.
			got := playSteps(t, url, v, "h", []any{restatetest.Start("inv_give_up", 1), restatetest.Input(nil)}, func(f restatetest.Frame) []proto.Message {
				m, ok := f.Message.(*servicev1.SleepCommandMessage)
				if !ok {
					return nil
				}
				close(sawSleep)
				<-abandoned
				return []proto.Message{restatetest.SleepDone(m.GetResultCompletionId())}
			})
			wantFrameTypes(t, got, wire.SleepCommandType, wire.OutputCommandType, wire.EndMessageType)
			if out := outputValue(t, got); out != "gave up: context canceled; then the timer fired" {
				t.Fatalf("output %q", out)
			}
		})
	}
}

// A wait for a run's result to be durable given up through its context
// (the bridge's, once the function it waited for was killed at its
// timeout) returns that context's error, and the handler's failure reaches
// the runtime at once: the acknowledgement that never came does not hold
// the attempt's ErrorMessage back.
func TestRunCompleteContextGivesUp(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			proposed := make(chan struct{})
			h := func(ctx restate.Context, _ []byte) ([]byte, error) {
				_, run, err := ctx.RunStart("a")
				if err != nil {
					return nil, err
				}
				wctx, cancel := context.WithCancel(context.Background())
				go func() { <-proposed; cancel() }()
				if err := ctx.RunCompleteContext(wctx, run, restate.Outcome{Value: []byte(`1`)}); !errors.Is(err, context.Canceled) {
					return nil, fmt.Errorf("RunCompleteContext = %v, want context.Canceled", err)
				}
				return nil, &restate.RetryableError{Code: restate.CodeGatewayTimeout, Message: "the function was killed at its timeout"}
			}
			_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": h})
			// This runtime keeps the stream open and answers nothing.
			s := openSteps(t, url, v, "h", "inv_no_ack")
			var got []restatetest.Frame
			for len(got) == 0 || !restatetest.Terminal(got[len(got)-1].Type()) {
				f, err := s.Next()
				if err != nil {
					t.Fatalf("after %v: %v", got, err)
				}
				if _, ok := f.Message.(*servicev1.ProposeRunCompletionMessage); ok {
					close(proposed)
				}
				got = append(got, f)
			}
			wantFrameTypes(t, got, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.ErrorMessageType)
			if e := got[2].Message.(*servicev1.ErrorMessage); e.GetCode() != 504 {
				t.Fatalf("ErrorMessage %v, want 504", e)
			}
		})
	}
}

// A replay of the whole journal emits no command again, runs no closure
// and returns the recorded results.
func TestStepsReplay(t *testing.T) {
	journal := []any{restatetest.Input(nil),
		restatetest.Run(1, "a"), restatetest.RunValue(1, []byte("a-recorded")),
		restatetest.Run(2, "b"), restatetest.RunValue(2, []byte("b-recorded")),
		restatetest.Sleep(3, 1), restatetest.SleepDone(3),
		&servicev1.CallCommandMessage{ServiceName: "Other", HandlerName: "h", Key: "k", Parameter: []byte("q"), InvocationIdNotificationIdx: 4, ResultCompletionId: 5},
		restatetest.InvocationID(4, "inv_recorded_call"), restatetest.CallFailure(5, 404, "recorded failure"),
		restatetest.OneWayCall(6, "Other", "later", nil), restatetest.InvocationID(6, "inv_recorded_send"),
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			var executed atomic.Int32
			_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"steps": stepsHandler(&executed)})
			start := append([]any{restatetest.Start("inv_replay", uint32(len(journal)))}, journal...)
			got := playSteps(t, url, v, "steps", start, nil)
			wantFrameTypes(t, got, wire.OutputCommandType, wire.EndMessageType)
			if out := outputValue(t, got); out != "a-recorded|b-recorded|call failed 404 recorded failure|inv_recorded_send" {
				t.Fatalf("output %q", out)
			}
			if executed.Load() != 0 {
				t.Fatalf("%d closures executed on replay", executed.Load())
			}
		})
	}
}

// The protocol: "570 JOURNAL_MISMATCH — the SDK cannot replay the journal
// because its contents diverge from what user code expects."
func TestStepsMismatch(t *testing.T) {
	// The ErrorMessage can reach the runtime before Call returns to the
	// handler, so the handler's result is waited for, not looked at.
	callErrs := make(chan error, 1)
	callFirst := func(ctx restate.Context, _ []byte) ([]byte, error) {
		_, err := ctx.Call(restate.CallRequest{Service: "Other", Handler: "h"})
		callErrs <- err
		return nil, err
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": callFirst})
			got := playSteps(t, url, v, "h", []any{restatetest.Start("inv_mm", 3), restatetest.Input(nil),
				restatetest.Sleep(1, 5), restatetest.SleepDone(1)}, nil)
			wantFrameTypes(t, got, wire.ErrorMessageType)
			e, _ := restatetest.Message[*servicev1.ErrorMessage](got[0])
			if e.GetCode() != 570 || e.GetRelatedCommandIndex() != 1 || e.GetRelatedCommandType() != uint32(wire.SleepCommandType) ||
				!strings.Contains(e.GetMessage(), "the journal has SleepCommand") || !strings.Contains(e.GetMessage(), "the handler issued CallCommand to Other/h") {
				t.Fatalf("ErrorMessage %v, want 570 naming the recorded SleepCommand and the issued CallCommand", e)
			}
			select {
			case err := <-callErrs:
				if !errors.Is(err, restate.ErrAttemptEnded) {
					t.Fatalf("Call returned %v, want ErrAttemptEnded", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Call did not return within 10s of the mismatch")
			}
		})
	}
}

// awaitTwoTimers sleeps twice and awaits both in mode with budget,
// reporting Await's error on errs.
func awaitTwoTimers(mode restate.AwaitMode, budget time.Duration, errs chan<- error) restate.HandlerFunc {
	return func(ctx restate.Context, _ []byte) ([]byte, error) {
		t1, err := ctx.Sleep(time.Minute)
		if err != nil {
			return nil, err
		}
		t2, err := ctx.Sleep(2 * time.Minute)
		if err != nil {
			return nil, err
		}
		_, err = ctx.Await([]restate.Future{t1, t2}, mode, budget)
		errs <- err
		return nil, err
	}
}

// The protocol: "To suspend, the SDK MUST send a SuspensionMessage
// describing the await point as a tree of future combinators, then close
// the stream." A wait over its budget suspends; v5/v6 list the pending
// completions flat, v7 sends a Future tree that CANCEL also resumes.
func TestStepsSuspensionPerVersion(t *testing.T) {
	first, all := servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED, servicev1.CombinatorType_COMBINATOR_TYPE_ALL_COMPLETED
	v7 := map[restate.AwaitMode]*servicev1.Future{
		restate.AwaitAny: {WaitingCompletions: []uint32{1, 2}, WaitingSignals: []uint32{1}, CombinatorType: first},
		restate.AwaitAll: {WaitingSignals: []uint32{1}, CombinatorType: first,
			NestedFutures: []*servicev1.Future{{WaitingCompletions: []uint32{1, 2}, CombinatorType: all}}},
	}
	for _, v := range versions {
		for mode, name := range map[restate.AwaitMode]string{restate.AwaitAny: "any", restate.AwaitAll: "all"} {
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				errs := make(chan error, 1)
				// No completion ever arrives: the 1ms budget runs out.
				_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": awaitTwoTimers(mode, time.Millisecond, errs)})
				got := playSteps(t, url, v, "h", []any{restatetest.Start("inv_susp", 1), restatetest.Input(nil)}, nil)
				wantFrameTypes(t, got, wire.SleepCommandType, wire.SleepCommandType, wire.SuspensionMessageType)
				s, _ := restatetest.Message[*servicev1.SuspensionMessage](got[2])
				want := &servicev1.SuspensionMessage{WaitingCompletions: []uint32{1, 2}, WaitingSignals: []uint32{1}}
				if v == 7 {
					want = &servicev1.SuspensionMessage{AwaitingOn: v7[mode]}
				}
				if !proto.Equal(s, want) {
					t.Fatalf("suspension %v, want %v", s, want)
				}
				if err := <-errs; !errors.Is(err, restate.ErrSuspended) {
					t.Fatalf("Await returned %v, want ErrSuspended", err)
				}
			})
		}
	}
}

// awaitAnyOfTwoTimers sets a minute's and an hour's timer, awaits either
// and sends the outcomes to outs.
func awaitAnyOfTwoTimers(outs chan<- []*restate.Outcome) restate.HandlerFunc {
	return func(ctx restate.Context, _ []byte) ([]byte, error) {
		t1, _ := ctx.Sleep(time.Minute)
		t2, _ := ctx.Sleep(time.Hour)
		o, err := ctx.Await([]restate.Future{t1, t2}, restate.AwaitAny, time.Hour)
		outs <- o
		return nil, err
	}
}

// An await that one completion satisfies (any) returns within its budget
// with the other future's outcome nil.
func TestStepsAwaitAnyReturnsFirst(t *testing.T) {
	outs := make(chan []*restate.Outcome, 1)
	_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": awaitAnyOfTwoTimers(outs)})
	got := playSteps(t, url, 6, "h", []any{restatetest.Start("inv_any", 1), restatetest.Input(nil)}, func(f restatetest.Frame) []proto.Message {
		if s, ok := restatetest.Message[*servicev1.SleepCommandMessage](f); ok && s.GetResultCompletionId() == 1 {
			return []proto.Message{restatetest.SleepDone(1)}
		}
		return nil
	})
	wantFrameTypes(t, got, wire.SleepCommandType, wire.SleepCommandType, wire.OutputCommandType, wire.EndMessageType)
	o := <-outs
	if len(o) != 2 || o[0] == nil || o[0].Failure != nil || o[1] != nil {
		t.Fatalf("outcomes %v, want the first timer complete and the second nil", o)
	}
}

// The protocol: "The relative ordering of notifications … is significant:
// on replay the SDK MUST observe the same relative order it observed when
// processing." The attempt that recorded this journal saw the second
// timer fire first and went on; the first fired later, while it ran. A
// replay holds both completions, and AwaitAny still answers the second
// alone, so the handler takes the same branch.
func TestStepsAwaitAnyReplaysArrivalOrder(t *testing.T) {
	journal := []any{restatetest.Input(nil),
		restatetest.Sleep(1, 1), restatetest.Sleep(2, 1),
		restatetest.SleepDone(2), restatetest.SleepDone(1)}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			outs := make(chan []*restate.Outcome, 1)
			_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": awaitAnyOfTwoTimers(outs)})
			start := append([]any{restatetest.Start("inv_any_replay", uint32(len(journal)))}, journal...)
			got := playSteps(t, url, v, "h", start, nil)
			wantFrameTypes(t, got, wire.OutputCommandType, wire.EndMessageType)
			o := <-outs
			if len(o) != 2 || o[0] != nil || o[1] == nil {
				t.Fatalf("outcomes %v, want the second timer's alone (it completed first)", o)
			}
		})
	}
}

// A step's retryable failure (RunFail, then the handler's
// *RetryableError) ends the attempt with an ErrorMessage whose related
// command is that step ("related_command_index / name / type",
// what restate invocations describe shows), as a failing restate.Run's
// does; nothing is journaled. A step started with RunStartDone (its
// RunCommand not flushed on its own) gets its RunCommand to the runtime
// all the same, before the ErrorMessage.
func TestRunFailNamesTheStep(t *testing.T) {
	for _, v := range versions {
		for _, done := range []bool{false, true} {
			t.Run(fmt.Sprintf("v%d/done=%v", v, done), func(t *testing.T) {
				h := func(ctx restate.Context, _ []byte) ([]byte, error) {
					if _, _, err := ctx.RunStart("first"); err != nil {
						return nil, err
					}
					start := ctx.RunStart
					if done {
						start = ctx.RunStartDone
					}
					_, run, err := start("flaky")
					if err != nil {
						return nil, err
					}
					rerr := &restate.RetryableError{Code: 503, Message: "step \"flaky\" failed: ConnectionError"}
					if err := ctx.RunFail(run, rerr); err != nil {
						t.Errorf("RunFail = %v", err)
					}
					return nil, rerr
				}
				_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": h})
				journal := []any{restatetest.Input(nil), restatetest.Run(1, "first"), restatetest.RunValue(1, []byte("1"))}
				got := playSteps(t, url, v, "h", append([]any{restatetest.Start("inv_fail", uint32(len(journal)))}, journal...), nil)
				wantFrameTypes(t, got, wire.RunCommandType, wire.ErrorMessageType)
				e, _ := restatetest.Message[*servicev1.ErrorMessage](got[1])
				if e.GetCode() != 503 || e.GetMessage() != "step \"flaky\" failed: ConnectionError" || e.GetRelatedCommandIndex() != 2 ||
					e.GetRelatedCommandName() != "flaky" || wire.MessageType(e.GetRelatedCommandType()) != wire.RunCommandType {
					t.Fatalf("ErrorMessage %v, want 503 about command 2, run \"flaky\"", e)
				}
			})
		}
	}
}

// REQUEST_RESPONSE: the runtime closed its side, so a wait that is not
// complete suspends at once, whatever the budget; so does waiting for a
// run's result to become durable.
func TestStepsRequestResponseSuspendsAtOnce(t *testing.T) {
	errs := make(chan error, 1)
	runThenWait := func(ctx restate.Context, _ []byte) ([]byte, error) {
		_, run, err := ctx.RunStart("r")
		if err == nil {
			err = ctx.RunComplete(run, restate.Outcome{Value: []byte("v")})
		}
		errs <- err
		return nil, err
	}
	for _, v := range versions {
		for name, c := range map[string]struct {
			fn   restate.HandlerFunc
			want []wire.MessageType
		}{
			"await": {awaitTwoTimers(restate.AwaitAll, time.Hour, errs), []wire.MessageType{wire.SleepCommandType, wire.SleepCommandType, wire.SuspensionMessageType}},
			"run":   {runThenWait, []wire.MessageType{wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.SuspensionMessageType}},
		} {
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				ep, _ := stepsServer(t, restate.RequestResponse, map[string]restate.HandlerFunc{"h": c.fn})
				body := restatetest.Encode(restatetest.Start("inv_rr", 1), restatetest.Input(nil))
				req := httptest.NewRequest(http.MethodPost, "/invoke/D/h", bytes.NewReader(body))
				req.Header.Set("Content-Type", restatetest.ContentType(v))
				rec := httptest.NewRecorder()
				served := make(chan struct{})
				go func() { ep.ServeHTTP(rec, req); close(served) }()
				select {
				case <-served:
				case <-time.After(10 * time.Second):
					t.Fatal("the attempt waited instead of suspending at once")
				}
				frames, err := restatetest.Decode(rec.Body.Bytes())
				if err != nil || rec.Code != http.StatusOK {
					t.Fatalf("HTTP %d, %v", rec.Code, err)
				}
				wantFrameTypes(t, frames, c.want...)
				if err := <-errs; !errors.Is(err, restate.ErrSuspended) {
					t.Fatalf("got %v, want ErrSuspended", err)
				}
			})
		}
	}
}

// A CANCEL signal while waiting ends the wait with ErrCancelled; the
// handler returning it ends the invocation with the terminal 409.
func TestStepsCancelWhileAwaiting(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			errs := make(chan error, 1)
			_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": awaitTwoTimers(restate.AwaitAny, time.Hour, errs)})
			got := playSteps(t, url, v, "h", []any{restatetest.Start("inv_cancel", 1), restatetest.Input(nil)}, func(f restatetest.Frame) []proto.Message {
				if s, ok := restatetest.Message[*servicev1.SleepCommandMessage](f); ok && s.GetResultCompletionId() == 2 {
					return []proto.Message{restatetest.Cancel()}
				}
				return nil
			})
			wantFrameTypes(t, got, wire.SleepCommandType, wire.SleepCommandType, wire.OutputCommandType, wire.EndMessageType)
			o, _ := restatetest.Message[*servicev1.OutputCommandMessage](got[2])
			if o.GetFailure().GetCode() != 409 {
				t.Fatalf("output %v, want the 409 failure", o)
			}
			if err := <-errs; !errors.Is(err, restate.ErrCancelled) {
				t.Fatalf("Await returned %v, want ErrCancelled", err)
			}
		})
	}
}

// "Commands reach Restate before their closure executes": the runtime
// sees the RunCommand while the closure is still blocked, for Run and for
// RunStart.
func TestRunCommandReachesRuntimeBeforeClosure(t *testing.T) {
	seen := make(chan struct{})
	entered := make(chan struct{}, 1)
	closure := func() ([]byte, error) {
		entered <- struct{}{}
		<-seen
		return []byte("done"), nil
	}
	handlers := map[string]restate.HandlerFunc{
		"run": func(ctx restate.Context, _ []byte) ([]byte, error) {
			return ctx.Run("step", func(context.Context) ([]byte, error) { return closure() })
		},
		"runstart": func(ctx restate.Context, _ []byte) ([]byte, error) {
			_, run, err := ctx.RunStart("step")
			if err != nil {
				return nil, err
			}
			out, _ := closure()
			return out, ctx.RunComplete(run, restate.Outcome{Value: out})
		},
	}
	for _, v := range versions {
		for _, name := range []string{"run", "runstart"} {
			t.Run(fmt.Sprintf("v%d/%s", v, name), func(t *testing.T) {
				seen = make(chan struct{})
				_, url := stepsServer(t, restate.BidiStream, handlers)
				s := openSteps(t, url, v, name, "inv_flush")
				// The closure blocks until this frame was read, so only a
				// RunCommand flushed before it ran can arrive here.
				f, err := s.Next()
				if err != nil {
					t.Fatalf("no frame while the closure runs: %v", err)
				}
				if r, ok := restatetest.Message[*servicev1.RunCommandMessage](f); !ok || r.GetName() != "step" {
					t.Fatalf("first frame %v, want RunCommand \"step\"", f)
				}
				select {
				case <-entered:
				case <-time.After(20 * time.Second):
					t.Fatal("the closure was not entered")
				}
				close(seen)
				for {
					f, err := s.Next()
					if err != nil {
						t.Fatal(err)
					}
					if restatetest.Terminal(f.Type()) {
						if f.Type() != wire.EndMessageType {
							t.Fatalf("ended with %v", f)
						}
						return
					}
					if a, ok := restatetest.Answer(f); ok {
						if err := s.Send(a); err != nil {
							t.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// writesListener records what the server writes on each connection it
// accepts, one entry per Write.
type writesListener struct {
	net.Listener
	mu     sync.Mutex
	writes [][]byte
}

func (l *writesListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writesConn{Conn: c, l: l}, nil
}

func (l *writesListener) wrote(want ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.writes {
		all := true
		for _, s := range want {
			all = all && bytes.Contains(w, []byte(s))
		}
		if all {
			return true
		}
	}
	return false
}

type writesConn struct {
	net.Conn
	l *writesListener
}

func (c *writesConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.writes = append(c.l.writes, bytes.Clone(p))
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// RunStartDone (a closure that already ran, its outcome at hand): the
// RunCommand is not written on its own but with the proposal after it,
// in one write; RunStart writes it before returning. The journal is the
// same.
func TestRunStartDoneWritesWithTheProposal(t *testing.T) {
	for _, done := range []bool{false, true} {
		for _, v := range versions {
			t.Run(fmt.Sprintf("v%d/done=%v", v, done), func(t *testing.T) {
				ep := restate.NewEndpoint(restate.Config{ProtocolMode: restate.BidiStream})
				if err := ep.Bind(restate.Service{Name: "D", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, _ []byte) ([]byte, error) {
					start := ctx.RunStart
					if done {
						start = ctx.RunStartDone
					}
					_, run, err := start("step-name-7f3a")
					if err != nil {
						return nil, err
					}
					if err := ctx.RunComplete(run, restate.Outcome{Value: []byte(`"value-9c1e"`)}); err != nil {
						return nil, err
					}
					return []byte("out"), nil
				}}}}); err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewUnstartedServer(ep)
				srv.Config = restate.NewHTTPServer("", ep)
				l := &writesListener{Listener: srv.Listener}
				srv.Listener = l
				srv.Start()
				t.Cleanup(srv.Close)
				got := playSteps(t, srv.URL, v, "h", []any{restatetest.Start("inv_done", 1), restatetest.Input(nil)}, nil)
				wantFrameTypes(t, got, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
				if together := l.wrote("step-name-7f3a", "value-9c1e"); together != done {
					t.Fatalf("RunCommand and proposal in one write: %v, want %v", together, done)
				}
			})
		}
	}
}

// RunReady: the readiness step runs before the RunCommand is flushed (a
// run waiting for a worker is not shown in flight), the closure after it;
// neither runs on replay of a recorded run; a failed readiness step fails
// the attempt without calling the closure.
func TestRunReadyFlushesAfterReadiness(t *testing.T) {
	var (
		readyIn, release chan struct{}
		fnRan            atomic.Int32
		readyErr         error
	)
	handlers := map[string]restate.HandlerFunc{
		"ready": func(ctx restate.Context, _ []byte) ([]byte, error) {
			return ctx.RunReady("step", func(context.Context) error {
				close(readyIn)
				<-release
				return readyErr
			}, func(context.Context) ([]byte, error) {
				fnRan.Add(1)
				return []byte("done"), nil
			})
		},
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			readyIn, release, readyErr = make(chan struct{}), make(chan struct{}), nil
			fnRan.Store(0)
			_, url := stepsServer(t, restate.BidiStream, handlers)
			s := openSteps(t, url, v, "ready", "inv_ready")
			<-readyIn
			frames := s.NextAsync()
			// A frame here would be a RunCommand flushed while ready waits.
			select {
			case r := <-frames:
				t.Fatalf("frame %v (%v) reached the runtime while the readiness step waited", r.Frame, r.Err)
			case <-time.After(300 * time.Millisecond):
			}
			close(release)
			next := <-frames
			if next.Err != nil {
				t.Fatal(next.Err)
			}
			f := next.Frame
			if r, ok := restatetest.Message[*servicev1.RunCommandMessage](f); !ok || r.GetName() != "step" {
				t.Fatalf("first frame %v, want RunCommand \"step\"", f)
			}
			rest, err := s.Play(nil, nil)
			if err != nil {
				t.Fatalf("after %v: %v", rest, err)
			}
			wantFrameTypes(t, rest, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
			if fnRan.Load() != 1 {
				t.Fatalf("closure ran %d times, want 1", fnRan.Load())
			}
		})
		t.Run(fmt.Sprintf("v%d/replay", v), func(t *testing.T) {
			readyIn, release, readyErr = make(chan struct{}), make(chan struct{}), nil
			fnRan.Store(0)
			_, url := stepsServer(t, restate.BidiStream, handlers)
			got := playSteps(t, url, v, "ready", []any{restatetest.Start("inv_ready_replay", 3), restatetest.Input(nil),
				restatetest.Run(1, "step"), restatetest.RunValue(1, []byte("recorded"))}, nil)
			if out := outputValue(t, got); out != "recorded" {
				t.Fatalf("output %q, want the recorded value", out)
			}
			select {
			case <-readyIn:
				t.Fatal("the readiness step ran on replay of a recorded run")
			default:
			}
			if fnRan.Load() != 0 {
				t.Fatal("the closure ran on replay of a recorded run")
			}
		})
		t.Run(fmt.Sprintf("v%d/failed", v), func(t *testing.T) {
			readyIn, release = make(chan struct{}), make(chan struct{})
			readyErr = &restate.RetryableError{Code: restate.CodeInternal, Message: "no worker"}
			close(release)
			fnRan.Store(0)
			_, url := stepsServer(t, restate.BidiStream, handlers)
			got := playSteps(t, url, v, "ready", []any{restatetest.Start("inv_ready_failed", 1), restatetest.Input(nil)}, nil)
			last := got[len(got)-1]
			e, ok := restatetest.Message[*servicev1.ErrorMessage](last)
			if !ok || !strings.Contains(e.GetMessage(), "no worker") {
				t.Fatalf("ended with %v, want an ErrorMessage carrying the readiness error", last)
			}
			if fnRan.Load() != 0 {
				t.Fatal("the closure ran after its readiness step failed")
			}
		})
	}
}

// RandomSeed is StartMessage.random_seed when set, else derived from the
// invocation id: the same on every attempt.
func TestRandomSeed(t *testing.T) {
	seeds := make(chan uint64, 1)
	_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": func(ctx restate.Context, _ []byte) ([]byte, error) {
		seeds <- ctx.RandomSeed()
		return nil, nil
	}})
	seedOf := func(start *servicev1.StartMessage) uint64 {
		playSteps(t, url, 6, "h", []any{start, restatetest.Input(nil)}, nil)
		return <-seeds
	}
	withSeed := restatetest.Start("inv_seed", 1)
	withSeed.RandomSeed = 42
	if s := seedOf(withSeed); s != 42 {
		t.Fatalf("seed %d, want StartMessage.random_seed 42", s)
	}
	h := fnv.New64a()
	h.Write([]byte("inv_a"))
	a1, a2, b := seedOf(restatetest.Start("inv_a", 1)), seedOf(restatetest.Start("inv_a", 1)), seedOf(restatetest.Start("inv_b", 1))
	if a1 != a2 || a1 == b || a1 != h.Sum64() {
		t.Fatalf("derived seeds %d %d (same id) and %d (other id); want the FNV-1a of the id, %d", a1, a2, b, h.Sum64())
	}
}

// A handler still waiting on something else when its attempt suspends
// (the bridge waits for a steps-mode function's process) learns from its
// context's cause that the attempt suspended, not that it failed.
func TestSuspensionIsTheContextCause(t *testing.T) {
	causes := make(chan error, 1)
	h := func(ctx restate.Context, _ []byte) ([]byte, error) {
		go func() {
			if t1, err := ctx.Sleep(time.Minute); err == nil {
				_, _ = ctx.Await([]restate.Future{t1}, restate.AwaitAll, time.Millisecond)
			}
		}()
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, restate.ErrAttemptEnded
	}
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			_, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": h})
			got := playSteps(t, url, v, "h", []any{restatetest.Start("inv_sc", 1), restatetest.Input(nil)}, nil)
			wantFrameTypes(t, got, wire.SleepCommandType, wire.SuspensionMessageType)
			select {
			case cause := <-causes:
				if !errors.Is(cause, restate.ErrSuspended) {
					t.Fatalf("the handler's context ended with cause %v, want ErrSuspended", cause)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's context did not end after the suspension")
			}
		})
	}
}

// A durable operation may run on a goroutine of its own (the bridge's
// context endpoint answering a worker) and outlive its attempt: the
// handler returned and the stream ended while the operation was on its
// way. It must then fail with an error naming the ended attempt, and never
// touch another stream's invocation (an ended invocation is not reused) or
// crash the endpoint (it did: a nil machine in await).
func TestDurableOperationAfterTheStreamEnded(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			late := make(chan restate.Context, 1)
			started := make(chan restate.Future, 1)
			h := func(ctx restate.Context, _ []byte) ([]byte, error) {
				_, f, err := ctx.RunStart("step")
				if err != nil {
					return nil, err
				}
				started <- f
				late <- ctx
				return nil, &restate.RetryableError{Code: 503, Message: "the attempt ends before its step does"}
			}
			ep, url := stepsServer(t, restate.BidiStream, map[string]restate.HandlerFunc{"h": h})
			playSteps(t, url, v, "h", []any{restatetest.Start("inv_late", 1), restatetest.Input(nil)}, nil)
			ctx, f := <-late, <-started
			// The stream is over once the endpoint counts it done, which
			// it does after releasing the invocation.
			deadline := time.Now().Add(10 * time.Second)
			for ep.InflightStreams() != 0 {
				if time.Now().After(deadline) {
					t.Fatal("the endpoint still counts the stream in flight")
				}
				time.Sleep(time.Millisecond)
			}
			if err := ctx.RunComplete(f, restate.Outcome{Value: []byte(`1`)}); err == nil {
				t.Fatal("RunComplete after the stream ended succeeded")
			}
			if _, err := ctx.Sleep(time.Second); err == nil {
				t.Fatal("Sleep after the stream ended succeeded")
			}
		})
	}
}
