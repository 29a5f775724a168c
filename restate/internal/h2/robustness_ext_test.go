package h2_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/fnbridge/fnbridge/restate/internal/h2"
)

// A malformed request is a stream error (RFC 9113 §8.1.1): it resets its
// own stream with PROTOCOL_ERROR, and every other stream of the
// connection goes on to its response.
func TestMalformedRequestResetsOnlyItsStream(t *testing.T) {
	cases := []struct {
		name string
		send func(rc *rawConn) // makes stream 3 malformed
	}{
		{"trailers without END_STREAM", func(rc *rawConn) {
			rc.headers(3, false, "POST", "/x")
			rc.trailers(3, false, "x-trailer", "v")
		}},
		{"pseudo-header in the trailers", func(rc *rawConn) {
			rc.headers(3, false, "POST", "/x")
			rc.trailers(3, true, ":path", "/y")
		}},
		{"body longer than its content-length", func(rc *rawConn) {
			rc.headers(3, false, "POST", "/x", "content-length", "2")
			if err := rc.fr.WriteData(3, true, []byte("abc")); err != nil {
				rc.t.Fatal(err)
			}
		}},
		{"content-length without a body", func(rc *rawConn) {
			rc.headers(3, true, "POST", "/x", "content-length", "2")
		}},
		{"upper-case header name", func(rc *rawConn) {
			rc.headers(3, true, "GET", "/x", "X-Upper", "v")
		}},
		{"connection-specific header", func(rc *rawConn) {
			rc.headers(3, true, "GET", "/x", "connection", "keep-alive")
		}},
		{"empty :path", func(rc *rawConn) {
			rc.headers(3, true, "GET", "")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					<-release
					_, _ = io.WriteString(w, "held")
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
			}))
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock) // before serve's: a failed test leaves no handler blocked
			rc := dialRaw(t, addr)
			rc.headers(1, false, "POST", "/hold")
			tc.send(rc)
			f := rc.next()
			if g, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("want stream 3 reset, got GOAWAY %v last=%d %q", g.ErrCode, g.LastStreamID, g.DebugData())
			}
			if r, ok := f.(*http2.RSTStreamFrame); !ok || r.StreamID != 3 || r.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("want stream 3 reset (PROTOCOL_ERROR), got %v", f)
			}
			unblock()
			if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.StreamID != 1 || f.PseudoValue("status") != "200" {
				t.Fatalf("want stream 1's response HEADERS, got %v", f)
			}
			if f, ok := rc.next().(*http2.DataFrame); !ok || f.StreamID != 1 || string(f.Data()) != "held" || !f.StreamEnded() {
				t.Fatalf("want stream 1's body, got %v", f)
			}
		})
	}
}

// trailers sends a header block on a stream already open.
func (rc *rawConn) trailers(id uint32, end bool, kv ...string) {
	rc.t.Helper()
	rc.hb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = rc.he.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hb.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

// IdleTimeout counts from the moment the connection last had a stream: a
// connection busy with streams shorter than the health check's period is
// not idle, and it goes away once its streams stop.
func TestIdleTimeoutSparesABusyConnection(t *testing.T) {
	const idle = 2 * time.Second
	addr := serve(t, &h2.Server{IdleTimeout: idle}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	rc := dialRaw(t, addr)
	// One short GET every 100 ms for twice the idle timeout: the
	// connection always had a stream far less than IdleTimeout ago.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	id := uint32(1)
	for end := time.Now().Add(2 * idle); time.Now().Before(end); id += 2 {
		rc.headers(id, true, "GET", "/health")
		for done := false; !done; {
			switch f := rc.next().(type) {
			case *http2.GoAwayFrame:
				t.Fatalf("GOAWAY %v on a connection with a stream every 100 ms (stream %d)", f.ErrCode, id)
			case *http2.DataFrame:
				done = f.StreamID == id && f.StreamEnded()
			case *http2.MetaHeadersFrame:
				done = f.StreamID == id && f.StreamEnded()
			}
		}
		<-tick.C
	}
	// Then idle: GOAWAY NO_ERROR naming the last stream.
	last := id - 2
	if f, ok := rc.next().(*http2.GoAwayFrame); !ok || f.ErrCode != http2.ErrCodeNo || f.LastStreamID != last {
		t.Fatalf("want GOAWAY NO_ERROR last=%d once idle, got %v", last, f)
	}
}

// Only DATA is flow controlled (RFC 9113 §5.2): with the client's stream
// window at 0, the response HEADERS go out at once, the body when the
// window opens.
func TestResponseHeadersNeedNoWindow(t *testing.T) {
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/flush" {
			w.WriteHeader(http.StatusAccepted)
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "hello")
	}))
	for _, path := range []string{"/health", "/flush"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			rc.headers(1, true, "GET", path)
			f, ok := rc.next().(*http2.MetaHeadersFrame)
			if !ok || f.StreamID != 1 || f.StreamEnded() {
				t.Fatalf("want response HEADERS without END_STREAM while the window is 0, got %v", f)
			}
			if path == "/health" {
				var length string
				for _, hf := range f.RegularFields() {
					if hf.Name == "content-length" {
						length = hf.Value
					}
				}
				if f.PseudoValue("status") != "200" || length != "5" {
					t.Fatalf("want 200 with content-length 5, got %v", f.Fields)
				}
			} else if f.PseudoValue("status") != "202" {
				t.Fatalf("want 202, got %v", f.Fields)
			}
			if err := rc.fr.WriteWindowUpdate(1, 5); err != nil {
				t.Fatal(err)
			}
			if f, ok := rc.next().(*http2.DataFrame); !ok || string(f.Data()) != "hello" || !f.StreamEnded() {
				t.Fatalf("want DATA hello with END_STREAM once the window opened, got %v", f)
			}
		})
	}
}
