package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate"
)

// newStepsBridge is a bridge with one handler, Svc/fn, whose fake runtime
// plays the function: fn gets the context endpoint's client (from the
// InvokeFunction metadata) and the invocation's ctx.
func newStepsBridge(t *testing.T, durability string, fn func(ctx context.Context, c *stepctx.Client, in []byte) ([]byte, error)) (*bridge.Bridge, *fakeRuntime) {
	t.Helper()
	return newStepsBridgeWith(t, durability, bridge.Options{}, fn)
}

// newStepsBridgeWith is newStepsBridge with the bridge's options (the
// runtime clients are the fake's).
func newStepsBridgeWith(t *testing.T, durability string, opts bridge.Options, fn func(ctx context.Context, c *stepctx.Client, in []byte) ([]byte, error)) (*bridge.Bridge, *fakeRuntime) {
	t.Helper()
	config := func(dir string) string {
		return svcFnConfig(dir, "        timeout: 5s\n        lease_timeout: 200ms\n        durability: "+durability+"\n")
	}
	fake := newFakeRuntime()
	fake.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		var c *stepctx.Client
		if addr, tok := md.Get(functionruntime.MetadataContext), md.Get(functionruntime.MetadataContextToken); len(addr) == 1 && len(tok) == 1 {
			nc, err := stepctx.NewClient(addr[0], tok[0])
			if err != nil {
				return nil, err
			}
			c = nc
			defer c.Close()
		}
		out, err := fn(ctx, c, r.Input)
		if err != nil {
			return nil, err
		}
		return &executorv1.InvokeFunctionResponse{Registration: r.Registration, InvocationId: r.InvocationId, Output: out}, nil
	})
	return startBridge(t, config, opts, fake), fake
}

func runSteps(t *testing.T, b *bridge.Bridge, j stepctx.Journal) (*bridge.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.RunSteps(ctx, "Svc", "fn", j, []byte(`{"n":1}`))
}

// The function reaches the endpoint through the metadata, its steps are
// journaled, its raw result is the Output, and its token is stale after.
func TestStepsAttemptOutputIsTheFunctionsResult(t *testing.T) {
	var client *stepctx.Client
	b, _ := newStepsBridge(t, "steps", func(ctx context.Context, c *stepctx.Client, in []byte) ([]byte, error) {
		if c == nil {
			return nil, errors.New("no context metadata on InvokeFunction")
		}
		client = c
		res, h, err := c.RunStart(ctx, "fetch")
		if err != nil || res != nil {
			return nil, errors.Join(err, errors.New("run was not executed"))
		}
		if err := c.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Value: in}}); err != nil {
			return nil, err
		}
		return []byte("raw, not JSON"), nil
	})
	j := &stepctxtest.Journal{}
	res, err := runSteps(t, b, j)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != "raw, not JSON" {
		t.Fatalf("Output %q, want the function's bytes as they are", res.Output)
	}
	if es := j.Entries(); len(es) != 1 || es[0].Kind != "run" || es[0].Name != "fetch" || string(es[0].Result.Value) != `{"n":1}` {
		t.Fatalf("journal %+v, want the one run with its value", es)
	}
	_, err = client.InvocationID(context.Background())
	var ce *stepctx.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusForbidden {
		t.Fatalf("after the attempt: %v, want 403 (stale token)", err)
	}
}

// The runtime is told an attempt is fresh (metadata
// fnbridge-context-fresh: true) only when its journal replays nothing,
// so a worker pipelines steps only where every step executes; and, on
// every attempt, that the endpoint takes numbered starts sent ahead
// (fnbridge-context-ordered: true).
func TestStepsFreshAttemptIsToldToTheRuntime(t *testing.T) {
	b, _ := newStepsBridge(t, "steps", func(ctx context.Context, _ *stepctx.Client, _ []byte) ([]byte, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		return []byte(strings.Join(md.Get(functionruntime.MetadataContextFresh), ",") + "|" + strings.Join(md.Get(functionruntime.MetadataContextOrdered), ",")), nil
	})
	for _, tc := range []struct {
		j    *stepctxtest.Journal
		want string
	}{{&stepctxtest.Journal{}, "true|true"}, {&stepctxtest.Journal{AlwaysReplaying: true}, "|true"}} {
		res, err := runSteps(t, b, tc.j)
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Output) != tc.want {
			t.Errorf("journal replaying %v: fresh metadata %q, want %q", tc.j.AlwaysReplaying, res.Output, tc.want)
		}
	}
}

