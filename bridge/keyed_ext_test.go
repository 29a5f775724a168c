package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// keyedHarness serves a virtual object Counter (add: steps, exclusive;
// get: steps, shared; key: function mode) and a plain service Svc/fn, all
// backed by one fake runtime whose functions fns plays by handler name.
func keyedHarness(t *testing.T, fns map[string]func(ctx context.Context, env map[string]string, c *stepctx.Client, in []byte) ([]byte, error)) *harness {
	t.Helper()
	h := newHarnessConfig(t, func(dir string) string {
		handler := func(name, extra string) string {
			return "      - name: " + name + "\n        runtime: python\n        dir: " + dir + "\n        handler: mod.fn\n        timeout: 5s\n" + extra
		}
		return "services:\n  - name: Counter\n    type: virtual_object\n    handlers:\n" +
			handler("add", "        durability: steps\n") +
			handler("get", "        durability: steps\n        shared: true\n") +
			handler("key", "") +
			"  - name: Svc\n    handlers:\n" + handler("fn", "")
	})
	h.fake.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		env := map[string]string{}
		for _, kv := range md.Get(functionruntime.MetadataEnv) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		var c *stepctx.Client
		if addr, tok := md.Get(functionruntime.MetadataContext), md.Get(functionruntime.MetadataContextToken); len(addr) == 1 && len(tok) == 1 {
			var err error
			if c, err = stepctx.NewClient(addr[0], tok[0]); err != nil {
				return nil, err
			}
			defer c.Close()
		}
		parts := strings.Split(r.GetRegistration().GetRunUid(), "-") // INSTANCE-counter-add-0
		name := parts[len(parts)-2]
		out, err := fns[name](ctx, env, c, r.Input)
		if err != nil {
			return nil, err
		}
		return &executorv1.InvokeFunctionResponse{Registration: r.Registration, InvocationId: r.InvocationId, Output: out}, nil
	})
	return h
}

func keyOf(env map[string]string) string {
	if k, ok := env[functionruntime.EnvKey]; ok {
		return k
	}
	return "<unset>"
}

// A keyed invocation's function gets its key (FNBRIDGE_KEY, per
// invocation) in both durability modes, a plain service's none; an
// exclusive steps handler reads and writes the object's state, which
// reaches Restate as state commands.
func TestKeyedInvocations(t *testing.T) {
	h := keyedHarness(t, map[string]func(context.Context, map[string]string, *stepctx.Client, []byte) ([]byte, error){
		"add": func(ctx context.Context, env map[string]string, c *stepctx.Client, in []byte) ([]byte, error) {
			v, _, err := c.GetState(ctx, "count")
			if err != nil {
				return nil, err
			}
			n, _ := strconv.Atoi(string(v))
			by, _ := strconv.Atoi(string(in))
			if err := c.SetState(ctx, "count", []byte(strconv.Itoa(n+by))); err != nil {
				return nil, err
			}
			return []byte(fmt.Sprintf(`{"key":%q,"count":%d}`, keyOf(env), n+by)), nil
		},
		"key": func(_ context.Context, env map[string]string, c *stepctx.Client, _ []byte) ([]byte, error) {
			return []byte(fmt.Sprintf("%q %v", keyOf(env), c != nil)), nil
		},
		"fn": func(_ context.Context, env map[string]string, _ *stepctx.Client, _ []byte) ([]byte, error) {
			return []byte(fmt.Sprintf("%q", keyOf(env))), nil
		},
	})
	for _, v := range []int{5, 6, 7} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			h.target = "Counter/add"
			got := h.play(v, []any{restatetest.StartKeyed("inv_add", "käse 1", 1, map[string]string{"count": "40"}, false), restatetest.Input([]byte("2"))}, nil)
			wantTypes(t, got, wire.GetEagerStateCommandType, wire.SetStateCommandType, wire.OutputCommandType, wire.EndMessageType)
			if s, _ := restatetest.Message[*servicev1.SetStateCommandMessage](got[1]); string(s.GetKey()) != "count" || string(s.GetValue().GetContent()) != "42" {
				t.Fatalf("SetState %v, want count=42", s)
			}
			if o := string(outputValue(t, got[2])); o != `{"key":"käse 1","count":42}` {
				t.Fatalf("output %s", o)
			}

			h.target = "Counter/key"
			got = h.play(v, []any{restatetest.StartKeyed("inv_key", "k2", 1, nil, false), restatetest.Input(nil)}, nil)
			if o := string(outputValue(t, got[len(got)-2])); o != `"k2" false` {
				t.Fatalf("function mode: %s, want the key and no step context", o)
			}
			h.target = "Svc/fn"
			got = h.play(v, fresh(`{}`), nil)
			if o := string(outputValue(t, got[len(got)-2])); o != `"<unset>"` {
				t.Fatalf("plain service: %s, want no key", o)
			}
		})
	}
}

