package restate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/discovery"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

var versions = []int{5, 6, 7}

// fixture is an endpoint with one service "Svc" whose handlers tests set.
type fixture struct {
	ep     *restate.Endpoint
	url    string
	client *http.Client   // h2c, of this fixture alone
	runs   map[string]int // run executions per handler
	mu     sync.Mutex
	hook   []string
}

func (f *fixture) counted(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[name]
}

// newFixture binds handlers:
//
//	echo:     Run("invoke") returns {input}; output = run result
//	terminal: Run("invoke") fails terminally 422
//	flaky:    Run("invoke") fails with a plain error
//	block:    Run("invoke") blocks until its ctx is done
//	pause:    returns RetryableError{Pause}
//	last:     RunLast("invoke") returns {input}; output = run result
//	lastTerminal: RunLast("invoke") fails terminally 422
//	lastThenSleep: RunLast("invoke"), then a Sleep
//
// The endpoint's AfterRunJournaled hook records each call in f.hook.
func newFixture(t *testing.T, mode restate.ProtocolMode, started chan<- struct{}) *fixture {
	return buildFixture(t, mode, started, true)
}

// newFixtureNoHook is newFixture without the AfterRunJournaled hook,
// which makes RunLast wait as RunReady does.
func newFixtureNoHook(t *testing.T, mode restate.ProtocolMode) *fixture {
	return buildFixture(t, mode, nil, false)
}