// A suspended Python function unwinds (fnbridge.Suspended through its
// finally blocks) before anything stops it: its worker is left alone for
// up to a second, so one that answers in that time stays warm.
func TestStepsSuspendedPythonFunctionUnwindsFirst(t *testing.T) {
	unwound := make(chan error, 1)
	b, _ := newStepsBridge(t, "steps", func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
		if _, err := c.Sleep(context.Background(), time.Hour); !errors.Is(err, stepctx.ErrSuspended) {
			unwound <- errors.Join(err, errors.New("sleep did not suspend"))
			return nil, err
		}
		select { // a finally block's work
		case <-ctx.Done():
			unwound <- fmt.Errorf("stopped while unwinding: %w", context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
			unwound <- nil
		}
		return nil, errors.New("fnbridge.Suspended")
	})
	_, err := runSteps(t, b, &stepctxtest.Journal{HoldSleeps: true})
	if !errors.Is(err, stepctx.ErrSuspended) {
		t.Fatalf("err = %v, want suspended", err)
	}
	if e := <-unwound; e != nil {
		t.Fatal(e)
	}
}

// A step whose process a worker limit killed (its connection closed with
// the run open: abandoned) fails naming the limit, terminally, as the same
// limit does outside a step: the runtime's answer is waited for and wins
// over "abandoned", which is retried.
func TestStepsAbandonedByALimitNamesIt(t *testing.T) {
	b, _ := newStepsBridge(t, "steps", func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
		if _, _, err := c.RunStart(ctx, "mem"); err != nil {
			return nil, err
		}
		c.Close() // the worker's end: its connection goes with it
		time.Sleep(100 * time.Millisecond)
		return nil, handlerErrorStatus(functionruntime.LimitExceededType, true, "memory limit of 300Mi exceeded")
	})
	_, err := runSteps(t, b, &stepctxtest.Journal{})
	var be *bridge.Error
	if !errors.As(err, &be) || be.Class != bridge.ClassTerminal || !strings.Contains(err.Error(), "memory limit of 300Mi exceeded") {
		t.Fatalf("err = %v, want the terminal memory limit, not the abandoned step", err)
	}
}

// A step under way when the function's timeout kills it is abandoned
// too, but the attempt fails as the timeout it is (504, retried), as a
// timeout outside a step does, not as an abandoned step (500) that sends
// an operator looking for a crash.
func TestStepsAbandonedByTheTimeoutIsATimeout(t *testing.T) {
	j := &failedRunSignal{Journal: &stepctxtest.Journal{}, failed: make(chan struct{})}
	b, _ := newStepsBridge(t, "steps", func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
		if _, _, err := c.RunStart(ctx, "long"); err != nil {
			return nil, err
		}
		c.Close()  // the worker killed: its connection goes with it
		<-j.failed // the endpoint has seen the step abandoned; then the runtime answers
		return nil, runtimeError(codes.DeadlineExceeded, functionruntime.ReasonInvocationTimeout, "invocation exceeded its timeout of 3s and was killed")
	})
	_, err := runSteps(t, b, j)
	var be *bridge.Error
	if !errors.As(err, &be) || be.Class != bridge.ClassTimeout || !strings.Contains(err.Error(), "exceeded its timeout") {
		t.Fatalf("err = %v, want the timeout, not the abandoned step", err)
	}
}

// failedRunSignal is a journal that closes failed when a step fails
// retryably (an abandoned one included).
type failedRunSignal struct {
	*stepctxtest.Journal
	failed chan struct{}
	once   sync.Once
}

func (j *failedRunSignal) RunComplete(ctx context.Context, run stepctx.Future, out stepctx.RunOutcome) error {
	err := j.Journal.RunComplete(ctx, run, out)
	if out.Retryable != nil {
		j.once.Do(func() { close(j.failed) })
	}
	return err
}

