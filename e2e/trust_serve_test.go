package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// keygen runs `bridge keygen --out dir/name` and returns the private key's
// path and the printed publickeyv1_ key.
func keygen(t *testing.T, dir, name string) (pemPath, key string) {
	t.Helper()
	pemPath = filepath.Join(dir, name)
	stdout, stderr, code := runBridge(t, 30*time.Second, "keygen", "--out", pemPath)
	if code != 0 {
		t.Fatalf("bridge keygen: exit %d\n%s", code, stderr)
	}
	key = strings.TrimSpace(stdout)
	if !strings.HasPrefix(key, "publickeyv1_") || strings.Contains(key, "\n") {
		t.Fatalf("bridge keygen printed %q, want one publickeyv1_ key", stdout)
	}
	return pemPath, key
}

// echoConfig writes a workspace whose bridge.yaml starts with head and
// serves service/echo, and returns the config's path.
func echoConfig(t *testing.T, service, head string) string {
	t.Helper()
	ws := newWorkspace(t, "trust_serve_echo.py")
	return ws.config(t, fmt.Sprintf(`%s
services:
  - name: %s
    handlers:
      - {name: echo, runtime: python, dir: fn, handler: trust_serve_echo.echo}
`, head, service))
}

// A key pair from `bridge keygen`: restate-server signs with the private
// key, a bridge with the printed public key registers and serves, and a
// bridge with another key refuses the same server's requests.
func TestTrustServeKeygenSignsEndToEnd(t *testing.T) {
	requireInterpreters(t)
	keys := t.TempDir()
	pemPath, key := keygen(t, keys, "restate-identity.pem")
	_, otherKey := keygen(t, keys, "other.pem")
	srv := restateserver.Start(t, restateserver.Options{IdentityPrivateKeyPEM: pemPath})

	b := startBridge(t, echoConfig(t, "TrustSigned", "identity_keys: ["+key+"]"), testtool.FreeAddr(t))
	srv.Register(t, b.URI(), false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := callOK(ctx, t, srv, "TrustSigned", "echo", `{"n":1}`, nil)
	assertJSON(t, "output", out, `{"echo":{"n":1}}`)

	other := startBridge(t, echoConfig(t, "TrustOther", "identity_keys: ["+otherKey+"]"), testtool.FreeAddr(t))
	body, err := srv.TryRegister(ctx, other.URI(), false)
	var he *restateserver.HTTPError
	if !errors.As(err, &he) {
		t.Fatalf("registration with a bridge holding another key: %s, %v; want it refused", body, err)
	}
	if !strings.Contains(he.Body, "401") {
		t.Errorf("registration error does not carry the bridge's 401: %s", he.Body)
	}
}

// serve on an address other machines can reach, without identity keys,
// exits non-zero before listening and says how to get keys; with
// allow_unauthenticated it serves and warns.
func TestTrustServeRefusesUnsignedPublicListen(t *testing.T) {
	requireInterpreters(t)
	cfg := echoConfig(t, "TrustOpen", "")
	_, port, _ := net.SplitHostPort(testtool.FreeAddr(t))
	public := "0.0.0.0:" + port
	_, stderr, code := runBridge(t, 30*time.Second, serveArgs(cfg, public, "info")...)
	if code == 0 {
		t.Fatal("bridge serve on 0.0.0.0 without identity keys exited 0")
	}
	for _, w := range []string{"--listen " + public, "identity_keys", "bridge keygen", "RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE", "allow_unauthenticated: true"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("serve's error does not mention %q:\n%s", w, stderr)
		}
	}

	b := startBridge(t, echoConfig(t, "TrustOpen", "allow_unauthenticated: true"), public)
	if !strings.Contains(b.logs(), "allow_unauthenticated") {
		t.Errorf("no warning about serving unsigned requests:\n%s", b.logs())
	}
}

// A function that runs longer than restate-server's inactivity timeout
// completes once: the bridge advertises per-handler inactivity and abort
// timeouts derived from the handler's timeout, so Restate does not end the
// attempt mid-run and execute the function again. The server's defaults
// are lowered to 5s + 2s so that a 12 s function outlives them, as a 12 min
// one outlives restate-server's 1m + 10m.
func TestTrustServeLongFunctionCompletesOnce(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{ExtraEnv: []string{
		"RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT=5s",
		"RESTATE_WORKER__INVOKER__ABORT_TIMEOUT=2s",
	}})
	ws := newWorkspace(t, "trust_serve_long.py")
	cfg := ws.config(t, `services:
  - name: TrustLong
    handlers:
      - {name: work, runtime: python, dir: fn, handler: trust_serve_long.work, timeout: 30s}
`)
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	srv.Register(t, b.URI(), false)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id, err := srv.Send(ctx, "TrustLong", "work", []byte(`{"seconds": 12}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	status, out := invocationOutput(t, srv, id, 80*time.Second)
	if status != 200 {
		t.Fatalf("output of %s: status %d: %s (executions: %v)", id, status, out, ws.lines(t, "calls.log"))
	}
	assertJSON(t, "output", out, `{"slept": 12}`)
	if got := ws.lines(t, "calls.log"); len(got) != 1 {
		t.Fatalf("the function executed %d times, want once: %v", len(got), got)
	}
}
