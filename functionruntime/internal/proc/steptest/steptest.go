// Package steptest gives adapter tests a real durable-steps context
// endpoint (stepctx.Server on a unix socket) and the checks they share.
package steptest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
)

// Server is a context endpoint serving attempts of any Journal, shut down
// at the end of the test.
type Server struct {
	Srv  *stepctx.Server
	Addr string // unix:///...
	Dir  string // a short temporary directory holding the socket
}

// New starts a Server.
func New(t testing.TB) *Server {
	t.Helper()
	srv, addr, dir := stepctxtest.Serve(t)
	return &Server{Srv: srv, Addr: addr, Dir: dir}
}

// Open registers an attempt of j (with opts, such as the handler it
// runs), closed at the end of the test.
func (s *Server) Open(t testing.TB, j stepctx.Journal, opts ...stepctx.AttemptOption) *stepctx.Attempt {
	t.Helper()
	a, err := s.Srv.Open("", j, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// Context is the step context of attempt a; nil when a is nil.
func (s *Server) Context(a *stepctx.Attempt) *functionruntime.StepContext {
	if a == nil {
		return nil
	}
	return &functionruntime.StepContext{Address: s.Addr, Token: a.Token(), Fresh: a.Fresh(), Ordered: true}
}

// Invocation is f's invocation "inv-1" of input, with the step context of
// a unless a is nil.
func (s *Server) Invocation(f *adaptertest.Fixture, a *stepctx.Attempt, input string) functionruntime.Invocation {
	inv := f.Invocation("inv-1", []byte(input))
	inv.Context = s.Context(a)
	return inv
}

// Invoke runs Invocation(f, a, input) on w, bounded by 30s.
func (s *Server) Invoke(t testing.TB, f *adaptertest.Fixture, w functionruntime.Worker, a *stepctx.Attempt, input string) (functionruntime.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.Invoke(ctx, s.Invocation(f, a, input))
}

// MustOutput fails the test unless err is nil and the output is want.
func MustOutput(t testing.TB, res functionruntime.Result, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	if string(res.Output) != want {
		t.Fatalf("output = %q\nwant     %q", res.Output, want)
	}
}

// WantHandlerError fails the test unless err is a HandlerError of want's
// Type, Terminal and ExitCode whose message contains want's.
func WantHandlerError(t testing.TB, err error, want functionruntime.HandlerError) *functionruntime.HandlerError {
	t.Helper()
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) {
		t.Fatalf("error = %v, want a HandlerError", err)
	}
	if he.Type != want.Type || he.Terminal != want.Terminal || he.ExitCode != want.ExitCode || !strings.Contains(he.Message, want.Message) {
		t.Fatalf("error = %+v, want type %q terminal %v exit %d message containing %q", *he, want.Type, want.Terminal, want.ExitCode, want.Message)
	}
	return he
}