func buildFixture(t *testing.T, mode restate.ProtocolMode, started chan<- struct{}, hooked bool) *fixture {
	t.Helper()
	f := &fixture{runs: map[string]int{}}
	cfg := restate.Config{ProtocolMode: mode}
	if hooked {
		cfg.AfterRunJournaled = func(id, run string) {
			f.mu.Lock()
			f.hook = append(f.hook, id+"/"+run)
			f.mu.Unlock()
		}
	}
	ep := restate.NewEndpoint(cfg)
	if err := ep.Err(); err != nil {
		t.Fatal(err)
	}
	count := func(name string) {
		f.mu.Lock()
		f.runs[name]++
		f.mu.Unlock()
	}
	h := func(name string, fn func(context.Context, []byte) ([]byte, error)) restate.Handler {
		return restate.Handler{Name: name, Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
			return ctx.Run("invoke", func(rctx context.Context) ([]byte, error) {
				count(name)
				return fn(rctx, in)
			})
		}}
	}
	err := ep.Bind(restate.Service{Name: "Svc", Handlers: []restate.Handler{
		h("echo", func(_ context.Context, in []byte) ([]byte, error) { return append([]byte("echo:"), in...), nil }),
		h("terminal", func(context.Context, []byte) ([]byte, error) {
			return nil, &restate.TerminalError{Code: 422, Message: "bad input"}
		}),
		h("flaky", func(context.Context, []byte) ([]byte, error) { return nil, errors.New("worker crashed") }),
		h("block", func(ctx context.Context, _ []byte) ([]byte, error) {
			if started != nil {
				started <- struct{}{}
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}),
		{Name: "pause", Fn: func(restate.Context, []byte) ([]byte, error) {
			return nil, &restate.RetryableError{Code: 503, Message: "misconfigured", Pause: true}
		}},
		{Name: "last", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
			return ctx.RunLast("invoke", nil, func(context.Context) ([]byte, error) {
				count("last")
				return append([]byte("echo:"), in...), nil
			})
		}},
		{Name: "lastTerminal", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
			return ctx.RunLast("invoke", nil, func(context.Context) ([]byte, error) {
				return nil, &restate.TerminalError{Code: 422, Message: "bad input"}
			})
		}},
		{Name: "lastThenSleep", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
			out, err := ctx.RunLast("invoke", nil, func(context.Context) ([]byte, error) { return in, nil })
			if err != nil {
				return nil, err
			}
			if _, err := ctx.Sleep(time.Second); err != nil {
				return nil, err
			}
			return out, nil
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.ep = ep
	srv := httptest.NewUnstartedServer(ep)
	srv.Config = restate.NewHTTPServer("", ep)
	srv.Start()
	t.Cleanup(srv.Close)
	f.url = srv.URL
	// A client of its own: a client shared by fixtures could write a
	// request on its pooled connection to an earlier fixture's closed
	// server, whose port the kernel just gave this one (ECONNRESET).
	f.client = restatetest.NewH2CClient()
	t.Cleanup(f.client.CloseIdleConnections)
	return f
}

// play runs a BIDI invocation over h2c and returns the endpoint's frames
// as one byte stream.
func play(t *testing.T, f *fixture, client *http.Client, v int, handler string, start []any, inject func(restatetest.Frame) []proto.Message) []restatetest.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := restatetest.Open(ctx, client, restatetest.InvokeURL(f.url, "Svc", handler), v)
	defer s.Close()
	got, err := s.Play(start, inject)
	if err != nil {
		t.Fatalf("playing the invocation: %v (frames so far %v)", err, got)
	}
	resp, _ := s.Response()
	if ct := resp.Header.Get("Content-Type"); ct != restatetest.ContentType(v) {
		t.Fatalf("content-type %q, want the echoed %q", ct, restatetest.ContentType(v))
	}
	if resp.Header.Get("X-Restate-Server") == "" {
		t.Fatal("no x-restate-server header")
	}
	return got
}

// wantStream compares frames byte for byte with the golden stream built
// from want.
func wantStream(t *testing.T, got []restatetest.Frame, want ...any) {
	t.Helper()
	var gotMsgs []any
	for _, f := range got {
		gotMsgs = append(gotMsgs, restatetest.Out{Flags: f.Header.Flags, Message: f.Message.(proto.Message)})
	}
	g, w := restatetest.Encode(gotMsgs...), restatetest.Encode(want...)
	if !bytes.Equal(g, w) {
		wf, _ := restatetest.Decode(w)
		t.Fatalf("output stream differs from golden:\n got  %v\n want %v", got, wf)
	}
}

func runAck(v int) uint16 {
	if v == 7 {
		return wire.FlagRequestedAck
	}
	return 0
}

func propose(v int, id uint32, value string) restatetest.Out {
	return restatetest.Out{Flags: runAck(v), Message: &servicev1.ProposeRunCompletionMessage{ResultCompletionId: id,
		Result: &servicev1.ProposeRunCompletionMessage_Value{Value: []byte(value)}}}
}

func output(value string) *servicev1.OutputCommandMessage {
	return &servicev1.OutputCommandMessage{Result: &servicev1.OutputCommandMessage_Value{Value: &servicev1.Value{Content: []byte(value)}}}
}

func outputFailure(code uint32, msg string) *servicev1.OutputCommandMessage {
	return &servicev1.OutputCommandMessage{Result: &servicev1.OutputCommandMessage_Failure{Failure: &servicev1.Failure{Code: code, Message: msg}}}
}

var end = &servicev1.EndMessage{}

func TestGoldenBidi(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d/normal run flow", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "echo", []any{restatetest.Start("inv_a", 1), restatetest.Input([]byte("hi"))}, nil)
			wantStream(t, got, restatetest.Run(1, "invoke"), propose(v, 1, "echo:hi"), output("echo:hi"), end)
			if f.counted("echo") != 1 || len(f.hook) != 1 || f.hook[0] != "inv_a/invoke" {
				t.Fatalf("runs=%d hook=%v, want one execution and one AfterRunJournaled", f.counted("echo"), f.hook)
			}
		})
		t.Run(fmt.Sprintf("v%d/replay after crash: recorded completion, fn not called", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "echo", []any{restatetest.Start("inv_b", 3), restatetest.Input([]byte("hi")),
				restatetest.Run(1, "invoke"), restatetest.RunValue(1, []byte("recorded"))}, nil)
			wantStream(t, got, output("recorded"), end)
			if f.counted("echo") != 0 || len(f.hook) != 0 {
				t.Fatalf("fn ran %d times (hook %v) on replay of a completed run", f.counted("echo"), f.hook)
			}
		})
		t.Run(fmt.Sprintf("v%d/replayed terminal failure is returned, fn not called", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "echo", []any{restatetest.Start("inv_c", 3), restatetest.Input([]byte("hi")),
				restatetest.Run(1, "invoke"), restatetest.RunFailure(1, 422, "recorded failure")}, nil)
			wantStream(t, got, outputFailure(422, "recorded failure"), end)
			if f.counted("echo") != 0 {
				t.Fatal("fn ran on replay")
			}
		})
		t.Run(fmt.Sprintf("v%d/replayed RunCommand without completion runs again", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "echo", []any{restatetest.Start("inv_d", 2), restatetest.Input([]byte("hi")),
				restatetest.Run(1, "invoke")}, nil)
			wantStream(t, got, propose(v, 1, "echo:hi"), output("echo:hi"), end)
			if f.counted("echo") != 1 {
				t.Fatalf("fn ran %d times, want 1", f.counted("echo"))
			}
		})
		t.Run(fmt.Sprintf("v%d/terminal failure from run is journaled and becomes the output", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "terminal", []any{restatetest.Start("inv_e", 1), restatetest.Input(nil)}, nil)
			wantStream(t, got, restatetest.Run(1, "invoke"),
				restatetest.Out{Flags: runAck(v), Message: &servicev1.ProposeRunCompletionMessage{ResultCompletionId: 1,
					Result: &servicev1.ProposeRunCompletionMessage_Failure{Failure: &servicev1.Failure{Code: 422, Message: "bad input"}}}},
				outputFailure(422, "bad input"), end)
		})
		t.Run(fmt.Sprintf("v%d/non-terminal run error proposes nothing and fails the attempt", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "flaky", []any{restatetest.Start("inv_f", 1), restatetest.Input(nil)}, nil)
			idx, name, typ := uint32(1), "invoke", uint32(wire.RunCommandType)
			wantStream(t, got, restatetest.Run(1, "invoke"), &servicev1.ErrorMessage{Code: 500, Message: "worker crashed",
				RelatedCommandIndex: &idx, RelatedCommandName: &name, RelatedCommandType: &typ})
		})
		t.Run(fmt.Sprintf("v%d/cancel mid-run: ctx cancelled, terminal 409", v), func(t *testing.T) {
			started := make(chan struct{}, 1)
			f := newFixture(t, restate.BidiStream, started)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s := restatetest.Open(ctx, f.client, restatetest.InvokeURL(f.url, "Svc", "block"), v)
			defer s.Close()
			go func() {
				select {
				case <-started:
					_ = s.Send(restatetest.Cancel())
				case <-ctx.Done():
				}
			}()
			got, err := s.Play([]any{restatetest.Start("inv_g", 1), restatetest.Input(nil)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantStream(t, got, restatetest.Run(1, "invoke"), outputFailure(409, "cancelled"), end)
		})
		t.Run(fmt.Sprintf("v%d/journal mismatch: replayed run name differs is 570", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "echo", []any{restatetest.Start("inv_h", 3), restatetest.Input(nil),
				restatetest.Run(1, "other"), restatetest.RunValue(1, nil)}, nil)
			if len(got) != 1 {
				t.Fatalf("got %v, want one ErrorMessage", got)
			}
			e, _ := restatetest.Message[*servicev1.ErrorMessage](got[0])
			if e.GetCode() != 570 || e.GetRelatedCommandIndex() != 1 || e.GetRelatedCommandName() != "other" {
				t.Fatalf("ErrorMessage = %v", e)
			}
		})
		t.Run(fmt.Sprintf("v%d/first message not Start is 571", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "echo", []any{restatetest.Input(nil)}, nil)
			e, ok := restatetest.Message[*servicev1.ErrorMessage](got[0])
			if len(got) != 1 || !ok || e.GetCode() != 571 {
				t.Fatalf("got %v, want one ErrorMessage 571", got)
			}
		})
		t.Run(fmt.Sprintf("v%d/pause request", v), func(t *testing.T) {
			f := newFixture(t, restate.BidiStream, nil)
			got := play(t, f, f.client, v, "pause", []any{restatetest.Start("inv_i", 1), restatetest.Input(nil)}, nil)
			e, ok := restatetest.Message[*servicev1.ErrorMessage](got[0])
			if len(got) != 1 || !ok || e.GetCode() != 503 {
				t.Fatalf("got %v", got)
			}
			if v == 7 && (e.GetBehavior() != servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE || e.NextRetryDelay != nil) {
				t.Fatalf("v7 pause = %v, want behavior PAUSE", e)
			}
			if v < 7 && (e.GetBehavior() != 0 || e.GetNextRetryDelay() != uint64((5*time.Minute).Milliseconds())) {
				t.Fatalf("v%d pause = %v, want next_retry_delay 5 minutes, the README's delay for a permanent failure there", v, e)
			}
		})
	}
}

