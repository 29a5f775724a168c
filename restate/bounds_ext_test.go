package restate_test

import (
	"bytes"
	"context"
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
	"github.com/rs/zerolog"
)

// boundedServer serves one echo handler "S/h" with cfg over h2c and
// HTTP/1.1, counting handler calls.
func boundedServer(t *testing.T, cfg restate.Config) (*restate.Endpoint, string, *atomic.Int32) {
	t.Helper()
	calls := new(atomic.Int32)
	ep := restate.NewEndpoint(cfg)
	err := ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
		calls.Add(1)
		return ctx.Run("invoke", func(context.Context) ([]byte, error) { return in, nil })
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(ep)
	srv.Config = restate.NewHTTPServer("", ep)
	srv.Start()
	t.Cleanup(srv.Close)
	return ep, srv.URL, calls
}

// A peer that opens a stream and does not deliver a complete StartMessage
// and journal within StartTimeout gets ErrorMessage 571 saying so, and the
// stream ends: its slot is free again (MaxConcurrentInvocations 2: one
// leaked slot per stalled stream would refuse the later subtests).
func TestStartTimeoutEndsStalledStreams(t *testing.T) {
	// The healthy invocation after each stall must start within the same
	// bound: 400ms leaves a loaded host room for that.
	_, url, calls := boundedServer(t, restate.Config{StartTimeout: 400 * time.Millisecond})
	startFrame := restatetest.Encode(restatetest.Start("inv_st", 2))
	stalls := map[string][]byte{
		"nothing":                        nil,
		"half a frame header":            startFrame[:4],
		"StartMessage without payload":   startFrame[:wire.HeaderSize],
		"StartMessage, journal missing":  startFrame,
		"StartMessage, one entry of two": append(append([]byte(nil), startFrame...), restatetest.Encode(restatetest.Input(nil))...),
	}
	// h2c only: over HTTP/1.1 the server closing a connection its client
	// is still sending on may reset it before the response is read, which
	// is the transport's behaviour, not the endpoint's.
	clients := map[string]*http.Client{"h2c": restatetest.NewH2CClient()}
	for cname, client := range clients {
		for name, sent := range stalls {
			t.Run(cname+"/"+name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				s := restatetest.Open(ctx, client, restatetest.InvokeURL(url, "S", "h"), 7)
				defer s.Close()
				if len(sent) > 0 {
					go func() { _ = s.SendRaw(sent) }()
				}
				f, err := s.Next()
				if err != nil {
					t.Fatalf("reading the response: %v, want an ErrorMessage after the start timeout", err)
				}
				e, ok := restatetest.Message[*servicev1.ErrorMessage](f)
				if !ok || e.GetCode() != 571 || !strings.Contains(e.GetMessage(), "timed out after 400ms waiting for the StartMessage") {
					t.Fatalf("got %v, want ErrorMessage 571 naming the start timeout", f)
				}
				if f, err := s.Next(); err == nil {
					t.Fatalf("frame %v after the ErrorMessage, want the stream to end", f)
				}
				// The slot is free: a healthy invocation is served.
				s2 := restatetest.Open(ctx, client, restatetest.InvokeURL(url, "S", "h"), 7)
				defer s2.Close()
				got, err := s2.Play([]any{restatetest.Start("inv_ok", 1), restatetest.Input([]byte("x"))}, nil)
				if err != nil || got[len(got)-1].Type() != wire.EndMessageType {
					t.Fatalf("invocation after a timed-out stream: %v %v", got, err)
				}
			})
		}
	}
	if calls.Load() != int32(len(stalls)*len(clients)) {
		t.Fatalf("handler called %d times, want once per healthy invocation", calls.Load())
	}
}

// In memory, where the body has no read deadline, the timeout closes it.
func TestStartTimeoutWithoutReadDeadline(t *testing.T) {
	for _, mode := range []restate.ProtocolMode{restate.BidiStream, restate.RequestResponse} {
		t.Run(string(mode), func(t *testing.T) {
			ep, _, _ := boundedServer(t, restate.Config{ProtocolMode: mode, StartTimeout: 50 * time.Millisecond})
			s := restatetest.ServeStream(ep, "/invoke/S/h", 6)
			if err := s.Send(restatetest.Start("inv_m", 1)); err != nil {
				t.Fatal(err)
			}
			_, frames, _, err := s.Wait()
			if err != nil || len(frames) != 1 {
				t.Fatalf("frames %v (%v), want one ErrorMessage", frames, err)
			}
			if e, ok := restatetest.Message[*servicev1.ErrorMessage](frames[0]); !ok || !strings.Contains(e.GetMessage(), "timed out") {
				t.Fatalf("got %v, want the start timeout's ErrorMessage", frames[0])
			}
		})
	}
}

func TestBoundsConfigValidated(t *testing.T) {
	for name, cfg := range map[string]restate.Config{
		"StartTimeout":             {StartTimeout: -time.Second},
		"MaxConcurrentInvocations": {MaxConcurrentInvocations: -1},
		"MaxJournalBytes":          {MaxJournalBytes: -1},
	} {
		if err := restate.NewEndpoint(cfg).Err(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("negative %s: Err() = %v, want an error naming it", name, err)
		}
	}
}

