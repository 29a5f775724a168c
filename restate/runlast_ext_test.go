package restate_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// unanswered runs a BIDI invocation whose runtime side never answers
// anything (no ack, no completion) and returns the endpoint's frames up
// to its terminal one. A handler that waits for an answer runs into the
// timeout instead.
func unanswered(t *testing.T, f *fixture, v int, handler string, start ...any) []restatetest.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := restatetest.Open(ctx, restatetest.NewH2CClient(), restatetest.InvokeURL(f.url, "Svc", handler), v)
	defer s.Close()
	if err := s.Send(start...); err != nil {
		t.Fatal(err)
	}
	var got []restatetest.Frame
	for {
		fr, err := s.Next()
		if err != nil {
			t.Fatalf("reading the endpoint's frames without answering any: %v (frames so far %v)", err, got)
		}
		got = append(got, fr)
		if restatetest.Terminal(fr.Type()) {
			_ = s.CloseSend()
			return got
		}
	}
}

// RunLast: "the proposal and the Output the handler's return produces
// reach the runtime together", and the journal is Run's. The Protocol's
// run mechanics ("The SDK sends a ProposeRunCompletionMessage carrying
// the result and the same result_completion_id") are kept; only the wait
// for the runtime's reply is not.
func TestRunLastSendsTheOutputWithTheProposal(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d/value", v), func(t *testing.T) {
			f := newFixtureNoHook(t, restate.BidiStream)
			got := unanswered(t, f, v, "last", restatetest.Start("inv_l1", 1), restatetest.Input([]byte("hi")))
			wantStream(t, got, restatetest.Run(1, "invoke"), propose(v, 1, "echo:hi"), output("echo:hi"), end)
			if f.counted("last") != 1 {
				t.Fatalf("fn ran %d times, want 1", f.counted("last"))
			}
		})
		t.Run(fmt.Sprintf("v%d/terminal failure", v), func(t *testing.T) {
			f := newFixtureNoHook(t, restate.BidiStream)
			got := unanswered(t, f, v, "lastTerminal", restatetest.Start("inv_l2", 1), restatetest.Input(nil))
			wantStream(t, got, restatetest.Run(1, "invoke"),
				restatetest.Out{Flags: runAck(v), Message: &servicev1.ProposeRunCompletionMessage{ResultCompletionId: 1,
					Result: &servicev1.ProposeRunCompletionMessage_Failure{Failure: &servicev1.Failure{Code: 422, Message: "bad input"}}}},
				outputFailure(422, "bad input"), end)
		})
		t.Run(fmt.Sprintf("v%d/a recorded run is replayed, fn not called", v), func(t *testing.T) {
			f := newFixtureNoHook(t, restate.BidiStream)
			got := unanswered(t, f, v, "last", restatetest.Start("inv_l3", 3), restatetest.Input([]byte("hi")),
				restatetest.Run(1, "invoke"), restatetest.RunValue(1, []byte("recorded")))
			wantStream(t, got, output("recorded"), end)
			if f.counted("last") != 0 {
				t.Fatal("fn ran on replay of a recorded run")
			}
		})
		t.Run(fmt.Sprintf("v%d/a command after it fails the attempt", v), func(t *testing.T) {
			f := newFixtureNoHook(t, restate.BidiStream)
			got := unanswered(t, f, v, "lastThenSleep", restatetest.Start("inv_l4", 1), restatetest.Input([]byte("hi")))
			if len(got) != 3 {
				t.Fatalf("got %v, want RunCommand, proposal, ErrorMessage", got)
			}
			if e, ok := restatetest.Message[*servicev1.ErrorMessage](got[2]); !ok || e.GetCode() != 500 || !strings.Contains(e.GetMessage(), "only the Output may follow") {
				t.Fatalf("got %v after the last run's proposal, want ErrorMessage 500 saying only the Output may follow, and no SleepCommand", got[2])
			}
		})
		t.Run(fmt.Sprintf("v%d/with AfterRunJournaled it waits for the run to be durable", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, restatetest.NewH2CClient(), v, "last", []any{restatetest.Start("inv_l5", 1), restatetest.Input([]byte("hi"))}, nil)
			wantStream(t, got, restatetest.Run(1, "invoke"), propose(v, 1, "echo:hi"), output("echo:hi"), end)
			if len(f.hook) != 1 || f.hook[0] != "inv_l5/invoke" {
				t.Fatalf("hook calls %v, want one for inv_l5/invoke", f.hook)
			}
		})
	}
}

// In REQUEST_RESPONSE the runtime cannot answer the proposal on the same
// request: Run suspends and the runtime comes back with the completion
// (TestGoldenRequestResponse); RunLast ends the invocation in the one
// response instead.
func TestRunLastRequestResponseEndsInOneResponse(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			f := newFixtureNoHook(t, restate.RequestResponse)
			req := httptest.NewRequest(http.MethodPost, "/invoke/Svc/last",
				bytes.NewReader(restatetest.Encode(restatetest.Start("inv_rr", 1), restatetest.Input([]byte("x")))))
			req.Header.Set("Content-Type", restatetest.ContentType(v))
			rec := httptest.NewRecorder()
			f.ep.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
			}
			got, err := restatetest.Decode(rec.Body.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			wantStream(t, got, restatetest.Run(1, "invoke"), propose(v, 1, "echo:x"), output("echo:x"), end)
		})
	}
}
