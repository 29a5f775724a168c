// Command sdkgo is the benchmark's reference peer (N): the same echo
// workload as fnbridge's, written natively with github.com/restatedev/sdk-go
// and wrapped in restate.Run so both sides journal one run per invocation.
// It lives in its own module so the SDK never enters fnbridge's module.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os/signal"
	"syscall"

	restate "github.com/restatedev/sdk-go"
	"github.com/restatedev/sdk-go/server"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9081", "address to serve the Restate endpoint on")
	requestResponse := flag.Bool("request-response", false, "serve REQUEST_RESPONSE instead of BIDI_STREAM")
	flag.Parse()

	echo := restate.NewService("Echo").Handler("echo", restate.NewServiceHandler(
		func(ctx restate.Context, in json.RawMessage) (json.RawMessage, error) {
			return restate.Run(ctx, func(restate.RunContext) (json.RawMessage, error) {
				return in, nil
			}, restate.WithName("invoke"))
		}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := server.NewRestate().Bidirectional(!*requestResponse).Bind(echo).Start(ctx, *listen); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
