package stepctx_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// serve runs a Server on a fresh unix socket or loopback TCP listener and
// returns it with its address as the environment carries it.
func serve(t *testing.T, network string, cfg stepctx.Config) (*stepctx.Server, string) {
	t.Helper()
	return serveWrapped(t, network, cfg, func(l net.Listener) net.Listener { return l })
}

// serveWrapped is serve with Serve given wrap(listener).
func serveWrapped(t *testing.T, network string, cfg stepctx.Config, wrap func(net.Listener) net.Listener) (*stepctx.Server, string) {
	t.Helper()
	var addr string
	if network == "unix" {
		addr = "unix://" + filepath.Join(testtool.SocketDir(t), "ctx.sock")
	} else {
		addr = "tcp://127.0.0.1:0"
	}
	l, err := stepctx.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	s := stepctx.NewServer(cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(wrap(l)) }()
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, stepctx.URL(l)
}

// open opens an attempt on j and returns it with a client for it.
func open(t *testing.T, s *stepctx.Server, addr string, j stepctx.Journal, opts ...stepctx.AttemptOption) (*stepctx.Attempt, *stepctx.Client) {
	t.Helper()
	a, err := s.Open("", j, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	c, err := stepctx.NewClient(addr, a.Token())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return a, c
}

// wantStatus asserts err is a *stepctx.Error with status and a message
// containing substr.
func wantStatus(t *testing.T, err error, status int, substr string) *stepctx.Error {
	t.Helper()
	var e *stepctx.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v, want HTTP %d", err, status)
	}
	if e.Status != status || !strings.Contains(e.Message, substr) {
		t.Fatalf("got HTTP %d %q, want HTTP %d containing %q", e.Status, e.Message, status, substr)
	}
	return e
}

func TestEveryOperationRoundTrips(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			s, addr := serve(t, network, stepctx.Config{})
			if !strings.HasPrefix(addr, network+"://") {
				t.Fatalf("URL %q: want the %s scheme", addr, network)
			}
			j := &stepctxtest.Journal{ID: "inv_1abc", Seed: 42}
			_, c := open(t, s, addr, j, stepctx.WithSuspendAfter(7*time.Second))
			ctx := context.Background()

			rec, h, err := c.RunStart(ctx, "fetch")
			if err != nil || rec != nil || !strings.HasPrefix(h, "run-") {
				t.Fatalf("RunStart: %v %v %q, want an execute handle", rec, err, h)
			}
			if err := c.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("out\n\xff")}}); err != nil {
				t.Fatal(err)
			}
			_, h, _ = c.RunStart(ctx, "check")
			if err := c.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Failure: &stepctx.Failure{Code: 422, Message: "bad"}}}); err != nil {
				t.Fatal(err)
			}
			if r, err := c.Sleep(ctx, 1500*time.Millisecond); err != nil || r.Failure != nil || len(r.Value) != 0 {
				t.Fatalf("Sleep: %+v %v", r, err)
			}
			call := stepctx.CallRequest{Service: "Greeter", Handler: "greet", Key: "k1", IdempotencyKey: "idem",
				Headers: map[string]string{"x-a": "b"}, Input: []byte(`{"name":"you"}`)}
			if r, err := c.Call(ctx, call); err != nil || string(r.Value) != `{"name":"you"}` {
				t.Fatalf("Call: %q %v", r.Value, err)
			}
			timer, err := c.SleepAsync(ctx, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			callH, err := c.CallAsync(ctx, stepctx.CallRequest{Service: "Other", Handler: "h", Input: []byte("raw")})
			if err != nil {
				t.Fatal(err)
			}
			id, err := c.Send(ctx, stepctx.SendRequest{CallRequest: stepctx.CallRequest{Service: "Mailer", Handler: "send", Input: []byte(`1`)}, Delay: 90 * time.Second})
			if err != nil || id != "inv_send_1" {
				t.Fatalf("Send: %q %v", id, err)
			}
			// Awaited late and out of order.
			rs, err := c.Await(ctx, callH, timer)
			if err != nil || len(rs) != 2 || string(rs[0].Value) != "raw" || len(rs[1].Value) != 0 {
				t.Fatalf("Await: %+v %v", rs, err)
			}
			i, r, err := c.AwaitAny(ctx, timer, callH)
			if err != nil || i != 0 || r.Failure != nil {
				t.Fatalf("AwaitAny: %d %+v %v", i, r, err)
			}
			if got, err := c.InvocationID(ctx); err != nil || got != "inv_1abc" {
				t.Fatalf("InvocationID: %q %v", got, err)
			}
			f, n, err := c.Random(ctx)
			if err != nil || f < 0 || f >= 1 || float64(n)/(1<<53) != f {
				t.Fatalf("Random: %v %d %v", f, n, err)
			}
			u, err := c.UUID(ctx)
			if err != nil || !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(u) {
				t.Fatalf("UUID: %q %v", u, err)
			}

			e := j.Entries()
			if len(e) != 7 {
				t.Fatalf("journal has %d entries, want 7: %+v", len(e), e)
			}
			if e[0].Name != "fetch" || string(e[0].Result.Value) != "out\n\xff" {
				t.Errorf("run fetch journaled %+v", e[0])
			}
			if f := e[1].Result.Failure; f == nil || f.Code != 422 || f.Message != "bad" {
				t.Errorf("run check journaled %+v", e[1].Result)
			}
			if e[2].Kind != "sleep" || e[2].Duration != 1500*time.Millisecond {
				t.Errorf("sleep journaled %+v", e[2])
			}
			got := e[3].Call
			if got.Service != "Greeter" || got.Handler != "greet" || got.Key != "k1" || got.IdempotencyKey != "idem" || got.Headers["x-a"] != "b" {
				t.Errorf("call journaled %+v", got)
			}
			if e[6].Kind != "send" || e[6].Delay != 90*time.Second || string(e[6].Call.Input) != "1" {
				t.Errorf("send journaled %+v", e[6])
			}
			for _, d := range j.SuspendAfter() {
				if d != 7*time.Second {
					t.Errorf("Await got suspend-after %v, want the attempt's 7s", d)
				}
			}
		})
	}
}