// REQUEST_RESPONSE through the plain http.Handler: the whole body first.
func TestGoldenRequestResponse(t *testing.T) {
	for _, v := range versions {
		invoke := func(t *testing.T, f *fixture, body []byte) []restatetest.Frame {
			t.Helper()
			req := httptest.NewRequest(http.MethodPost, "/invoke/Svc/echo", bytes.NewReader(body))
			req.Header.Set("Content-Type", restatetest.ContentType(v))
			rec := httptest.NewRecorder()
			f.ep.ServeHTTP(rec, req)
			if rec.Code != 200 {
				t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
			}
			frames, err := restatetest.Decode(rec.Body.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			return frames
		}
		t.Run(fmt.Sprintf("v%d/suspension then resume", v), func(t *testing.T) {
			f := newFixture(t, restate.RequestResponse, nil)
			got := invoke(t, f, restatetest.Encode(restatetest.Start("inv_r", 1), restatetest.Input([]byte("x"))))
			var susp *servicev1.SuspensionMessage
			if v == 7 {
				susp = &servicev1.SuspensionMessage{AwaitingOn: &servicev1.Future{WaitingCompletions: []uint32{1}, WaitingSignals: []uint32{1},
					CombinatorType: servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED}}
			} else {
				susp = &servicev1.SuspensionMessage{WaitingCompletions: []uint32{1}, WaitingSignals: []uint32{1}}
			}
			wantStream(t, got, restatetest.Run(1, "invoke"), propose(v, 1, "echo:x"), susp)
			if len(f.hook) != 0 {
				t.Fatal("AfterRunJournaled called before the run was durable")
			}
			// The runtime stored the proposal and resumes with the journal.
			got = invoke(t, f, restatetest.Encode(restatetest.Start("inv_r", 3), restatetest.Input([]byte("x")),
				restatetest.Run(1, "invoke"), restatetest.RunValue(1, []byte("echo:x"))))
			wantStream(t, got, output("echo:x"), end)
			if f.counted("echo") != 1 {
				t.Fatalf("fn ran %d times across suspension and resume, want 1", f.counted("echo"))
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	f := newFixture(t, restate.BidiStream, nil)
	do := func(method, path, ct string) (int, string) {
		req, _ := http.NewRequest(method, f.url+path, strings.NewReader(""))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		req.Header.Set("Accept", "application/vnd.restate.endpointmanifest.v4+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct {
		name, method, path, ct string
		code                   int
	}{
		{"unknown service is 404", "POST", "/invoke/Nope/echo", "application/vnd.restate.invocation.v6", 404},
		{"unknown handler is 404", "POST", "/invoke/Svc/nope", "application/vnd.restate.invocation.v6", 404},
		{"malformed path is 404", "POST", "/invoke/Svc", "application/vnd.restate.invocation.v6", 404},
		{"extra path segment is 404", "POST", "/invoke/Svc/echo/x", "application/vnd.restate.invocation.v6", 404},
		{"unsupported version v4 is 415", "POST", "/invoke/Svc/echo", "application/vnd.restate.invocation.v4", 415},
		{"unsupported version v8 is 415", "POST", "/invoke/Svc/echo", "application/vnd.restate.invocation.v8", 415},
		{"missing content type is 415", "POST", "/invoke/Svc/echo", "", 415},
		{"health", "GET", "/health", "", 200},
		{"discover", "GET", "/discover", "", 200},
		{"discovery", "GET", "/discovery", "", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(c.method, c.path, c.ct)
			if code != c.code {
				t.Fatalf("HTTP %d (%s), want %d", code, body, c.code)
			}
			if code >= 400 && strings.TrimSpace(body) == "" {
				t.Fatal("error response without an explanation")
			}
		})
	}
	t.Run("discovery without an acceptable version", func(t *testing.T) {
		req, _ := http.NewRequest("GET", f.url+"/discover", nil)
		req.Header.Set("Accept", "application/vnd.restate.endpointmanifest.v99+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 415 {
			t.Fatalf("HTTP %d, want 415", resp.StatusCode)
		}
	})
}

func TestIdentityKeysGuardEverythingButHealth(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{IdentityKeys: []string{"publickeyv1_ChjENKeMvCtRnqG2mrBK1HmPKufgFUc98K8JoMU2fmqA"}})
	if err := ep.Err(); err != nil {
		t.Fatalf("valid identity key rejected: %v", err)
	}
	for path, want := range map[string]int{"/health": 200, "/discover": 401, "/invoke/Svc/echo": 401} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("%s unsigned: HTTP %d, want %d", path, rec.Code, want)
		}
	}
	// A bad key must never degrade into accepting unsigned requests.
	bad := restate.NewEndpoint(restate.Config{IdentityKeys: []string{"garbage"}})
	if bad.Err() == nil || !strings.Contains(bad.Err().Error(), "IdentityKeys") {
		t.Fatalf("bad identity key: Err() = %v, want an error naming IdentityKeys", bad.Err())
	}
	if err := bad.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(restate.Context, []byte) ([]byte, error) { return nil, nil }}}}); err == nil {
		t.Error("Bind succeeded on a misconfigured endpoint")
	}
	for _, path := range []string{"/health", "/discover", "/invoke/S/h"} {
		rec := httptest.NewRecorder()
		bad.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusInternalServerError {
			t.Errorf("misconfigured endpoint %s: HTTP %d, want 500", path, rec.Code)
		}
	}
}