// "A shared handler reads state concurrently with an exclusive one; its
// write attempt gets the clear terminal error": nothing is journaled for
// it and the function goes on.
func TestSharedHandlerCannotWriteState(t *testing.T) {
	var refusal error
	h := keyedHarness(t, map[string]func(context.Context, map[string]string, *stepctx.Client, []byte) ([]byte, error){
		"get": func(ctx context.Context, _ map[string]string, c *stepctx.Client, _ []byte) ([]byte, error) {
			refusal = c.SetState(ctx, "count", []byte("0"))
			v, _, err := c.GetState(ctx, "count")
			return v, err
		},
	})
	h.target = "Counter/get"
	got := h.play(7, []any{restatetest.StartKeyed("inv_get", "k1", 1, map[string]string{"count": "7"}, false), restatetest.Input(nil)}, nil)
	wantTypes(t, got, wire.GetEagerStateCommandType, wire.OutputCommandType, wire.EndMessageType)
	if o := string(outputValue(t, got[1])); o != "7" {
		t.Fatalf("output %s", o)
	}
	var cf *stepctx.CallFailedError
	if !errors.As(refusal, &cf) || cf.Failure.Code != 500 || !strings.Contains(cf.Failure.Message, "Counter/get is a shared handler") {
		t.Fatalf("the write from the shared handler: %v, want its terminal refusal naming the handler", refusal)
	}
}

// A call to a keyed service of the configuration without a key is refused
// (Restate would run it under the empty key) and journals nothing.
func TestCallToAKeyedServiceNeedsAKey(t *testing.T) {
	var refusal error
	h := keyedHarness(t, map[string]func(context.Context, map[string]string, *stepctx.Client, []byte) ([]byte, error){
		"add": func(ctx context.Context, _ map[string]string, c *stepctx.Client, _ []byte) ([]byte, error) {
			_, refusal = c.Send(ctx, stepctx.SendRequest{CallRequest: stepctx.CallRequest{Service: "Counter", Handler: "get"}})
			return []byte("1"), nil
		},
	})
	h.target = "Counter/add"
	got := h.play(6, []any{restatetest.StartKeyed("inv_add", "k1", 1, nil, false), restatetest.Input(nil)}, nil)
	wantTypes(t, got, wire.OutputCommandType, wire.EndMessageType)
	var cf *stepctx.CallFailedError
	if !errors.As(refusal, &cf) || !strings.Contains(cf.Failure.Message, "Counter is a virtual object, whose handlers run under a key") {
		t.Fatalf("the send without a key: %v, want its refusal", refusal)
	}
}

// A steps-mode function's outputs (FNBRIDGE_OUTPUTS, set_output) have no
// run to be journaled in: they are on the invocation's log line rather
// than dropped without a word.
func TestStepsOutputsAreLogged(t *testing.T) {
	h := keyedHarness(t, nil)
	h.fake.setInvoke(func(_ context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		return &executorv1.InvokeFunctionResponse{Registration: r.Registration, InvocationId: r.InvocationId, Output: []byte("1"),
			Outputs: map[string]string{"greeted": "yes"}}, nil
	})
	h.target = "Counter/add"
	got := h.play(6, []any{restatetest.StartKeyed("inv_out", "k", 1, nil, false), restatetest.Input(nil)}, nil)
	wantTypes(t, got, wire.OutputCommandType, wire.EndMessageType)
	recs := h.logs.withMessage("invocation")
	if len(recs) != 1 || fmt.Sprint(recs[0]["outputs"]) != "map[greeted:yes]" {
		t.Fatalf("invocation log lines %v, want one with the outputs", recs)
	}
}

