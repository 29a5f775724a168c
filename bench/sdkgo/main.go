// Command sdkgo is the benchmark's reference peer: the same workloads as
// fnbridge's, written natively with github.com/restatedev/sdk-go. Peer N
// (--service Echo) is the echo wrapped in restate.Run, so both sides
// journal one run per invocation; peer N5 (--service Steps) takes five
// durable steps (restate.Run), each returning a small JSON value derived
// from the input, like fnbridge's durability: steps handlers P5 and S5.
// It lives in its own module so the SDK never enters fnbridge's module.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os/signal"
	"strconv"
	"syscall"

	restate "github.com/restatedev/sdk-go"
	"github.com/restatedev/sdk-go/server"
)

// stepIn is the load generator's request, {"n":i}.
type stepIn struct {
	N int64 `json:"n"`
}

// stepOut is one step's value, {"n":i,"s":k}; the handler returns the
// fifth.
type stepOut struct {
	N int64 `json:"n"`
	S int   `json:"s"`
}

// steps is the number of durable steps of the Steps handler.
const steps = 5

func main() {
	listen := flag.String("listen", "127.0.0.1:9081", "address to serve the Restate endpoint on")
	requestResponse := flag.Bool("request-response", false, "serve REQUEST_RESPONSE instead of BIDI_STREAM")
	service := flag.String("service", "Echo", "service to serve: Echo (echo in one restate.Run) | Steps (five restate.Run steps)")
	flag.Parse()

	var def restate.ServiceDefinition
	switch *service {
	case "Echo":
		def = restate.NewService("Echo").Handler("echo", restate.NewServiceHandler(
			func(ctx restate.Context, in json.RawMessage) (json.RawMessage, error) {
				return restate.Run(ctx, func(restate.RunContext) (json.RawMessage, error) {
					return in, nil
				}, restate.WithName("invoke"))
			}))
	case "Steps":
		def = restate.NewService("Steps").Handler("steps", restate.NewServiceHandler(
			func(ctx restate.Context, in stepIn) (stepOut, error) {
				var out stepOut
				for k := 1; k <= steps; k++ {
					var err error
					out, err = restate.Run(ctx, func(restate.RunContext) (stepOut, error) {
						return stepOut{N: in.N, S: k}, nil
					}, restate.WithName("s"+strconv.Itoa(k)))
					if err != nil {
						return stepOut{}, err
					}
				}
				return out, nil
			}))
	default:
		log.Fatalf("--service %q: want Echo or Steps", *service)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := server.NewRestate().Bidirectional(!*requestResponse).Bind(def).Start(ctx, *listen); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
