package restate_test

import (
	"context"
	"fmt"
	"net"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// A bridge-shaped handler: the side effect runs inside Run, so a replay
// returns its journaled result instead of executing it again.
func Example() {
	ep := restate.NewEndpoint(restate.Config{ProtocolMode: restate.BidiStream})
	err := ep.Bind(restate.Service{Name: "Greeter", Handlers: []restate.Handler{{
		Name: "greet",
		Fn: func(ctx restate.Context, input []byte) ([]byte, error) {
			return ctx.Run("invoke", func(context.Context) ([]byte, error) {
				if len(input) == 0 {
					return nil, &restate.TerminalError{Code: 400, Message: "empty input"}
				}
				return append([]byte("hello "), input...), nil
			})
		},
	}}})
	if err != nil {
		panic(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := restate.NewHTTPServer("", ep)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// Play restate-server's part over h2c with protocol v7.
	s := restatetest.Open(context.Background(), restatetest.NewH2CClient(),
		restatetest.InvokeURL("http://"+ln.Addr().String(), "Greeter", "greet"), 7)
	defer s.Close()
	frames, err := s.Play([]any{restatetest.Start("inv_1", 1), restatetest.Input([]byte("world"))}, nil)
	if err != nil {
		panic(err)
	}
	for _, f := range frames {
		fmt.Println(f.Type())
	}
	// Output:
	// RunCommand
	// ProposeRunCompletionMessage
	// OutputCommand
	// EndMessage
}
