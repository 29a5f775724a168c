package functionruntime_test

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// Rule (docs/ARCHITECTURE.md, per-invocation environment): the
// fnbridge-env-bin metadata of InvokeFunction becomes Invocation.Env, over
// gRPC (base64 on the wire) and through the in-process client alike;
// without it Env is nil; a name off the allow-list, a name given twice, or
// a value too long, not UTF-8 or with a NUL byte is InvalidArgument and
// nothing runs.
func TestInvokeInvocationEnvFromMetadata(t *testing.T) {
	var mu sync.Mutex
	var seen []map[string]string
	ad := &fakeAdapter{invoke: func(_ context.Context, inv functionruntime.Invocation) (functionruntime.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, inv.Env)
		return functionruntime.Result{Output: []byte("null")}, nil
	}}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	conn, _, _ := served(t, h, time.Second)
	clients := map[string]executorv1.FunctionRuntimeClient{
		"grpc":  executorv1.NewFunctionRuntimeClient(conn),
		"local": h.cli,
	}
	ref := h.mustReady("env", 1)
	req := &executorv1.InvokeFunctionRequest{Registration: ref, ContentType: "application/json", Input: []byte("null")}
	key := "Müller = \"42\"\nsecond line"
	for name, cli := range clients {
		t.Run(name, func(t *testing.T) {
			before := count()
			ctx := functionruntime.WithInvocationEnv(context.Background(), functionruntime.EnvKey, key)
			ctx = functionruntime.WithInvocationEnv(ctx, functionruntime.EnvTraceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			if _, err := cli.InvokeFunction(ctx, req); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.InvokeFunction(functionruntime.WithInvocationEnv(context.Background(), functionruntime.EnvKey, ""), req); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.InvokeFunction(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := append([]map[string]string(nil), seen[before:]...)
			mu.Unlock()
			want := []map[string]string{
				{functionruntime.EnvKey: key, functionruntime.EnvTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
				{functionruntime.EnvKey: ""},
				nil,
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("environments = %q, want %q", got, want)
			}

			for _, tc := range []struct {
				values []string
				want   string
			}{
				{[]string{"PATH=/tmp/evil"}, "NAME one of FNBRIDGE_KEY, TRACEPARENT, TRACESTATE"},
				{[]string{"LD_PRELOAD=/tmp/x.so"}, "NAME one of"},
				{[]string{"FNBRIDGE_KEY"}, "want NAME=VALUE"},
				{[]string{"FNBRIDGE_KEY=a", "FNBRIDGE_KEY=b"}, "sets FNBRIDGE_KEY more than once"},
				{[]string{"TRACESTATE=" + strings.Repeat("x", functionruntime.MaxInvocationEnvValue+1)}, "at most 8192 allowed"},
				{[]string{"FNBRIDGE_KEY=a\x00b"}, "without NUL bytes"},
				{[]string{"FNBRIDGE_KEY=\xff\xfe"}, "must be UTF-8"},
			} {
				n := count()
				kv := []string{}
				for _, v := range tc.values {
					kv = append(kv, functionruntime.MetadataEnv, v)
				}
				_, err := cli.InvokeFunction(metadata.AppendToOutgoingContext(context.Background(), kv...), req)
				wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("metadata %q: %v, want it to say %q", tc.values, err, tc.want)
				}
				if count() != n {
					t.Fatalf("metadata %q: the invocation ran", tc.values)
				}
			}
		})
	}
}
