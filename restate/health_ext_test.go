package restate_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

func getHealth(t *testing.T, ep *restate.Endpoint, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	ep.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// Probes carry no request identity: /health, /health/live and
// /health/ready answer without a signature even when identity keys are
// configured; everything else still needs one.
func TestHealthPathsNeedNoIdentity(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{IdentityKeys: []string{"publickeyv1_ChjENKeMvCtRnqG2mrBK1HmPKufgFUc98K8JoMU2fmqA"}, PathPrefix: "/restate"})
	for path, want := range map[string]int{
		"/restate/health": 200, "/restate/health/live": 200, "/restate/health/ready": 200,
		"/restate/health/other": 401, "/restate/discover": 401,
	} {
		if code, body := getHealth(t, ep, path); code != want {
			t.Errorf("%s unsigned: HTTP %d %q, want %d", path, code, body, want)
		}
	}
}

// The readiness check decides /health/ready (its error is the body);
// liveness does not depend on it.
func TestReadinessCheck(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{})
	var failing error
	ep.SetReadiness(func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("the check got no deadline")
		}
		return failing
	})
	if code, body := getHealth(t, ep, "/health/ready"); code != 200 || body != "ready" {
		t.Fatalf("ready: HTTP %d %q", code, body)
	}
	failing = errors.New("runtimes.python (unix:///run/py.sock): not serving")
	if code, body := getHealth(t, ep, "/health/ready"); code != 503 || body != "not ready: "+failing.Error() {
		t.Fatalf("failing check: HTTP %d %q, want 503 naming the cause", code, body)
	}
	if code, _ := getHealth(t, ep, "/health/live"); code != 200 {
		t.Fatalf("live with a failing readiness check: HTTP %d, want 200", code)
	}
}

// holdEndpoint serves an endpoint whose handler Svc/hold signals started
// and returns its input once release is closed; url is its invoke URL.
func holdEndpoint(t *testing.T) (ep *restate.Endpoint, url string, started, release chan struct{}) {
	t.Helper()
	started, release = make(chan struct{}, 1), make(chan struct{})
	ep = restate.NewEndpoint(restate.Config{})
	err := ep.Bind(restate.Service{Name: "Svc", Handlers: []restate.Handler{{Name: "hold", Fn: func(_ restate.Context, in []byte) ([]byte, error) {
		started <- struct{}{}
		<-release
		return in, nil
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(ep)
	srv.Config = restate.NewHTTPServer("", ep)
	srv.Start()
	t.Cleanup(srv.Close)
	return ep, restatetest.InvokeURL(srv.URL, "Svc", "hold"), started, release
}

// Drain: readiness answers 503 at once while liveness stays 200, a new
// invocation stream is refused with 503, Retry-After and Connection: close
// (over HTTP/2 and HTTP/1.1), the stream in flight runs to its Output, and
// Drain returns only once it has ended.
func TestDrainFinishesInFlightAndRefusesNew(t *testing.T) {
	ep, url, started, release := holdEndpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := restatetest.NewH2CClient()

	s := restatetest.Open(ctx, client, url, 6)
	defer s.Close()
	if err := s.Send(restatetest.Start("inv_drain", 1), restatetest.Input([]byte(`"in flight"`))); err != nil {
		t.Fatal(err)
	}
	<-started
	drained := make(chan error, 1)
	go func() { drained <- ep.Drain(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); !ep.Draining(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Drain did not start draining")
		}
	}
	if code, body := getHealth(t, ep, "/health/ready"); code != 503 || body != "draining" {
		t.Errorf("ready while draining: HTTP %d %q, want 503 draining", code, body)
	}
	if code, _ := getHealth(t, ep, "/health/live"); code != 200 {
		t.Errorf("live while draining: HTTP %d, want 200", code)
	}
	if n := ep.InFlight(); n != 1 {
		t.Errorf("InFlight = %d while one stream runs", n)
	}

	refused := restatetest.Open(ctx, client, url, 6)
	defer refused.Close()
	resp, err := refused.Response()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "draining") {
		t.Errorf("new h2c stream while draining: HTTP %d, Retry-After %q, %q; want 503, 1, draining", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(""))
	req.Header.Set("Content-Type", restatetest.ContentType(6))
	h1, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	h1.Body.Close()
	if h1.StatusCode != 503 || !h1.Close {
		t.Errorf("new HTTP/1.1 stream while draining: HTTP %d, connection close %v; want 503 and close", h1.StatusCode, h1.Close)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with a stream in flight", err)
	default:
	}

	close(release)
	var out *servicev1.OutputCommandMessage
	for {
		f, err := s.Next()
		if err != nil {
			t.Fatalf("the in-flight stream did not run to its end: %v", err)
		}
		if m, ok := restatetest.Message[*servicev1.OutputCommandMessage](f); ok {
			out = m
		}
		if f.Type() == wire.EndMessageType {
			break
		}
	}
	if got := string(out.GetValue().GetContent()); got != `"in flight"` {
		t.Errorf("in-flight output %q", got)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("Drain: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return after the last stream ended")
	}
}

// Drain with nothing in flight returns at once; bounded by its context
// while a stream runs, it returns the context's error.
func TestDrainBoundedByContext(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{})
	if err := ep.Drain(context.Background()); err != nil {
		t.Fatalf("idle Drain: %v", err)
	}
	ep2, url, started, release := holdEndpoint(t)
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := restatetest.Open(ctx, restatetest.NewH2CClient(), url, 6)
	defer s.Close()
	if err := s.Send(restatetest.Start("inv_bound", 1), restatetest.Input([]byte(`1`))); err != nil {
		t.Fatal(err)
	}
	<-started
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	if err := ep2.Drain(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with a stream in flight past its deadline: %v, want DeadlineExceeded", err)
	}
}