// Refused unsigned requests cannot fill the log: a burst of them is
// logged a few lines at a time, each with its path clipped.
func TestUnsignedRequestsDoNotFloodTheLog(t *testing.T) {
	var logs bytes.Buffer
	ep := restate.NewEndpoint(restate.Config{Logger: zerolog.New(&logs),
		IdentityKeys: []string{"publickeyv1_ChjENKeMvCtRnqG2mrBK1HmPKufgFUc98K8JoMU2fmqA"}})
	path := "/invoke/" + strings.Repeat("A", 100_000)
	for range 50 {
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("HTTP %d, want 401", rec.Code)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) == 0 || len(lines) > 5 || logs.Len() > 5*2048 {
		t.Fatalf("%d log lines, %d bytes for 50 refusals of a 100 kB path, want at most 5 short ones", len(lines), logs.Len())
	}
}

func TestBindValidation(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{})
	fn := func(restate.Context, []byte) ([]byte, error) { return nil, nil }
	if err := ep.Bind(restate.Service{Name: "A", Handlers: []restate.Handler{{Name: "h", Fn: fn}}}); err != nil {
		t.Fatal(err)
	}
	for name, svc := range map[string]restate.Service{
		"duplicate service":   {Name: "A", Handlers: []restate.Handler{{Name: "h", Fn: fn}}},
		"bad service name":    {Name: "1bad", Handlers: []restate.Handler{{Name: "h", Fn: fn}}},
		"bad handler name":    {Name: "B", Handlers: []restate.Handler{{Name: "h-x", Fn: fn}}},
		"duplicate handler":   {Name: "C", Handlers: []restate.Handler{{Name: "h", Fn: fn}, {Name: "h", Fn: fn}}},
		"handler without Fn":  {Name: "D", Handlers: []restate.Handler{{Name: "h"}}},
		"service no handlers": {Name: "E"},
	} {
		if err := ep.Bind(svc); err == nil {
			t.Errorf("%s: Bind accepted it", name)
		}
	}
	m := ep.Manifest()
	if len(m.Services) != 1 || m.MinProtocolVersion != 5 || m.MaxProtocolVersion != 7 || m.ProtocolMode != restate.BidiStream {
		t.Fatalf("manifest after failed binds = %+v", m)
	}
}