// handlerErrorStatus is the status a runtime answers a handler's failure
// of errorType with, as functionruntime's server does.
func handlerErrorStatus(errorType string, terminal bool, msg string) error {
	reason := functionruntime.ReasonHandlerError
	if terminal {
		reason = functionruntime.ReasonHandlerTerminalError
	}
	st, err := status.New(codes.Unknown, "handler failed: "+errorType+": "+msg).WithDetails(&errdetails.ErrorInfo{
		Domain: functionruntime.ErrorDomain, Reason: reason,
		Metadata: map[string]string{"error_type": errorType, "terminal": strconv.FormatBool(terminal)},
	})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// A wait that suspends cancels the invocation, releases the lease (the
// one registration serves the next attempt at once) and maps to restate's
// attempt-ended.
func TestStepsSuspensionCancelsTheInvocation(t *testing.T) {
	cancelled := make(chan error, 1)
	attempt := 0
	b, fake := newStepsBridge(t, "steps", func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
		attempt++
		if attempt == 2 {
			return []byte(`"resumed"`), nil
		}
		// The function's requests do not end with the worker's ctx (a
		// process is killed instead), so it always reads the 410.
		if _, err := c.Sleep(context.Background(), time.Hour); !errors.Is(err, stepctx.ErrSuspended) {
			err = errors.Join(err, errors.New("sleep did not suspend"))
			cancelled <- err
			return nil, err
		}
		<-ctx.Done() // a function that ignores the 410 until killed
		cancelled <- ctx.Err()
		return nil, ctx.Err()
	})
	j := &stepctxtest.Journal{HoldSleeps: true}
	_, err := runSteps(t, b, j)
	if !errors.Is(err, stepctx.ErrSuspended) {
		t.Fatalf("err = %v, want suspended", err)
	}
	if got := bridge.StepsToRestate(err); !errors.Is(got, restate.ErrAttemptEnded) {
		t.Fatalf("to restate: %v, want ErrAttemptEnded", got)
	}
	if e := <-cancelled; !errors.Is(e, context.Canceled) {
		t.Fatalf("the invocation's ctx ended with %v, want cancelled by the bridge", e)
	}
	// suspend_after defaults to half the 5s timeout, which is also when
	// the timeout's first half, the most a wait may use, ends.
	if sa := j.SuspendAfter(); len(sa) != 1 || sa[0] > 2500*time.Millisecond || sa[0] < 2400*time.Millisecond {
		t.Fatalf("suspend_after passed %v, want [2.5s] (half the 5s timeout) less the time taken to reach the wait", sa)
	}
	j.Restart()
	res, err := runSteps(t, b, j)
	if err != nil || string(res.Output) != `"resumed"` {
		t.Fatalf("next attempt: %v, %v; want the lease free again", res, err)
	}
	if n := fake.invokes.Load(); n != 2 {
		t.Fatalf("%d InvokeFunction calls, want 2", n)
	}
}

// A step that fails retryably fails the attempt (Restate retries it);
// the function is cancelled.
func TestStepsRetryableStepFailsTheAttempt(t *testing.T) {
	b, _ := newStepsBridge(t, "steps", func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
		_, h, err := c.RunStart(ctx, "flaky")
		if err != nil {
			return nil, err
		}
		if err := c.RunComplete(ctx, h, stepctx.RunOutcome{Retryable: &stepctx.RetryableFailure{Message: "ConnectionError"}}); err != nil {
			return nil, err
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	_, err := runSteps(t, b, &stepctxtest.Journal{})
	var sf *stepctx.StepFailedError
	if !errors.As(err, &sf) || sf.Name != "flaky" {
		t.Fatalf("err = %v, want the step's failure", err)
	}
	var re *restate.RetryableError
	if got := bridge.StepsToRestate(err); !errors.As(got, &re) || !strings.Contains(re.Message, "ConnectionError") {
		t.Fatalf("to restate: %v, want a retryable error with the step's message", got)
	}
}

// The function's own failures keep their classes.
func TestStepsFunctionFailureClasses(t *testing.T) {
	var fail error
	b, _ := newStepsBridge(t, "steps", func(context.Context, *stepctx.Client, []byte) ([]byte, error) { return nil, fail })
	fail = runtimeError(codes.Unknown, functionruntime.ReasonHandlerTerminalError, "order not found")
	_, err := runSteps(t, b, &stepctxtest.Journal{})
	var te *restate.TerminalError
	if got := bridge.StepsToRestate(err); !errors.As(got, &te) || te.Message != "order not found" {
		t.Fatalf("terminal handler failure → %v, want a terminal error", got)
	}
	fail = runtimeError(codes.Unknown, functionruntime.ReasonHandlerError, "ValueError: boom")
	_, err = runSteps(t, b, &stepctxtest.Journal{})
	var re *restate.RetryableError
	if got := bridge.StepsToRestate(err); !errors.As(got, &re) || re.Code != restate.CodeInternal {
		t.Fatalf("handler error → %v, want retryable 500", got)
	}
}

// `bridge invoke` of a steps handler: steps execute, sleeps really wait,
// the id is local; calls and sends say they need Restate.
func TestInvokeStepsLocally(t *testing.T) {
	var (
		id    string
		slept time.Duration
	)
	b, _ := newStepsBridge(t, "steps", func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
		for i := 0; i < 2; i++ { // nothing is recorded: the same step executes twice
			res, h, err := c.RunStart(ctx, "step")
			if err != nil || res != nil {
				return nil, errors.Join(err, errors.New("run not executed"))
			}
			if err := c.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("1")}}); err != nil {
				return nil, err
			}
		}
		start := time.Now()
		if _, err := c.Sleep(ctx, 30*time.Millisecond); err != nil {
			return nil, err
		}
		slept = time.Since(start)
		var err error
		if id, err = c.InvocationID(ctx); err != nil {
			return nil, err
		}
		return []byte("done"), nil
	})
	res, err := b.Invoke(context.Background(), "Svc", "fn", []byte(`{}`))
	if err != nil || string(res.Output) != "done" {
		t.Fatalf("Invoke = %v, %v", res, err)
	}
	if slept < 30*time.Millisecond {
		t.Fatalf("sleep returned after %s, want it to wait 30ms", slept)
	}
	if !strings.HasPrefix(id, "inv_local_") {
		t.Fatalf("invocation id %q, want a local one", id)
	}
}