// The function's timeout counts its waits: a wait is given suspend_after,
// or what is left until the attempt's deadline when that is less, and a
// wait past the deadline suspends at once (never a zero budget, which
// would mean the journal's default).
func TestWaitBudgetEndsBeforeTheDeadline(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		check    func(d time.Duration) bool
	}{
		{"far deadline", time.Hour, func(d time.Duration) bool { return d == 5*time.Second }},
		{"near deadline", 2 * time.Second, func(d time.Duration) bool { return d > time.Second && d <= 2*time.Second }},
		{"deadline passed", -time.Second, func(d time.Duration) bool { return d == time.Nanosecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &stepctxtest.Journal{HoldSleeps: true}
			_, c := open(t, s, addr, j, stepctx.WithSuspendAfter(5*time.Second), stepctx.WithDeadline(time.Now().Add(tc.deadline)))
			if _, err := c.Sleep(ctx, time.Minute); !errors.Is(err, stepctx.ErrSuspended) {
				t.Fatalf("Sleep: %v, want the suspension", err)
			}
			if got := j.SuspendAfter(); len(got) != 1 || !tc.check(got[0]) {
				t.Fatalf("Await budgets %v", got)
			}
		})
	}
}

func TestReplayReturnsRecordedResults(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{Seed: 7}
	ctx := context.Background()

	a1, c1 := open(t, s, addr, j)
	_, h, _ := c1.RunStart(ctx, "a")
	if err := c1.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("A")}}); err != nil {
		t.Fatal(err)
	}
	_, h, _ = c1.RunStart(ctx, "b")
	if err := c1.RunComplete(ctx, h, stepctx.RunOutcome{Retryable: &stepctx.RetryableFailure{Message: "flaky"}}); err != nil {
		t.Fatal(err)
	}
	var sf *stepctx.StepFailedError
	if !errors.As(a1.Err(), &sf) || sf.Name != "b" || sf.Message != "flaky" {
		t.Fatalf("attempt 1 ended with %v, want step b failed", a1.Err())
	}
	_, err := c1.InvocationID(ctx)
	if e := wantStatus(t, err, http.StatusGone, "flaky"); e.Suspended {
		t.Error("a failed attempt reads as suspended")
	}
	a1.Close()

	j.Restart()
	_, c2 := open(t, s, addr, j)
	rec, _, err := c2.RunStart(ctx, "a")
	if err != nil || rec == nil || string(rec.Value) != "A" {
		t.Fatalf("replayed run a: %+v %v, want recorded A", rec, err)
	}
	rec, h, err = c2.RunStart(ctx, "b")
	if err != nil || rec != nil || h == "" {
		t.Fatalf("run b failed retryably before, so it executes again: %+v %q %v", rec, h, err)
	}
	if got := j.Failures(); len(got) != 1 || got[0] != "flaky" {
		t.Errorf("Failures %q", got)
	}
}