// Keyed services: the manifest carries the service type, each handler's
// type and, for lazy_state, enableLazyState (v3+ only); a handler type the
// service type does not allow is refused at Bind.
func TestBindKeyedServicesManifest(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{})
	fn := func(restate.Context, []byte) ([]byte, error) { return nil, nil }
	for _, svc := range []restate.Service{
		{Name: "Counter", Type: restate.ServiceTypeVirtualObject, LazyState: true, Handlers: []restate.Handler{
			{Name: "add", Type: restate.HandlerTypeExclusive, Fn: fn}, {Name: "get", Type: restate.HandlerTypeShared, Fn: fn}}},
		{Name: "Signup", Type: restate.ServiceTypeWorkflow, Handlers: []restate.Handler{
			{Name: "run", Type: restate.HandlerTypeWorkflow, Fn: fn}, {Name: "approve", Type: restate.HandlerTypeShared, Fn: fn}}},
		{Name: "Greeter", Handlers: []restate.Handler{{Name: "greet", Fn: fn}}},
	} {
		if err := ep.Bind(svc); err != nil {
			t.Fatal(err)
		}
	}
	if err := ep.Bind(restate.Service{Name: "Plain", Handlers: []restate.Handler{{Name: "h", Type: restate.HandlerTypeShared, Fn: fn}}}); err == nil {
		t.Fatal("Bind accepted a shared handler in a plain service")
	}
	for v := discovery.MinVersion; v <= discovery.MaxVersion; v++ {
		b, err := discovery.Encode(ep.Manifest(), v)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Services []struct {
				Name            string
				Ty              string
				EnableLazyState *bool
				Handlers        []struct{ Name, Ty string }
			}
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, s := range doc.Services {
			got[s.Name] = s.Ty
			for _, h := range s.Handlers {
				got[s.Name+"/"+h.Name] = h.Ty
			}
			if lazy := s.EnableLazyState != nil && *s.EnableLazyState; lazy != (s.Name == "Counter" && v >= 3) {
				t.Errorf("v%d: %s enableLazyState = %v", v, s.Name, s.EnableLazyState)
			}
		}
		want := map[string]string{"Counter": "VIRTUAL_OBJECT", "Counter/add": "EXCLUSIVE", "Counter/get": "SHARED",
			"Signup": "WORKFLOW", "Signup/run": "WORKFLOW", "Signup/approve": "SHARED", "Greeter": "SERVICE", "Greeter/greet": ""}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("v%d: types = %v, want %v", v, got, want)
		}
	}
}

