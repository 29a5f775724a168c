package functionruntime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// contextRecorder is a fake adapter that records each invocation's
// step context.
func contextRecorder() (*fakeAdapter, func() []*functionruntime.StepContext) {
	var mu sync.Mutex
	var seen []*functionruntime.StepContext
	ad := &fakeAdapter{invoke: func(_ context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, inv.Context)
		return functionruntime.Result{Output: []byte("null")}, nil
	}}
	return ad, func() []*functionruntime.StepContext {
		mu.Lock()
		defer mu.Unlock()
		return append([]*functionruntime.StepContext(nil), seen...)
	}
}

func withStepContext(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// Rule: the fnbridge-context and fnbridge-context-token metadata of
// InvokeFunction become Invocation.Context, over gRPC and through the
// in-process client; without them it is nil; malformed ones are
// InvalidArgument and nothing runs.
func TestInvokeStepContextFromMetadata(t *testing.T) {
	ad, seen := contextRecorder()
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	conn, _, _ := served(t, h, time.Second)
	clients := map[string]executorv1.FunctionRuntimeClient{
		"grpc":  executorv1.NewFunctionRuntimeClient(conn),
		"local": h.cli,
	}
	ref := h.mustReady("steps", 1)
	req := &executorv1.InvokeFunctionRequest{Registration: ref, ContentType: "application/json", Input: []byte("null")}
	want := functionruntime.StepContext{Address: "unix:///run/fnbridge/ctx.sock", Token: "tok_0123456789abcdefghijkl"}
	for name, cli := range clients {
		t.Run(name, func(t *testing.T) {
			before := len(seen())
			ctx := withStepContext(context.Background(),
				functionruntime.MetadataContext, want.Address, functionruntime.MetadataContextToken, want.Token)
			if _, err := cli.InvokeFunction(ctx, req); err != nil {
				t.Fatal(err)
			}
			tcp := withStepContext(context.Background(),
				functionruntime.MetadataContext, "tcp://10.0.0.5:9091", functionruntime.MetadataContextToken, want.Token)
			if _, err := cli.InvokeFunction(tcp, req); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.InvokeFunction(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			fresh := withStepContext(context.Background(), functionruntime.MetadataContext, want.Address,
				functionruntime.MetadataContextToken, want.Token, functionruntime.MetadataContextFresh, "true",
				functionruntime.MetadataContextOrdered, "true")
			if _, err := cli.InvokeFunction(fresh, req); err != nil {
				t.Fatal(err)
			}
			got := seen()[before:]
			wantFresh := want
			wantFresh.Fresh, wantFresh.Ordered = true, true
			if len(got) != 4 || got[0] == nil || *got[0] != want || got[1] == nil || got[1].Address != "tcp://10.0.0.5:9091" || got[2] != nil ||
				got[3] == nil || *got[3] != wantFresh {
				t.Fatalf("contexts = %+v, want %+v, the tcp one, nil, then %+v", got, want, wantFresh)
			}

			for _, kv := range [][]string{
				{functionruntime.MetadataContext, want.Address},                                                        // no token
				{functionruntime.MetadataContextToken, want.Token},                                                     // no address
				{functionruntime.MetadataContext, "/run/ctx.sock", functionruntime.MetadataContextToken, want.Token},   // no scheme
				{functionruntime.MetadataContext, "unix://ctx.sock", functionruntime.MetadataContextToken, want.Token}, // relative
				{functionruntime.MetadataContext, "tcp://host", functionruntime.MetadataContextToken, want.Token},      // no port
				{functionruntime.MetadataContext, want.Address, functionruntime.MetadataContextToken, "has space"},     // token
				{functionruntime.MetadataContext, want.Address, functionruntime.MetadataContext, want.Address,
					functionruntime.MetadataContextToken, want.Token}, // twice
				{functionruntime.MetadataContext, want.Address, functionruntime.MetadataContextToken, want.Token,
					functionruntime.MetadataContextFresh, "yes"}, // fresh is "true" or absent
				{functionruntime.MetadataContext, want.Address, functionruntime.MetadataContextToken, want.Token,
					functionruntime.MetadataContextOrdered, "1"}, // so is ordered
			} {
				n := len(seen())
				_, err := cli.InvokeFunction(withStepContext(context.Background(), kv...), req)
				wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
				if len(seen()) != n {
					t.Fatalf("metadata %q: the invocation ran", kv)
				}
			}
		})
	}
}
