package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// newLocalBridge is a bridge whose one handler, Obj/fn (a virtual object,
// durability: steps, suspend_after 100ms), runs fn with a context client.
func newLocalBridge(t *testing.T, fn func(ctx context.Context, c *stepctx.Client) ([]byte, error)) *bridge.Bridge {
	t.Helper()
	return newLocalBridgeWith(t, "", fn)
}

// newLocalBridgeWith is newLocalBridge with top-level settings first in
// the configuration.
func newLocalBridgeWith(t *testing.T, settings string, fn func(ctx context.Context, c *stepctx.Client) ([]byte, error)) *bridge.Bridge {
	t.Helper()
	config := func(dir string) string {
		return settings + `
services:
  - name: Obj
    type: virtual_object
    handlers:
      - {name: fn, runtime: python, dir: ` + dir + `, handler: mod.fn, durability: steps, timeout: 2s, suspend_after: 100ms, lease_timeout: 1s}
`
	}
	fake := newFakeRuntime()
	fake.setInvoke(func(ctx context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		addr, tok := md.Get(functionruntime.MetadataContext), md.Get(functionruntime.MetadataContextToken)
		if len(addr) != 1 || len(tok) != 1 {
			return nil, errors.New("no context metadata on InvokeFunction")
		}
		c, err := stepctx.NewClient(addr[0], tok[0])
		if err != nil {
			return nil, err
		}
		defer c.Close()
		out, err := fn(ctx, c)
		if err != nil {
			return nil, err
		}
		return &executorv1.InvokeFunctionResponse{Registration: r.Registration, InvocationId: r.InvocationId, Output: out}, nil
	})
	return startBridge(t, config, bridge.Options{}, fake)
}

// step runs (or replays) the step name, whose execution returns value.
func step(ctx context.Context, c *stepctx.Client, name, value string, executed *atomic.Int32) (string, error) {
	res, h, err := c.RunStart(ctx, name)
	if err != nil || res != nil {
		if res != nil {
			return string(res.Value), nil
		}
		return "", err
	}
	executed.Add(1)
	return value, c.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte(value)}})
}

// A wait past suspend_after ends the attempt; once it is over, a new
// attempt replays the journal: steps and state reads return what was
// recorded, the short sleep does not suspend, and only the step after the
// long sleep executes anew.
func TestInvokeLocalSuspendsAndReplays(t *testing.T) {
	var attempts, before, after atomic.Int32
	b := newLocalBridge(t, func(ctx context.Context, c *stepctx.Client) ([]byte, error) {
		attempts.Add(1)
		_, found, err := c.GetState(ctx, "n")
		if err != nil {
			return nil, err
		}
		if err := c.SetState(ctx, "n", []byte("1")); err != nil {
			return nil, err
		}
		v1, err := step(ctx, c, "before", fmt.Sprintf("%q", fmt.Sprint("b", attempts.Load())), &before)
		if err != nil {
			return nil, err
		}
		if _, err := c.Sleep(ctx, 20*time.Millisecond); err != nil { // under suspend_after
			return nil, err
		}
		if _, err := c.Sleep(ctx, 400*time.Millisecond); err != nil {
			return nil, err
		}
		v2, err := step(ctx, c, "after", fmt.Sprintf("%q", fmt.Sprint("a", attempts.Load())), &after)
		if err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "%v %s %s", found, v1, v2), nil
	})
	var suspensions []bridge.LocalSuspension
	start := time.Now()
	res, err := b.InvokeLocal(context.Background(), "Obj", "fn", "k", []byte(`{}`), func(s bridge.LocalSuspension) {
		suspensions = append(suspensions, s)
	})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Output), `false "b1" "a2"`; got != want {
		t.Errorf("output %s, want %s: the replayed read and step give what attempt 1 recorded", got, want)
	}
	if attempts.Load() != 2 || before.Load() != 1 || after.Load() != 1 {
		t.Errorf("%d attempts, step before executed %d times, after %d; want 2, 1, 1", attempts.Load(), before.Load(), after.Load())
	}
	if len(suspensions) != 1 {
		t.Fatalf("suspensions %+v, want one", suspensions)
	}
	s := suspensions[0]
	if s.Attempt != 1 || s.Waiting != "a durable sleep" || s.SuspendAfter != 100*time.Millisecond || s.Until.Before(start.Add(400*time.Millisecond)) {
		t.Errorf("suspension %+v, want attempt 1 on a durable sleep ending after %s", s, start.Add(400*time.Millisecond))
	}
	if took < 400*time.Millisecond {
		t.Errorf("took %s, want the 400ms sleep waited", took)
	}
}