// A key longer than a function can be given (FNBRIDGE_KEY, 8192 bytes),
// or holding a NUL byte, fails the invocation terminally with 400, saying
// so in the user's words, in both durability modes; the function never
// runs.
func TestKeyAFunctionCannotBeGivenIsRefused(t *testing.T) {
	ran := 0
	fn := func(context.Context, map[string]string, *stepctx.Client, []byte) ([]byte, error) {
		ran++
		return []byte("1"), nil
	}
	h := keyedHarness(t, map[string]func(context.Context, map[string]string, *stepctx.Client, []byte) ([]byte, error){"add": fn, "key": fn})
	for key, want := range map[string]string{
		strings.Repeat("k", functionruntime.MaxInvocationEnvValue+1): "the key is 8193 bytes: fnbridge gives a function keys of at most 8192 bytes (FNBRIDGE_KEY)",
		// A URL's %00 reaches the key; said as a key, not in the words of
		// the gRPC metadata that carries it to the runtime.
		"a\x00b": "the key holds a NUL byte, which no environment variable can: fnbridge gives a function its key as FNBRIDGE_KEY",
	} {
		for _, target := range []string{"Counter/add", "Counter/key"} {
			h.target = target
			got := h.play(6, []any{restatetest.StartKeyed("inv_bad_key", key, 1, nil, false), restatetest.Input(nil)}, nil)
			out, ok := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2])
			if !ok || out.GetFailure().GetCode() != 400 || out.GetFailure().GetMessage() != want {
				t.Fatalf("%s: %v, want the terminal failure 400 %q", target, got, want)
			}
		}
	}
	if ran != 0 {
		t.Fatalf("the function ran %d times, want never", ran)
	}
}

// A steps function that fails retryably once Restate's CANCEL has
// arrived, with no context call to take it (a step or code running past
// its timeout), ends the invocation cancelled (409), and its log line and
// outcome say cancelled: "retryable_failure" promised a retry that never
// comes.
func TestStepsFunctionFailingAfterCancelIsCancelled(t *testing.T) {
	h := keyedHarness(t, map[string]func(context.Context, map[string]string, *stepctx.Client, []byte) ([]byte, error){
		"add": func(context.Context, map[string]string, *stepctx.Client, []byte) ([]byte, error) {
			return nil, runtimeError(codes.DeadlineExceeded, functionruntime.ReasonInvocationTimeout, "timed out after 5s")
		},
	})
	h.target = "Counter/add"
	got := h.play(7, []any{restatetest.StartKeyed("inv_late", "k1", 2, nil, false), restatetest.Input(nil), restatetest.Cancel()}, nil)
	wantTypes(t, got, wire.OutputCommandType, wire.EndMessageType)
	if o, _ := restatetest.Message[*servicev1.OutputCommandMessage](got[0]); o.GetFailure().GetCode() != 409 {
		t.Fatalf("output %v, want 409", o)
	}
	recs := h.logs.withMessage("invocation")
	if len(recs) != 1 || recs[0]["outcome"] != "cancelled" || !strings.Contains(fmt.Sprint(recs[0]["error"]), "cancelled by Restate") {
		t.Fatalf("invocation log lines %v, want one with outcome cancelled saying Restate cancelled it", recs)
	}
}

// A steps function whose invocation Restate cancels sees its pending wait
// fail with 409 (TerminalError), may compensate with a journaled step,
// and its terminal failure ends the invocation with 409 and its message.
func TestCancelledStepsFunctionCompensates(t *testing.T) {
	started := make(chan struct{})
	var waitErr error
	h := keyedHarness(t, map[string]func(context.Context, map[string]string, *stepctx.Client, []byte) ([]byte, error){
		"add": func(ctx context.Context, _ map[string]string, c *stepctx.Client, _ []byte) ([]byte, error) {
			close(started)
			_, waitErr = c.Sleep(ctx, 3_600_000_000_000)
			rec, run, err := c.RunStart(ctx, "undo")
			if err != nil || rec != nil {
				return nil, fmt.Errorf("compensation step: %v %v", rec, err)
			}
			if err := c.RunComplete(ctx, run, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("undone")}}); err != nil {
				return nil, err
			}
			return nil, runtimeError(codes.Unknown, functionruntime.ReasonHandlerTerminalError, "undone after the cancellation")
		},
	})
	h.target = "Counter/add"
	got := h.playWith(7, []any{restatetest.StartKeyed("inv_cancel", "k1", 1, nil, false), restatetest.Input(nil)}, nil, func(s *restatetest.Session) {
		<-started
		_ = s.Send(restatetest.Cancel())
	})
	wantTypes(t, got, wire.SleepCommandType, wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	var cf *stepctx.CallFailedError
	if !errors.As(waitErr, &cf) || cf.Failure.Code != 409 {
		t.Fatalf("the pending wait: %v, want a 409 terminal failure", waitErr)
	}
	o, _ := restatetest.Message[*servicev1.OutputCommandMessage](got[3])
	if o.GetFailure().GetCode() != 409 || o.GetFailure().GetMessage() != "undone after the cancellation" {
		t.Fatalf("output %v, want 409 with the function's message", o)
	}
}
