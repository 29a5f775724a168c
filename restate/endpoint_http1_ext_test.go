package restate_test

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/identity"
	"github.com/golang-jwt/jwt/v5"
	"github.com/rs/zerolog"
)

// An answer that leaves an HTTP/1.1 request's body unread (health,
// discovery, every error) comes at once and ends the connection: net/http
// used to read the announced body first, so a client that announced a
// byte it never sent held the connection, and a descriptor, forever.
func TestUnreadBodyDoesNotHoldTheConnection(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{IdentityKeys: []string{identity.EncodeKey(mustKey(t).Public().(ed25519.PublicKey))}})
	srv := httptest.NewUnstartedServer(ep)
	srv.Config = restate.NewHTTPServer("", ep)
	srv.Start()
	t.Cleanup(srv.Close)
	for _, req := range []string{
		"POST /invoke/Greeter/greet HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n", // 401, unsigned
		"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n",
		"GET /discover HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() }) // before srv.Close, which waits for the server's side
		// A bound on a hang, not a timing: the answer needs no more input.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: no answer while the body is missing: %v", req, err)
		}
		if !resp.Close {
			t.Errorf("%q: HTTP %d without Connection: close", req, resp.StatusCode)
		}
	}
}

// restate-server signs the path below the deployment's URL: with a
// PathPrefix (part of that URL) the token's audience is /discover, not
// /prefix/discover, and a signed request is accepted.
func TestIdentityAudienceIsBelowThePathPrefix(t *testing.T) {
	priv := mustKey(t)
	ep := restate.NewEndpoint(restate.Config{PathPrefix: "/pre/fix", IdentityKeys: []string{identity.EncodeKey(priv.Public().(ed25519.PublicKey))}})
	if err := ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(restate.Context, []byte) ([]byte, error) { return nil, nil }}}}); err != nil {
		t.Fatal(err)
	}
	for aud, want := range map[string]int{"/discover": 200, "/pre/fix/discover": 401} {
		now := time.Now()
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"aud": aud, "iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Minute).Unix()})
		tok.Header["kid"] = identity.EncodeKey(priv.Public().(ed25519.PublicKey))
		s, err := tok.SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, "/pre/fix/discover", nil)
		req.Header.Set("Accept", "application/vnd.restate.endpointmanifest.v4+json")
		req.Header.Set("x-restate-signature-scheme", "v1")
		req.Header.Set("x-restate-jwt-v1", s)
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("token for %s: HTTP %d (%s), want %d", aud, rec.Code, strings.TrimSpace(rec.Body.String()), want)
		}
	}
}

// RFC 9110 §15.5.6: "The origin server MUST generate an Allow header field
// in a 405 response".
func TestMethodNotAllowedSaysWhatIsAllowed(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{})
	if err := ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(restate.Context, []byte) ([]byte, error) { return nil, nil }}}}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/discover": "GET, HEAD", "/invoke/S/h": "POST"} {
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, path, nil))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != want {
			t.Errorf("PUT %s: HTTP %d, Allow %q, want 405 and %q", path, rec.Code, rec.Header().Get("Allow"), want)
		}
	}
}

func mustKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

// The HTTP server's own errors (a peer's HTTP/2 protocol error, accept
// failures) are the endpoint's log lines, in its format, not plain text
// on stderr beside a JSON log.
func TestServerErrorsGoToTheEndpointLog(t *testing.T) {
	var buf bytes.Buffer
	ep := restate.NewEndpoint(restate.Config{Logger: zerolog.New(&buf)})
	srv := httptest.NewUnstartedServer(ep)
	srv.Config = restate.NewHTTPServer("", ep)
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The preface, SETTINGS, then a WINDOW_UPDATE of 0 on the connection:
	// a connection error the server logs (RFC 9113 §6.9).
	frames := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
		"\x00\x00\x00\x04\x00\x00\x00\x00\x00" +
		"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	if _, err := c.Write([]byte(frames)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.Copy(io.Discard, c) // until the server closes the connection
	srv.Close()                   // its goroutines are done: the line is written
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil || line["level"] != "warn" || !strings.Contains(fmt.Sprint(line["message"]), "PROTOCOL_ERROR") {
		t.Fatalf("endpoint log %q (%v): want one JSON warning naming the protocol error", buf.String(), err)
	}
}