func TestRandomIsTheSameOnEveryAttempt(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	ctx := context.Background()
	draw := func(seed uint64) []string {
		_, c := open(t, s, addr, &stepctxtest.Journal{Seed: seed})
		var out []string
		for range 3 {
			f, n, err := c.Random(ctx)
			if err != nil {
				t.Fatal(err)
			}
			u, err := c.UUID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatUint(n, 10), u)
		}
		return out
	}
	first, again, other := draw(99), draw(99), draw(100)
	if !slices.Equal(first, again) {
		t.Errorf("seed 99 gave %q, then %q", first, again)
	}
	if slices.Equal(first, other) {
		t.Errorf("seeds 99 and 100 gave the same %q", first)
	}
	if first[0] == first[3] || first[2] == first[5] {
		t.Errorf("successive draws repeat: %q", first)
	}
}

func TestTokens(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{}
	ctx := context.Background()

	if _, err := s.Open("short", j); err == nil || !strings.Contains(err.Error(), "128 bits") {
		t.Errorf("short token: %v", err)
	}
	if _, err := s.Open("abcdefghijklmnopqrstuvwxyz!", j); err == nil || !strings.Contains(err.Error(), "base64url") {
		t.Errorf("token with !: %v", err)
	}
	a, c := open(t, s, addr, j)
	if len(a.Token()) != 43 {
		t.Errorf("generated token %q: want 43 characters (256 bits)", a.Token())
	}
	if b, _ := s.Open("", j); b == nil || b.Token() == a.Token() {
		t.Error("two generated tokens are equal")
	} else {
		b.Close()
	}
	if _, err := s.Open(a.Token(), j); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("reusing an open token: %v", err)
	}

	foreign, _ := stepctx.NewClient(addr, stepctx.NewToken())
	_, err := foreign.SleepAsync(ctx, time.Second)
	wantStatus(t, err, http.StatusForbidden, "not issued by this bridge")

	if _, err := c.SleepAsync(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	a.Close()
	select {
	case <-a.Done():
	default:
		t.Error("Done not closed by Close")
	}
	if !errors.Is(a.Err(), stepctx.ErrClosed) {
		t.Errorf("Err after Close: %v", a.Err())
	}
	_, err = c.SleepAsync(ctx, time.Second)
	wantStatus(t, err, http.StatusForbidden, "belongs to an attempt that has ended")
	if n := len(j.Entries()); n != 1 {
		t.Errorf("journal has %d entries, want only the one made before Close", n)
	}
	if _, err := s.Open(a.Token(), j); err == nil || !strings.Contains(err.Error(), "never reused") {
		t.Errorf("reusing a stale token: %v", err)
	}
}