// BIDI_STREAM over HTTP/1.1: restate-server streams full duplex
// (use_http_11), so the response must start before the request body ends.
func TestBidiOverHTTP11FullDuplex(t *testing.T) {
	f := newFixture(t, restate.BidiStream, nil)
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{}).DialContext}}
	for _, v := range versions {
		got := play(t, f, client, v, "echo", []any{restatetest.Start("inv_h1", 1), restatetest.Input([]byte("1"))}, nil)
		wantStream(t, got, restatetest.Run(1, "invoke"), propose(v, 1, "echo:1"), output("echo:1"), end)
	}
}

// Frames are read up to the runtime's own bound: the message size plus a
// 32nd (restate-server 1.7.12 puts state of up to its 32 MiB limit plus
// 256 KiB in a StartMessage). A frame over that fails the attempt and
// asks for a pause (v7; a long retry delay before), since every retry
// would bring the same frame.
func TestMaxMessageSizeEnforced(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{MaxMessageSize: 640, ProtocolMode: restate.RequestResponse})
	_ = ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(restate.Context, []byte) ([]byte, error) { return []byte("ok"), nil }}}})
	for _, v := range []int{6, 7} {
		for _, n := range []int{645, 700} {
			body := restatetest.Encode(restatetest.Start("x", 1), restatetest.Input(make([]byte, n)))
			req := httptest.NewRequest(http.MethodPost, "/invoke/S/h", bytes.NewReader(body))
			req.Header.Set("Content-Type", restatetest.ContentType(v))
			rec := httptest.NewRecorder()
			ep.ServeHTTP(rec, req)
			frames, _ := restatetest.Decode(rec.Body.Bytes())
			e, isErr := restatetest.Message[*servicev1.ErrorMessage](frames[0])
			if n == 645 {
				if isErr {
					t.Fatalf("v%d: an input of %d bytes, within the runtime's bound, failed: %v", v, n, e)
				}
				continue
			}
			if len(frames) != 1 || !isErr || !strings.Contains(e.GetMessage(), "exceeds the limit") {
				t.Fatalf("v%d: got %v, want an ErrorMessage about the size limit", v, frames)
			}
			if v == 7 && e.GetBehavior() != servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE || v < 7 && e.GetNextRetryDelay() != uint64((5*time.Minute).Milliseconds()) {
				t.Errorf("v%d: %v, want the invocation paused (v7) or retried after 5m", v, e)
			}
		}
	}
}