// Streams over MaxConcurrentInvocations are refused at once with 503 and
// Retry-After, without their body being read; those under it run on, and
// a freed slot admits the next stream.
func TestMaxConcurrentInvocationsRefusesExcessStreams(t *testing.T) {
	const limit = 3
	started := make(chan struct{}, limit)
	release := make(chan struct{})
	var logs bytes.Buffer
	ep := restate.NewEndpoint(restate.Config{MaxConcurrentInvocations: limit, Logger: zerolog.New(&logs)})
	err := ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(_ restate.Context, in []byte) ([]byte, error) {
		started <- struct{}{}
		<-release
		return in, nil
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	var held []*restatetest.Stream
	for i := 0; i < limit; i++ {
		s := restatetest.ServeStream(ep, "/invoke/S/h", 7)
		if err := s.Send(restatetest.Start(fmt.Sprintf("inv_%d", i), 1), restatetest.Input(nil)); err != nil {
			t.Fatal(err)
		}
		<-started
		held = append(held, s)
	}
	// The refused stream's body is never read: a Send would block, so
	// nothing is sent, and the body reports whether it was read.
	over := restatetest.ServeStream(ep, "/invoke/S/h", 7)
	status, _, body, _ := over.Wait()
	if status != http.StatusServiceUnavailable || over.Header().Get("Retry-After") == "" || !strings.Contains(string(body), "at most 3") {
		t.Fatalf("stream over the bound: HTTP %d, Retry-After %q, %q; want 503 with Retry-After naming the bound", status, over.Header().Get("Retry-After"), body)
	}
	if over.BodyRead() {
		t.Fatal("the refused stream's body was read")
	}
	if !strings.Contains(logs.String(), "refused an invocation stream") {
		t.Fatalf("logs %q, want a line about the refused stream", logs.String())
	}
	close(release)
	for i, s := range held {
		_ = s.CloseSend()
		_, frames, _, err := s.Wait()
		if err != nil || len(frames) == 0 || frames[len(frames)-1].Type() != wire.EndMessageType {
			t.Fatalf("stream %d under the bound: %v %v, want it to end normally", i, frames, err)
		}
	}
	next := restatetest.ServeStream(ep, "/invoke/S/h", 7)
	if err := next.Send(restatetest.Start("inv_next", 1), restatetest.Input(nil)); err != nil {
		t.Fatal(err)
	}
	<-started
	_ = next.CloseSend()
	if _, frames, _, err := next.Wait(); err != nil || frames[len(frames)-1].Type() != wire.EndMessageType {
		t.Fatalf("stream after slots were freed: %v %v", frames, err)
	}
}

// An invocation whose journal exceeds MaxJournalBytes fails that attempt
// with ErrorMessage 571 (a pause request on v7); another stream on the
// same connection, mid-run at the time, completes unaffected.
func TestMaxJournalBytesFailsOnlyThatInvocation(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			inRun := make(chan struct{})
			release := make(chan struct{})
			ep := restate.NewEndpoint(restate.Config{MaxJournalBytes: 1024})
			err := ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
				return ctx.Run("invoke", func(context.Context) ([]byte, error) {
					close(inRun)
					<-release
					return in, nil
				})
			}}}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(ep)
			srv.Config = restate.NewHTTPServer("", ep)
			srv.Start()
			defer srv.Close()
			client := restatetest.NewH2CClient()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			ok := restatetest.Open(ctx, client, restatetest.InvokeURL(srv.URL, "S", "h"), v)
			defer ok.Close()
			done := make(chan error, 1)
			var frames []restatetest.Frame
			go func() {
				var err error
				frames, err = ok.Play([]any{restatetest.Start("inv_small", 1), restatetest.Input([]byte("small"))}, nil)
				done <- err
			}()
			<-inRun

			big := restatetest.Open(ctx, client, restatetest.InvokeURL(srv.URL, "S", "h"), v)
			defer big.Close()
			got, err := big.Play([]any{restatetest.Start("inv_big", 3), restatetest.Input(make([]byte, 600)),
				restatetest.Run(1, "invoke"), restatetest.RunValue(1, make([]byte, 600))}, nil)
			if err != nil || len(got) != 1 {
				t.Fatalf("journal over the bound: %v %v, want one ErrorMessage", got, err)
			}
			e, isErr := restatetest.Message[*servicev1.ErrorMessage](got[0])
			if !isErr || e.GetCode() != 571 || !strings.Contains(e.GetMessage(), "exceeds the 1024 bytes") {
				t.Fatalf("got %v, want ErrorMessage 571 naming the bound", got[0])
			}

			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			wantStream(t, frames, restatetest.Run(1, "invoke"), propose(v, 1, "small"), output("small"), end)
		})
	}
}

// A stream's slot is free once its terminal message is written: the
// runtime may start the next invocation as soon as it has read End, before
// it ends its own side of the stream, and that must not be refused
// (MaxConcurrentInvocations 1, the first stream's request still open).
func TestSlotFreedWithTheTerminalMessage(t *testing.T) {
	_, url, _ := boundedServer(t, restate.Config{MaxConcurrentInvocations: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := restatetest.NewH2CClient()
	invoke := restatetest.InvokeURL(url, "S", "h")
	first := restatetest.Open(ctx, client, invoke, 6)
	defer first.Close()
	if err := first.Send(restatetest.Start("inv_first", 1), restatetest.Input([]byte(`"a"`))); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := first.Next()
		if err != nil {
			t.Fatal(err)
		}
		if restatetest.Terminal(f.Type()) {
			break
		}
		if a, ok := restatetest.Answer(f); ok {
			if err := first.Send(a); err != nil {
				t.Fatal(err)
			}
		}
	}
	second := restatetest.Open(ctx, client, invoke, 6)
	defer second.Close()
	frames, err := second.Play([]any{restatetest.Start("inv_second", 1), restatetest.Input([]byte(`"b"`))}, nil)
	if err != nil || len(frames) == 0 || frames[len(frames)-1].Type() != wire.EndMessageType {
		t.Fatalf("the next stream while the first one's request was still open: %v %v, want it served to End", frames, err)
	}
	_ = first.CloseSend()
}