func TestInvokeStepsCallNeedsRestate(t *testing.T) {
	for _, op := range []string{"fnbridge.call", "fnbridge.send"} {
		t.Run(op, func(t *testing.T) {
			b, _ := newStepsBridge(t, "steps", func(ctx context.Context, c *stepctx.Client, _ []byte) ([]byte, error) {
				req := stepctx.CallRequest{Service: "Other", Handler: "h"}
				var err error
				if op == "fnbridge.call" {
					_, err = c.Call(ctx, req)
				} else {
					_, err = c.Send(ctx, stepctx.SendRequest{CallRequest: req})
				}
				return nil, err
			})
			_, err := b.Invoke(context.Background(), "Svc", "fn", []byte(`{}`))
			var nr *bridge.NeedsRestateError
			want := map[string]string{"fnbridge.call": "a durable call (fnbridge.call in Python, fnbridge call in Bash)",
				"fnbridge.send": "a one-way call (fnbridge.send in Python, fnbridge send in Bash)"}[op]
			if !errors.As(err, &nr) || !strings.HasPrefix(err.Error(), want+" needs Restate: run it through `bridge serve`") {
				t.Fatalf("err = %v, want a NeedsRestateError saying %s needs Restate, without a class or code", err, op)
			}
		})
	}
}

// Function mode sends no context metadata and serves no endpoint; the
// manifest does not depend on durability; the private socket directory
// goes away at Close.
func TestDurabilityFunctionUnchanged(t *testing.T) {
	sawMetadata := true
	fb, _ := newStepsBridge(t, "function", func(ctx context.Context, c *stepctx.Client, in []byte) ([]byte, error) {
		sawMetadata = c != nil
		return in, nil
	})
	if _, err := fb.Invoke(context.Background(), "Svc", "fn", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if sawMetadata || fb.ContextURL() != "" {
		t.Fatalf("function mode: metadata %v, endpoint %q; want neither", sawMetadata, fb.ContextURL())
	}
	sb, _ := newStepsBridge(t, "steps", func(context.Context, *stepctx.Client, []byte) ([]byte, error) { return nil, nil })
	if !reflect.DeepEqual(fb.Manifest(), sb.Manifest()) {
		t.Fatalf("manifests differ:\n%+v\n%+v", fb.Manifest(), sb.Manifest())
	}
	sock := strings.TrimPrefix(sb.ContextURL(), "unix://")
	st, err := os.Stat(filepath.Dir(sock))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory %s: %v, mode %v; want 0700", filepath.Dir(sock), err, st.Mode())
	}
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Fatalf("socket directory left behind: %v", err)
	}
}