// A step whose result is over the message limit fails the attempt naming
// the step as the handler named it, with the RunCommand as the related
// command: the user finds which of their steps to make smaller.
func TestOversizedStepResultNamesTheStep(t *testing.T) {
	e := runValueError(t, 256, "fetch report", 1000)
	if !strings.Contains(e.GetMessage(), `the result of step "fetch report" makes a`) || e.GetRelatedCommandName() != "fetch report" || e.GetRelatedCommandIndex() != 1 {
		t.Fatalf("got %v, want an ErrorMessage naming the step", e)
	}
}

// A step result that fits restate-server's message size limit only by a
// little is not sent either: restate-server 1.7.12 drops such a proposal
// without failing the attempt (the invocation hung until its timeout, on
// every retry). The endpoint keeps a 32nd of the limit free.
func TestStepResultCloseToTheLimitIsNotSent(t *testing.T) {
	e := runValueError(t, 3200, "close", 3150)
	if !strings.Contains(e.GetMessage(), `over the 3100 bytes a message to the runtime may have`) {
		t.Fatalf("got %v, want an ErrorMessage naming the 3100-byte bound", e)
	}
}

// A durable step's value the endpoint refuses (over the message size)
// ends the attempt with an ErrorMessage; RunComplete says what it sent,
// as an AttemptFailedError that is ErrAttemptEnded, so the handler can log
// why and tell the pause from a retry.
func TestRunCompleteOverTheLimitSaysWhy(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{MaxMessageSize: 3200, ProtocolMode: restate.RequestResponse})
	var got error
	_ = ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", DeliverCancel: true, Fn: func(ctx restate.Context, _ []byte) ([]byte, error) {
		_, run, err := ctx.RunStart("big")
		if err != nil {
			return nil, err
		}
		got = ctx.RunComplete(run, restate.Outcome{Value: make([]byte, 4000)})
		return nil, got
	}}}})
	body := restatetest.Encode(restatetest.Start("x", 1), restatetest.Input(nil))
	req := httptest.NewRequest(http.MethodPost, "/invoke/S/h", bytes.NewReader(body))
	req.Header.Set("Content-Type", restatetest.ContentType(6))
	ep.ServeHTTP(httptest.NewRecorder(), req)
	var af *restate.AttemptFailedError
	if !errors.Is(got, restate.ErrAttemptEnded) || !errors.As(got, &af) || !af.Pause || !strings.Contains(af.Message, `step "big"`) {
		t.Fatalf("RunComplete = %v, want an AttemptFailedError (ErrAttemptEnded) asking to pause, naming the step", got)
	}
}