func TestConcurrentRequestIsRefusedNotQueued(t *testing.T) {
	s, addr := serve(t, "tcp", stepctx.Config{})
	started, release := make(chan struct{}), make(chan struct{})
	j := &stepctxtest.Journal{}
	j.BeforeRunStart = func(context.Context, string) {
		close(started)
		<-release
	}
	a, c := open(t, s, addr, j)
	other, _ := stepctx.NewClient(addr, a.Token())
	ctx := context.Background()

	first := make(chan error, 1)
	go func() {
		_, _, err := c.RunStart(ctx, "slow")
		first <- err
	}()
	<-started
	_, err := other.SleepAsync(ctx, time.Second)
	wantStatus(t, err, http.StatusConflict, "context calls must be made one at a time")
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the request in flight failed: %v", err)
	}
	e := j.Entries()
	if len(e) != 1 || e[0].Kind != "run" {
		t.Fatalf("journal %+v: want only the run, the refused sleep never reached it", e)
	}
}

func TestNoContextCallInsideARun(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{}
	_, c := open(t, s, addr, j)
	ctx := context.Background()
	_, h, _ := c.RunStart(ctx, "outer")
	_, _, err := c.RunStart(ctx, "inner")
	wantStatus(t, err, http.StatusConflict, `step "outer"`)
	_, err = c.SleepAsync(ctx, time.Second)
	wantStatus(t, err, http.StatusConflict, "neither inside a run step nor beside it (a parallel job or thread)")
	if _, err := c.InvocationID(ctx); err != nil {
		t.Errorf("invocation-id inside a run journals nothing and is allowed: %v", err)
	}
	if err := c.RunComplete(ctx, h, stepctx.RunOutcome{}); err != nil {
		t.Fatal(err)
	}
	err = c.RunComplete(ctx, h, stepctx.RunOutcome{})
	wantStatus(t, err, http.StatusBadRequest, "already completed")
	if _, err := c.SleepAsync(ctx, time.Second); err != nil {
		t.Fatalf("sleep after the run completed: %v", err)
	}
}

func TestSuspension(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{HoldSleeps: true}
	a, c := open(t, s, addr, j)
	ctx := context.Background()

	_, err := c.Sleep(ctx, time.Hour)
	if e := wantStatus(t, err, http.StatusGone, "suspended"); !e.Suspended || !errors.Is(err, stepctx.ErrSuspended) {
		t.Fatalf("the wait's own request: %+v, want suspended", e)
	}
	<-a.Done()
	if !errors.Is(a.Err(), stepctx.ErrSuspended) {
		t.Errorf("Err %v, want ErrSuspended", a.Err())
	}
	for _, call := range []func() error{
		func() error { _, err := c.InvocationID(ctx); return err },
		func() error { _, _, err := c.RunStart(ctx, "after"); return err },
	} {
		if err := call(); !errors.Is(err, stepctx.ErrSuspended) {
			t.Errorf("a later request: %v, want 410 suspended", err)
		}
	}
	if n := len(j.Entries()); n != 1 {
		t.Errorf("journal has %d entries: nothing after the suspension may be journaled", n)
	}
}

func TestAwaitAnyAndPendingFutures(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{HoldCalls: true}
	_, c := open(t, s, addr, j)
	ctx := context.Background()
	h1, _ := c.CallAsync(ctx, stepctx.CallRequest{Service: "S", Handler: "a", Input: []byte(`"one"`)})
	h2, _ := c.CallAsync(ctx, stepctx.CallRequest{Service: "S", Handler: "b", Input: []byte(`"two"`)})
	j.Complete(1)
	i, r, err := c.AwaitAny(ctx, h1, h2)
	if err != nil || i != 1 || string(r.Value) != `"two"` {
		t.Fatalf("AwaitAny: %d %q %v, want the second", i, r.Value, err)
	}
	_, err = c.Await(ctx, h1, h2)
	if !errors.Is(err, stepctx.ErrSuspended) {
		t.Fatalf("Await all with one pending: %v, want suspension", err)
	}
}

