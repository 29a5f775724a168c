package e2e

// The restate package's endpoint, served in process, behind a real
// restate-server: every transport, protocol version and identity setting.

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/identity"
)

// transport is one way restate-server reaches the endpoint.
type transport struct {
	name      string
	mode      restate.ProtocolMode
	useHTTP11 bool
}

// "Bidirectional (HTTP/2 only)" plus full-duplex HTTP/1.1 (restate-server
// 1.7.12 "with use_http_11 … if the manifest says BIDI_STREAM, still streams
// full duplex over HTTP/1.1"), and "Request/Response"
// (docs/spec/restate-service-invocation-protocol.md).
var transports = []transport{
	{"bidi_h2c", restate.BidiStream, false},
	{"bidi_http11", restate.BidiStream, true},
	{"request_response", restate.RequestResponse, false},
}

const callsPerTransport = 3

// runCounter is a handler that does its work inside ctx.Run and counts how
// often the run closure executes, per input (each call sends a unique one).
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
	ids  map[string]string // input -> invocation id
}

func newRunCounter() *runCounter {
	return &runCounter{runs: map[string]int{}, ids: map[string]string{}}
}

func (c *runCounter) handler(ctx restate.Context, input []byte) ([]byte, error) {
	out, err := ctx.Run("work", func(context.Context) ([]byte, error) {
		c.mu.Lock()
		c.runs[string(input)]++
		c.ids[string(input)] = ctx.InvocationID()
		c.mu.Unlock()
		return []byte(`{"got":` + string(input) + `}`), nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *runCounter) count(input string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[input]
}

// serve binds one service to a new endpoint and serves it with serveHTTP.
func serve(t *testing.T, cfg restate.Config, svc restate.Service) string {
	t.Helper()
	ep := restate.NewEndpoint(cfg)
	if err := ep.Err(); err != nil {
		t.Fatalf("NewEndpoint: %v", err)
	}
	if err := ep.Bind(svc); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	return serveHTTP(t, ep)
}

// writeIdentityKey generates an ed25519 key, writes its private half as a
// PKCS#8 PEM file for restate-server and returns the file and the
// publickeyv1_ form for the endpoint.
func writeIdentityKey(t *testing.T) (pemPath, publicKey string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pemPath = filepath.Join(t.TempDir(), "request-identity.pem")
	if err := os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pemPath, identity.EncodeKey(pub)
}

// TestEndpointMatrix invokes a Run-using handler through a real
// restate-server for every transport × service protocol (v6 default, v7
// enabled) × request identity (off, signed), and checks the results, that
// each run closure executed exactly once per invocation, and that the
// server pinned the protocol version it was meant to choose.
func TestEndpointMatrix(t *testing.T) {
	restateserver.Binary(t)
	for _, proto := range []struct {
		name    string
		v7      bool
		version float64
	}{{"v6", false, 6}, {"v7", true, 7}} {
		for _, signed := range []bool{false, true} {
			name := proto.name + "/unsigned"
			if signed {
				name = proto.name + "/identity"
			}
			t.Run(name, func(t *testing.T) {
				opts := restateserver.Options{EnableProtocolV7: proto.v7}
				var keys []string
				if signed {
					pemPath, pub := writeIdentityKey(t)
					opts.IdentityPrivateKeyPEM = pemPath
					keys = []string{pub}
				}
				srv := restateserver.Start(t, opts)
				for _, tr := range transports {
					t.Run(tr.name, func(t *testing.T) {
						runMatrixCell(t, srv, tr, keys, proto.version)
					})
				}
			})
		}
	}
}

func runMatrixCell(t *testing.T, srv *restateserver.Server, tr transport, keys []string, wantVersion float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	counter := newRunCounter()
	service := "E2E_" + tr.name
	logs := &lockedBuffer{}
	uri := serve(t, restate.Config{
		ProtocolMode: tr.mode,
		IdentityKeys: keys,
		Logger:       zerolog.New(logs),
	}, restate.Service{Name: service, Handlers: []restate.Handler{{Name: "work", Fn: counter.handler}}})
	srv.Register(t, uri, tr.useHTTP11)

	inputs := make([]string, callsPerTransport)
	for i := range inputs {
		inputs[i] = fmt.Sprintf(`"%s-%d-%d"`, tr.name, i, time.Now().UnixNano())
		status, body, err := srv.Call(ctx, service, "work", []byte(inputs[i]), nil)
		if err != nil {
			t.Fatalf("call %d: %v (endpoint log: %s)", i, err, logs)
		}
		if status != http.StatusOK {
			t.Fatalf("call %d: status %d: %s (endpoint log: %s)", i, status, body, logs)
		}
		if want := `{"got":` + inputs[i] + `}`; string(body) != want {
			t.Fatalf("call %d returned %s, want %s", i, body, want)
		}
	}
	// Replay rule: "Only a run that was never completed durably may execute
	// again" — here nothing fails, so every run executes exactly once, also
	// in REQUEST_RESPONSE mode where the invocation suspends and is replayed.
	for _, in := range inputs {
		if n := counter.count(in); n != 1 {
			t.Errorf("run closure for input %s executed %d times, want exactly 1", in, n)
		}
	}

	rows, err := srv.Query(ctx, fmt.Sprintf(
		"SELECT id, status, pinned_service_protocol_version FROM sys_invocation WHERE target_service_name = '%s'", service))
	if err != nil {
		t.Fatalf("query invocations: %v", err)
	}
	if len(rows) != callsPerTransport {
		t.Fatalf("sys_invocation has %d rows for %s, want %d: %v", len(rows), service, callsPerTransport, rows)
	}
	for _, r := range rows {
		if r["status"] != "completed" {
			t.Errorf("invocation %v status %v, want completed", r["id"], r["status"])
		}
		if r["pinned_service_protocol_version"] != wantVersion {
			t.Errorf("invocation %v ran with service protocol v%v, want v%v", r["id"], r["pinned_service_protocol_version"], wantVersion)
		}
	}
	if signed := len(keys) > 0; signed && strings.Contains(logs.String(), "request identity") {
		t.Errorf("the endpoint rejected a signed request: %s", logs)
	}
}

// An endpoint configured with identity keys must refuse what it cannot
// verify: discovery is signed like invocations, so registration through a
// server that does not sign (or signs with another key) fails with the
// endpoint's 401, and the endpoint logs why.
func TestEndpointRejectsUnverifiedServer(t *testing.T) {
	restateserver.Binary(t)
	_, endpointKey := writeIdentityKey(t)
	otherPEM, _ := writeIdentityKey(t)

	for _, tc := range []struct {
		name    string
		opts    restateserver.Options
		mention string
	}{
		{"server does not sign", restateserver.Options{}, "request is unsigned"},
		{"server signs with another key", restateserver.Options{IdentityPrivateKeyPEM: otherPEM}, "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := restateserver.Start(t, tc.opts)
			logs := &lockedBuffer{}
			counter := newRunCounter()
			uri := serve(t, restate.Config{IdentityKeys: []string{endpointKey}, Logger: zerolog.New(logs)},
				restate.Service{Name: "E2E_guarded", Handlers: []restate.Handler{{Name: "work", Fn: counter.handler}}})

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			body, err := srv.TryRegister(ctx, uri, false)
			var he *restateserver.HTTPError
			if !errors.As(err, &he) {
				t.Fatalf("registration succeeded (%s) or failed without an HTTP answer (%v); want it refused", body, err)
			}
			if !strings.Contains(he.Body, "401") {
				t.Errorf("registration error does not carry the endpoint's 401: %s", he.Body)
			}
			if !strings.Contains(logs.String(), tc.mention) {
				t.Errorf("endpoint log does not mention %q: %s", tc.mention, logs)
			}
			if n := len(counter.runs); n != 0 {
				t.Errorf("handler ran %d times without a verified request", n)
			}
		})
	}
}

// The server's answer to a registered deployment lists the service; a
// sanity check that discovery (manifest negotiation) works on its own.
func TestEndpointDiscoveryRegistersService(t *testing.T) {
	restateserver.Binary(t)
	srv := restateserver.Start(t, restateserver.Options{})
	counter := newRunCounter()
	uri := serve(t, restate.Config{}, restate.Service{Name: "E2E_discovery", Handlers: []restate.Handler{{Name: "work", Fn: counter.handler}}})
	body := srv.Register(t, uri, false)
	var resp struct {
		Services []struct {
			Name     string `json:"name"`
			Handlers []struct {
				Name string `json:"name"`
			} `json:"handlers"`
		} `json:"services"`
		MinProtocolVersion int `json:"min_protocol_version"`
		MaxProtocolVersion int `json:"max_protocol_version"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("register answer: %v: %s", err, body)
	}
	if len(resp.Services) != 1 || resp.Services[0].Name != "E2E_discovery" ||
		len(resp.Services[0].Handlers) != 1 || resp.Services[0].Handlers[0].Name != "work" {
		t.Fatalf("registered services = %s", body)
	}
	if resp.MaxProtocolVersion < 7 || resp.MinProtocolVersion > 6 {
		t.Errorf("deployment announces protocol versions [%d, %d], want a range covering v6 and v7", resp.MinProtocolVersion, resp.MaxProtocolVersion)
	}
}

// waitStatus polls the admin API until the invocation has status want.
func waitStatus(ctx context.Context, t *testing.T, srv *restateserver.Server, id, want string) {
	t.Helper()
	last := ""
	for {
		status, err := srv.InvocationStatus(ctx, id)
		if err == nil && status == want {
			return
		}
		if err == nil {
			last = status
		} else if !errors.Is(err, restateserver.ErrNoInvocation) {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("invocation %s did not reach status %q (last: %q)", id, want, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Send, InvocationStatus and CancelInvocation against a live endpoint: a
// sent invocation completes without a caller waiting, and a handler blocked
// inside a run sees the runtime's CANCEL ("in-flight invoke cancelled …
// invocation ends with a terminal failure", docs/ARCHITECTURE.md) and the invocation
// completes instead of being retried.
func TestSendStatusAndCancel(t *testing.T) {
	restateserver.Binary(t)
	srv := restateserver.Start(t, restateserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	counter := newRunCounter()
	blocked := make(chan string, 1)
	block := func(c restate.Context, input []byte) ([]byte, error) {
		return c.Run("block", func(rc context.Context) ([]byte, error) {
			blocked <- c.InvocationID()
			<-rc.Done()
			return nil, context.Cause(rc)
		})
	}
	uri := serve(t, restate.Config{}, restate.Service{Name: "E2E_async", Handlers: []restate.Handler{
		{Name: "work", Fn: counter.handler},
		{Name: "block", Fn: block},
	}})
	srv.Register(t, uri, false)

	id, err := srv.Send(ctx, "E2E_async", "work", []byte(`"sent"`), nil)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if !strings.HasPrefix(id, "inv_") {
		t.Fatalf("send returned invocation id %q", id)
	}
	waitStatus(ctx, t, srv, id, "completed")
	if n := counter.count(`"sent"`); n != 1 {
		t.Errorf("run executed %d times for the sent invocation, want 1", n)
	}

	id, err = srv.Send(ctx, "E2E_async", "block", []byte(`"x"`), nil)
	if err != nil {
		t.Fatalf("send block: %v", err)
	}
	select {
	case got := <-blocked:
		if got != id {
			t.Fatalf("blocked invocation %s, sent %s", got, id)
		}
	case <-ctx.Done():
		t.Fatal("the blocking handler never started")
	}
	if err := srv.CancelInvocation(ctx, id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	waitStatus(ctx, t, srv, id, "completed")
	rows, err := srv.Query(ctx, "SELECT completion_result, completion_failure FROM sys_invocation WHERE id = '"+id+"'")
	if err != nil || len(rows) != 1 {
		t.Fatalf("query cancelled invocation: %v %v", rows, err)
	}
	if rows[0]["completion_result"] != "failure" {
		t.Errorf("cancelled invocation completed with %v (%v), want a failure", rows[0]["completion_result"], rows[0]["completion_failure"])
	}
	t.Logf("cancelled invocation failure: %v", rows[0]["completion_failure"])
}