// runValueError plays an invocation whose handler runs one step named
// name returning size bytes, on an endpoint with MaxMessageSize max, and
// returns the ErrorMessage it ends with.
func runValueError(t *testing.T, max int, name string, size int) *servicev1.ErrorMessage {
	t.Helper()
	ep := restate.NewEndpoint(restate.Config{MaxMessageSize: max, ProtocolMode: restate.RequestResponse})
	_ = ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, _ []byte) ([]byte, error) {
		return ctx.Run(name, func(context.Context) ([]byte, error) { return make([]byte, size), nil })
	}}}})
	body := restatetest.Encode(restatetest.Start("x", 1), restatetest.Input(nil))
	req := httptest.NewRequest(http.MethodPost, "/invoke/S/h", bytes.NewReader(body))
	req.Header.Set("Content-Type", restatetest.ContentType(6))
	rec := httptest.NewRecorder()
	ep.ServeHTTP(rec, req)
	frames, _ := restatetest.Decode(rec.Body.Bytes())
	e, ok := restatetest.Message[*servicev1.ErrorMessage](frames[len(frames)-1])
	if !ok {
		t.Fatalf("frames %v, want an ErrorMessage last", frames)
	}
	return e
}

// A handler private to the ingress stays private: a runtime that accepts
// only manifest versions without ingressPrivate (v1, v2) gets a refusal
// naming it, never a manifest that would make it public.
func TestDiscoveryRefusesToMakeAPrivateHandlerPublic(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{})
	if err := ep.Err(); err != nil {
		t.Fatal(err)
	}
	echo := func(_ restate.Context, in []byte) ([]byte, error) { return in, nil }
	if err := ep.Bind(restate.Service{Name: "Svc", Handlers: []restate.Handler{
		{Name: "inner", Fn: echo, IngressPrivate: true}, {Name: "open", Fn: echo},
	}}); err != nil {
		t.Fatal(err)
	}
	get := func(accept string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "/discover", nil)
		req.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, v := range []string{"v1", "v2"} {
		code, body := get("application/vnd.restate.endpointmanifest." + v + "+json")
		if code != http.StatusNotAcceptable || !strings.Contains(body, "Svc/inner is private to the ingress (ingressPrivate), which manifest "+v+" cannot say") {
			t.Errorf("discovery as %s: HTTP %d %q, want 406 naming Svc/inner", v, code, body)
		}
	}
	code, body := get("application/vnd.restate.endpointmanifest.v2+json, application/vnd.restate.endpointmanifest.v3+json")
	if code != http.StatusOK || !strings.Contains(body, `"ingressPrivate":true`) {
		t.Fatalf("discovery offering v3: HTTP %d %q, want the manifest with ingressPrivate", code, body)
	}
}