func TestCloseCutsTheRequestInFlight(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	started := make(chan struct{})
	j := &stepctxtest.Journal{BeforeRunStart: func(ctx context.Context, _ string) {
		close(started)
		<-ctx.Done()
	}}
	a, c := open(t, s, addr, j)
	errc := make(chan error, 1)
	go func() {
		_, _, err := c.RunStart(context.Background(), "x")
		errc <- err
	}()
	<-started
	a.Close()
	wantStatus(t, <-errc, http.StatusGone, "closed")
}

// "a stale token changes nothing": once Close has returned, no Journal
// call of the attempt may still run, even one that had passed every check
// when Close began (a background process's state/set decoding a large
// body) and ignores its context, as Restate's non-waiting operations do.
func TestCloseReturnsOnlyOnceNoOperationRuns(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	j := &stepctxtest.Journal{BeforeRunStart: func(context.Context, string) {
		close(entered)
		<-release // deaf to ctx
		finished.Store(true)
	}}
	a, c := open(t, s, addr, j)
	first := make(chan error, 1)
	go func() {
		_, _, err := c.RunStart(context.Background(), "x")
		first <- err
	}()
	<-entered
	closed := make(chan bool, 1)
	go func() {
		a.Close()
		closed <- finished.Load()
	}()
	<-a.Done() // Close has ended the attempt and is waiting, or has returned
	close(release)
	if !<-closed {
		t.Fatal("Close returned while a Journal call of the attempt was still running")
	}
	<-first
	_, _, err := c.RunStart(context.Background(), "y")
	wantStatus(t, err, http.StatusForbidden, "ended")
}

func TestJournalErrorEndsTheAttempt(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{}
	a1, c1 := open(t, s, addr, j)
	ctx := context.Background()
	_, h, _ := c1.RunStart(ctx, "a")
	_ = c1.RunComplete(ctx, h, stepctx.RunOutcome{Result: stepctx.Result{Value: []byte("1")}})
	a1.Close()
	j.Restart()
	a2, c2 := open(t, s, addr, j)
	_, _, err := c2.RunStart(ctx, "renamed")
	wantStatus(t, err, http.StatusGone, `journal mismatch at command 0: recorded run "a", got run "renamed"`)
	if a2.Err() == nil || !strings.Contains(a2.Err().Error(), "mismatch") {
		t.Errorf("Err %v", a2.Err())
	}
}

// A Shutdown that comes before Serve started (a bridge closed right after
// it was built) must still stop that Serve.
func TestShutdownBeforeServeStopsServe(t *testing.T) {
	s := stepctx.NewServer(stepctx.Config{})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	select {
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("Serve after Shutdown = %v, want http.ErrServerClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve after Shutdown still running after 10s")
	}
}

// The context socket is the owner's alone from the start, a socket left by
// a process that is gone is replaced, and one another bridge still
// accepts on is never taken over (its functions' steps would fail).
func TestListenOwnsItsSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close() // the file stays, nobody accepts on it
	l, err := stepctx.Listen("unix://" + path)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	defer l.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v: want mode 0600", fi, err)
	}
	if _, err := stepctx.Listen("unix://" + path); err == nil || !strings.Contains(err.Error(), "another server is listening") {
		t.Fatalf("a second listener on a live socket: %v, want it refused", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("the first listener lost its socket: %v", err)
	} else {
		c.Close()
	}
}

// shortOnce is a listener whose first Accept fails as when the process is
// out of descriptors.
type shortOnce struct {
	net.Listener
	failed atomic.Bool
}

func (l *shortOnce) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of descriptors for a moment must not stop the endpoint:
// Serve used to return on the first such error, and every function's
// connection then waited in the backlog for good.
func TestServeOutlivesAShortageOfDescriptors(t *testing.T) {
	s, addr := serveWrapped(t, "unix", stepctx.Config{}, func(l net.Listener) net.Listener { return &shortOnce{Listener: l} })
	a, c := open(t, s, addr, &stepctxtest.Journal{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if id, err := c.InvocationID(ctx); err != nil || id != "inv_fake" {
		t.Fatalf("after a failed accept: %q, %v", id, err)
	}
	a.Close() // serve's cleanup checks that Serve ends with ErrServerClosed
}