// The timeout counts the short waits answered on the open stream: once
// the first half of it is gone, a wait suspends (however short), so waits
// never add up to a killed attempt; the next attempt replays them and
// goes on with a whole timeout.
func TestInvokeLocalShortWaitsSuspendPastHalfTheTimeout(t *testing.T) {
	var attempts atomic.Int32
	b := newLocalBridge(t, func(ctx context.Context, c *stepctx.Client) ([]byte, error) {
		attempts.Add(1)
		for range 30 { // 30 x 80ms: more than the 2s timeout, each under suspend_after
			if _, err := c.Sleep(ctx, 80*time.Millisecond); err != nil {
				return nil, err
			}
		}
		return []byte("done"), nil
	})
	var suspensions []bridge.LocalSuspension
	res, err := b.InvokeLocal(context.Background(), "Obj", "fn", "k", []byte(`{}`), func(s bridge.LocalSuspension) {
		suspensions = append(suspensions, s)
	})
	if err != nil || string(res.Output) != "done" {
		t.Fatalf("InvokeLocal = %v, %v; want done", res, err)
	}
	if len(suspensions) == 0 || !suspensions[0].ByTimeout || suspensions[0].Timeout != 2*time.Second {
		t.Fatalf("suspensions %+v, want the first one by the timeout's first half", suspensions)
	}
}

// A replay that makes another call than the recorded one fails naming
// both, as Restate's 570 would.
func TestInvokeLocalJournalMismatch(t *testing.T) {
	var attempts atomic.Int32
	b := newLocalBridge(t, func(ctx context.Context, c *stepctx.Client) ([]byte, error) {
		var n atomic.Int32
		if _, err := step(ctx, c, fmt.Sprint("step", attempts.Add(1)), `1`, &n); err != nil {
			return nil, err
		}
		_, err := c.Sleep(ctx, 200*time.Millisecond)
		return nil, err
	})
	_, err := b.InvokeLocal(context.Background(), "Obj", "fn", "", []byte(`{}`), nil)
	var mm *bridge.JournalMismatchError
	if !errors.As(err, &mm) || mm.Index != 0 || mm.Recorded != `run "step1"` || mm.Issued != `run "step2"` {
		t.Fatalf("err = %v, want a journal mismatch of run step1 and run step2 at call 0", err)
	}
}

// Cancelling ctx while suspended ends InvokeLocal at once.
func TestInvokeLocalCancelledWhileSuspended(t *testing.T) {
	var attempts atomic.Int32
	b := newLocalBridge(t, func(ctx context.Context, c *stepctx.Client) ([]byte, error) {
		attempts.Add(1)
		_, err := c.Sleep(ctx, time.Hour)
		return nil, err
	})
	ctx, cancel := context.WithCancel(context.Background())
	var cancelled time.Time
	_, err := b.InvokeLocal(ctx, "Obj", "fn", "", []byte(`{}`), func(bridge.LocalSuspension) {
		cancelled = time.Now()
		cancel()
	})
	var be *bridge.Error
	if !errors.As(err, &be) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted while suspended, before attempt 2") {
		t.Fatalf("err = %v, want interrupted while suspended", err)
	}
	if d := time.Since(cancelled); d > time.Second || attempts.Load() != 1 {
		t.Fatalf("returned %s after the cancel, %d attempts; want at once, 1", d, attempts.Load())
	}
}

// The local journal has the bound a journal has under Restate
// (max_journal_bytes): a function that outgrows it is stopped with an
// error naming the setting, rather than growing the process without end.
func TestInvokeLocalJournalIsBounded(t *testing.T) {
	var executed atomic.Int32
	value := strings.Repeat("x", 100)
	b := newLocalBridgeWith(t, "max_journal_bytes: 1Ki\n", func(ctx context.Context, c *stepctx.Client) ([]byte, error) {
		for i := range 1000 {
			if _, err := step(ctx, c, fmt.Sprint("s", i), value, &executed); err != nil {
				return nil, err
			}
		}
		return []byte(`"done"`), nil
	})
	_, err := b.InvokeLocal(context.Background(), "Obj", "fn", "", []byte(`{}`), nil)
	var tl *bridge.LocalJournalTooLargeError
	if !errors.As(err, &tl) || tl.Limit != 1024 || tl.Size <= 1024 || !strings.Contains(err.Error(), "max_journal_bytes") {
		t.Fatalf("err = %v, want the journal over max_journal_bytes (1024)", err)
	}
	if n := int(executed.Load()); n > 1024/len(value)+1 {
		t.Errorf("%d steps executed, want the function stopped once the journal is over 1024 bytes", n)
	}
}
