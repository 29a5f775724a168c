package main

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// The tracer between a driver and a real endpoint counts the endpoint's
// side of each function-mode invocation exactly: one response HEADERS, one
// RunCommand, one proposal, one Output and one End per stream, the
// StartMessage and input the driver sent, and the streams themselves.
func TestH2TraceCountsOneInvocationsConversation(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{})
	err := ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
		return ctx.Run("invoke", func(context.Context) ([]byte, error) { return in, nil })
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(ep)
	srv.Config = restate.NewHTTPServer("", ep)
	srv.Start()
	defer srv.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := newH2Tracer()
	go tr.serve(ln, srv.Listener.Addr().String())
	const n = 20
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := restatetest.Drive(ctx, "http://"+ln.Addr().String(), "S", "h", 6, 4, n); err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
	done := make(chan struct{})
	go func() { tr.wait(); close(done) }()
	select {
	case <-done: // Drive closed its connections, so every pump ended
	case <-ctx.Done():
		t.Fatal("the proxied connections did not end after the driver closed them")
	}

	if tr.invocations != n {
		t.Errorf("counted %d streams, want %d", tr.invocations, n)
	}
	for key, want := range map[string]int{
		"restate>deployment StartMessage":                n,
		"restate>deployment InputCommand":                n,
		"deployment>restate RunCommand":                  n,
		"deployment>restate ProposeRunCompletionMessage": n,
		"deployment>restate OutputCommand":               n,
		"deployment>restate EndMessage":                  n,
	} {
		if got := tr.msgs[key]; got != want {
			t.Errorf("%s: %d, want %d (all messages %v)", key, got, want, tr.msgs)
		}
	}
	if got := tr.frames["deployment>restate HEADERS"]; got != n {
		t.Errorf("%d response HEADERS frames, want %d", got, n)
	}
	if s := tr.summary(); len(s) == 0 {
		t.Error("empty summary")
	}
}
