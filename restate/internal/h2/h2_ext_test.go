package h2_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/fnbridge/fnbridge/restate/internal/h2"
)

// serve runs s on a loopback listener: each accepted connection reads the
// preface and is served, as net/http hands it over. It returns the
// address; cleanup closes the listener and waits for the connections.
func serve(t *testing.T, s *h2.Server, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.ServeConnPreface(c, h, 10*time.Second)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// client is net/http's HTTP/2 client over cleartext TCP, as
// restate-server's is: prior knowledge, no upgrade.
func client(t *testing.T) *http.Client {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// echo answers with the request body, flushing after every read, so the
// response streams while the request is still arriving (full duplex).
func echo(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		if err != nil {
			return
		}
	}
}

func TestRequestAndResponse(t *testing.T) {
	var host string
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.Method != http.MethodGet || r.URL.Path != "/discover" || r.Host != host || r.RemoteAddr == "" {
			t.Errorf("request %s %s %s host %q", r.Proto, r.Method, r.URL, r.Host)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Custom", r.Header.Get("X-Custom"))
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	host = addr
	resp, err := client(t).Do(mustRequest(t, http.MethodGet, "http://"+addr+"/discover", nil, "X-Custom", "abc"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != `{"ok":true}` || resp.Header.Get("Content-Type") != "application/json" ||
		resp.Header.Get("X-Custom") != "abc" || resp.ContentLength != int64(len(body)) {
		t.Errorf("got %d %v %q (length %d)", resp.StatusCode, resp.Header, body, resp.ContentLength)
	}
}

func mustRequest(t *testing.T, method, url string, body io.Reader, kv ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	return req
}

// A body far beyond every window (the server's 64 KiB stream window here,
// the client's defaults) streams through in both directions at once.
func TestFullDuplexBeyondTheWindows(t *testing.T) {
	addr := serve(t, &h2.Server{StreamWindow: 64 << 10, ConnWindow: 128 << 10}, http.HandlerFunc(echo))
	c := client(t)
	const size = 8 << 20
	in := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, pw := io.Pipe()
			go func() {
				for off := 0; off < len(in); off += 100 << 10 {
					if _, err := pw.Write(in[off:min(off+100<<10, len(in))]); err != nil {
						return
					}
				}
				pw.Close()
			}()
			resp, err := c.Do(mustRequest(t, http.MethodPost, "http://"+addr+"/echo", pr))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			out, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(out, in) {
				t.Errorf("echoed %d bytes (want %d), %v", len(out), len(in), err)
			}
		}()
	}
	wg.Wait()
}

// rawConn speaks HTTP/2 frame by frame, to check what the server writes.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	fr *http2.Framer
	hb bytes.Buffer
	he *hpack.Encoder
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawConn{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.he = hpack.NewEncoder(&rc.hb)
	if _, err := io.WriteString(c, h2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return rc
}

// next reads frames until one that is not SETTINGS or a connection-level
// WINDOW_UPDATE (which the server sends at the start).
func (rc *rawConn) next() http2.Frame {
	rc.t.Helper()
	for {
		_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := rc.fr.ReadFrame()
		if err != nil {
			rc.t.Fatalf("reading a frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			continue
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				continue
			}
		}
		return f
	}
}

func (rc *rawConn) headers(id uint32, end bool, method, path string, kv ...string) {
	rc.t.Helper()
	rc.hb.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path}, {Name: ":authority", Value: "x"}} {
		_ = rc.he.WriteField(f)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		_ = rc.he.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hb.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

// The invocation endpoint's pattern: a flush writes the response HEADERS
// and the first data in one go; EndStream ends the response with its
// last data in one DATA frame while the handler still reads the request,
// which the client ends afterwards.
func TestEndStreamWhileReading(t *testing.T) {
	gotEOF := make(chan error, 1)
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "last")
		if err := w.(interface{ EndStream() error }).EndStream(); err != nil {
			t.Errorf("EndStream: %v", err)
		}
		if _, err := w.Write([]byte("more")); err == nil {
			t.Error("a write after EndStream succeeded")
		}
		_, err := io.ReadAll(r.Body)
		gotEOF <- err
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, false, "POST", "/invoke/S/h")
	if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.PseudoValue("status") != "200" || f.StreamEnded() {
		t.Fatalf("want response HEADERS 200 without END_STREAM, got %v", f)
	}
	if f, ok := rc.next().(*http2.DataFrame); !ok || string(f.Data()) != "first" || f.StreamEnded() {
		t.Fatalf("want DATA first, got %v", f)
	}
	if f, ok := rc.next().(*http2.DataFrame); !ok || string(f.Data()) != "last" || !f.StreamEnded() {
		t.Fatalf("want DATA last with END_STREAM, got %v", f)
	}
	if err := rc.fr.WriteData(1, true, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-gotEOF:
		if err != nil {
			t.Errorf("reading the request after EndStream: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never saw the request's end")
	}
	// The stream is closed on both sides: nothing more for it, and the
	// connection still answers a PING.
	if err := rc.fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	if f, ok := rc.next().(*http2.PingFrame); !ok || !f.IsAck() || f.Data != [8]byte{1} {
		t.Fatalf("want PING ack, got %v", f)
	}
}

// A handler that returns before the client ends its request body resets
// the request with NO_ERROR after the complete response (RFC 9113 §8.1).
func TestHandlerReturnsBeforeTheRequestEnds(t *testing.T) {
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "done")
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, false, "POST", "/x")
	if _, ok := rc.next().(*http2.MetaHeadersFrame); !ok {
		t.Fatal("want HEADERS")
	}
	if f, ok := rc.next().(*http2.DataFrame); !ok || string(f.Data()) != "done" || !f.StreamEnded() {
		t.Fatalf("want DATA done with END_STREAM, got %v", f)
	}
	if f, ok := rc.next().(*http2.RSTStreamFrame); !ok || f.ErrCode != http2.ErrCodeNo {
		t.Fatalf("want RST_STREAM NO_ERROR, got %v", f)
	}
	// Data the client had in flight is dropped without a connection error.
	if err := rc.fr.WriteData(1, true, []byte("late")); err != nil {
		t.Fatal(err)
	}
	rc.headers(3, true, "GET", "/y")
	if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.StreamID != 3 {
		t.Fatalf("want the next stream's HEADERS, got %v", f)
	}
}

// The client's RST_STREAM cancels the request's context and fails its
// body read.
func TestClientResetCancelsTheRequest(t *testing.T) {
	ended := make(chan error, 1)
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		_, err := io.ReadAll(r.Body)
		<-r.Context().Done()
		ended <- err
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, false, "POST", "/x")
	if _, ok := rc.next().(*http2.MetaHeadersFrame); !ok {
		t.Fatal("want HEADERS")
	}
	if err := rc.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Error("the body read ended without an error after a reset")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reset did not reach the handler")
	}
}

// More streams than MAX_CONCURRENT_STREAMS are refused (REFUSED_STREAM,
// which a client retries); the others are served.
func TestConcurrentStreamsBound(t *testing.T) {
	release := make(chan struct{})
	addr := serve(t, &h2.Server{MaxConcurrentStreams: 2}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	rc := dialRaw(t, addr)
	for _, id := range []uint32{1, 3, 5} {
		rc.headers(id, true, "GET", "/x")
	}
	if f, ok := rc.next().(*http2.RSTStreamFrame); !ok || f.StreamID != 5 || f.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("want stream 5 refused, got %v", f)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || !f.StreamEnded() {
			t.Fatalf("want a complete response, got %v", f)
		}
	}
}

// DATA beyond the stream's window resets that stream
// (FLOW_CONTROL_ERROR); the connection goes on.
func TestStreamWindowEnforced(t *testing.T) {
	addr := serve(t, &h2.Server{StreamWindow: 1000}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/x" {
			<-r.Context().Done()
		}
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, false, "POST", "/x")
	if err := rc.fr.WriteData(1, false, make([]byte, 1001)); err != nil {
		t.Fatal(err)
	}
	if f, ok := rc.next().(*http2.RSTStreamFrame); !ok || f.StreamID != 1 || f.ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("want stream 1 reset for flow control, got %v", f)
	}
	rc.headers(3, true, "GET", "/y")
	if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.StreamID != 3 {
		t.Fatalf("want the next stream served, got %v", f)
	}
}

// The server honours the client's windows: a response larger than the
// client's 100-byte stream window waits for WINDOW_UPDATE.
func TestSendWindowHonoured(t *testing.T) {
	body := strings.Repeat("x", 250)
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
	rc.headers(1, true, "GET", "/x")
	if _, ok := rc.next().(*http2.MetaHeadersFrame); !ok {
		t.Fatal("want HEADERS")
	}
	got, allowed := 0, 100
	for got < len(body) {
		f, ok := rc.next().(*http2.DataFrame)
		if !ok {
			t.Fatalf("want DATA, got %v", f)
		}
		if got += len(f.Data()); got > allowed {
			t.Fatalf("%d bytes sent past a window of %d", got, allowed)
		}
		if got == allowed && got < len(body) {
			if err := rc.fr.WriteWindowUpdate(1, 100); err != nil {
				t.Fatal(err)
			}
			allowed += 100
		}
	}
	if got != len(body) {
		t.Fatalf("got %d bytes, want %d", got, len(body))
	}
}

// A read deadline set through http.ResponseController ends a body read
// with os.ErrDeadlineExceeded (the endpoint's way to stop its body
// reader): one set in the past from another goroutine, whether the read
// waits already or not, and one that passes while the read waits.
func TestReadDeadline(t *testing.T) {
	for _, waiting := range []bool{false, true} {
		readDeadline(t, waiting)
	}
}

func readDeadline(t *testing.T, waiting bool) {
	got := make(chan error, 1)
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if waiting {
			if err := rc.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
				t.Errorf("SetReadDeadline: %v", err)
			}
		} else {
			go func() {
				time.Sleep(50 * time.Millisecond) // most often while the read waits; either way it must end it
				if err := rc.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
					t.Errorf("SetReadDeadline: %v", err)
				}
			}()
		}
		_, err := r.Body.Read(make([]byte, 10))
		got <- err
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, false, "POST", "/x")
	select {
	case err := <-got:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("read ended with %v, want the deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline did not end the read")
	}
}

// Shutdown sends GOAWAY, lets the open stream finish, refuses new ones and
// closes the connection after the last.
func TestShutdownIsGraceful(t *testing.T) {
	s := &h2.Server{}
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	addr := serve(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "finished")
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, true, "GET", "/x")
	<-started
	s.Shutdown()
	if f, ok := rc.next().(*http2.GoAwayFrame); !ok || f.LastStreamID != 1 || f.ErrCode != http2.ErrCodeNo {
		t.Fatalf("want GOAWAY last stream 1, got %v", f)
	}
	rc.headers(3, true, "GET", "/y")
	if f, ok := rc.next().(*http2.RSTStreamFrame); !ok || f.StreamID != 3 || f.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("want stream 3 refused, got %v", f)
	}
	close(release)
	if _, ok := rc.next().(*http2.MetaHeadersFrame); !ok {
		t.Fatal("want the open stream's response")
	}
	if f, ok := rc.next().(*http2.DataFrame); !ok || string(f.Data()) != "finished" {
		t.Fatalf("want its body, got %v", f)
	}
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.fr.ReadFrame(); err == nil {
		t.Fatal("the connection stayed open after its last stream")
	}
}

// A PING unanswered past the timeout closes a silent connection.
func TestPingTimeoutClosesASilentConnection(t *testing.T) {
	addr := serve(t, &h2.Server{PingAfter: time.Second, PingTimeout: time.Second}, http.HandlerFunc(echo))
	rc := dialRaw(t, addr)
	start := time.Now()
	var sawPing bool
	for {
		_ = rc.c.SetReadDeadline(time.Now().Add(20 * time.Second))
		f, err := rc.fr.ReadFrame()
		if err != nil {
			break
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			sawPing = true
		}
	}
	if !sawPing || time.Since(start) > 15*time.Second {
		t.Errorf("ping seen %v, closed after %v", sawPing, time.Since(start))
	}
}

// A handler's panic resets its stream; the connection goes on.
func TestPanicResetsOnlyItsStream(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	s := &h2.Server{Logf: func(f string, a ...any) { mu.Lock(); fmt.Fprintf(&logged, f, a...); mu.Unlock() }}
	addr := serve(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, true, "GET", "/panic")
	if f, ok := rc.next().(*http2.RSTStreamFrame); !ok || f.ErrCode != http2.ErrCodeInternal {
		t.Fatalf("want RST_STREAM INTERNAL_ERROR, got %v", f)
	}
	rc.headers(3, true, "GET", "/ok")
	if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.StreamID != 3 {
		t.Fatalf("want stream 3 served, got %v", f)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "boom") {
		t.Errorf("the panic was not logged: %q", logged.String())
	}
}

// A response with Connection: close (the endpoint's refusal while it
// drains) is sent, then GOAWAY once the streams already open on the
// connection have finished (restate-server fails the streams of a
// connection that sends GOAWAY): the client takes its next stream to a
// new connection.
func TestConnectionCloseSendsGoAway(t *testing.T) {
	release := make(chan struct{})
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
			_, _ = io.WriteString(w, "held")
			return
		}
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, true, "GET", "/hold")
	rc.headers(3, true, "GET", "/refuse")
	f, ok := rc.next().(*http2.MetaHeadersFrame)
	if !ok || f.StreamID != 3 || f.PseudoValue("status") != "503" {
		t.Fatalf("want stream 3's 503, got %v", f)
	}
	for _, hf := range f.RegularFields() {
		if hf.Name == "connection" {
			t.Errorf("the connection header went out on HTTP/2: %v", hf)
		}
	}
	// No GOAWAY while stream 1 is open: a PING is answered first.
	if err := rc.fr.WritePing(false, [8]byte{'h', 'e', 'l', 'd'}); err != nil {
		t.Fatal(err)
	}
	for {
		f := rc.next()
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			break
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("GOAWAY while stream 1 is still open: %v", f)
		}
	}
	close(release)
	if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.StreamID != 1 {
		t.Fatalf("want the held stream's response, got %v", f)
	}
	for {
		f := rc.next()
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.LastStreamID != 3 || g.ErrCode != http2.ErrCodeNo {
				t.Fatalf("want GOAWAY (NO_ERROR, last stream 3), got %v", g)
			}
			break
		}
		if d, ok := f.(*http2.DataFrame); !ok || d.StreamID != 1 {
			t.Fatalf("want stream 1's body, then GOAWAY; got %v", f)
		}
	}
}

// With no other stream open, Connection: close is followed by GOAWAY at
// once.
func TestConnectionCloseAloneSendsGoAwayAtOnce(t *testing.T) {
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, true, "GET", "/refuse")
	for {
		f := rc.next()
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.LastStreamID != 1 || g.ErrCode != http2.ErrCodeNo {
				t.Fatalf("want GOAWAY (NO_ERROR, last stream 1), got %v", g)
			}
			return
		}
		if f.Header().StreamID != 1 {
			t.Fatalf("want stream 1's response, then GOAWAY; got %v", f)
		}
	}
}

// A malformed frame of an open stream (a zero WINDOW_UPDATE) resets that
// stream and fails its handler's body read; the connection goes on.
func TestStreamErrorAbortsTheStream(t *testing.T) {
	readErr := make(chan error, 1)
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			return
		}
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, false, "POST", "/x")
	rc.fr.AllowIllegalWrites = true
	if err := rc.fr.WriteWindowUpdate(1, 0); err != nil {
		t.Fatal(err)
	}
	if f, ok := rc.next().(*http2.RSTStreamFrame); !ok || f.StreamID != 1 || f.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("want stream 1 reset (PROTOCOL_ERROR), got %v", f)
	}
	select {
	case err := <-readErr:
		if err == nil {
			t.Error("the body read ended cleanly after the stream was reset")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's read never ended")
	}
	rc.headers(3, true, "GET", "/ok")
	if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.StreamID != 3 {
		t.Fatalf("want stream 3 served, got %v", f)
	}
}

// MAX_CONCURRENT_STREAMS counts the streams open on the wire, as the
// client does (RFC 9113 §5.1.2): one it reset is closed even while its
// handler still returns.
func TestResetStreamFreesItsSlot(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	addr := serve(t, &h2.Server{MaxConcurrentStreams: 1}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release // ignores its cancellation for a while
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, true, "GET", "/slow")
	if err := rc.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	// A PING round trip: the reset has been read before stream 3 comes.
	if err := rc.fr.WritePing(false, [8]byte{2}); err != nil {
		t.Fatal(err)
	}
	if f, ok := rc.next().(*http2.PingFrame); !ok || !f.IsAck() {
		t.Fatalf("want PING ack, got %v", f)
	}
	rc.headers(3, true, "GET", "/fast")
	if f, ok := rc.next().(*http2.MetaHeadersFrame); !ok || f.StreamID != 3 {
		t.Fatalf("want stream 3 served, got %v", f)
	}
}

// DATA after the client ended its stream is a stream error (STREAM_CLOSED).
func TestDataAfterEndOfStream(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	rc := dialRaw(t, addr)
	rc.headers(1, false, "POST", "/x")
	if err := rc.fr.WriteData(1, true, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteData(1, false, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if f, ok := rc.next().(*http2.RSTStreamFrame); !ok || f.StreamID != 1 || f.ErrCode != http2.ErrCodeStreamClosed {
		t.Fatalf("want stream 1 reset (STREAM_CLOSED), got %v", f)
	}
}

// Header fields past MaxHeaderListSize are answered 431, not served with
// some of them missing.
func TestHeadersTooLarge(t *testing.T) {
	addr := serve(t, &h2.Server{MaxHeaderListSize: 1024}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the handler got a request whose headers were cut: %v", r.Header)
	}))
	want431 := func(rc *rawConn, what string) {
		t.Helper()
		if f := rc.next(); f.Header().Type != http2.FrameHeaders || f.(*http2.MetaHeadersFrame).PseudoValue("status") != "431" {
			if g, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("%s: want 431, got GOAWAY %v %q", what, g.ErrCode, g.DebugData())
			}
			t.Fatalf("%s: want 431, got %v", what, f)
		}
	}
	rc := dialRaw(t, addr)
	rc.headers(1, true, "GET", "/x", "x-a", strings.Repeat("v", 400), "x-b", strings.Repeat("v", 400), "x-c", strings.Repeat("v", 400))
	want431(rc, "without a body")

	// With a body, arriving in the same write as the headers, so before
	// the answer: the request's length is unknown, not zero.
	rc = dialRaw(t, addr)
	var frames, block bytes.Buffer
	enc := hpack.NewEncoder(&block) // the connection's first header block
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/x"},
		{Name: ":authority", Value: "x"}, {Name: "x-a", Value: strings.Repeat("v", 600)}, {Name: "x-b", Value: strings.Repeat("v", 600)}} {
		_ = enc.WriteField(f)
	}
	fr := http2.NewFramer(&frames, nil)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte("hello"))
	if _, err := rc.c.Write(frames.Bytes()); err != nil {
		t.Fatal(err)
	}
	want431(rc, "with a body")
}

// A request body that ends short of its content-length is malformed
// (RFC 9113 §8.1.1), whether DATA or trailers end it: the stream is reset
// with PROTOCOL_ERROR and the handler's read fails rather than seeing a
// clean end of a truncated body.
func TestBodyShortOfItsContentLength(t *testing.T) {
	for _, byTrailers := range []bool{false, true} {
		readErr := make(chan error, 1)
		addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			readErr <- err
		}))
		rc := dialRaw(t, addr)
		rc.headers(1, false, "POST", "/x", "content-length", "10")
		if err := rc.fr.WriteData(1, !byTrailers, []byte("abc")); err != nil {
			t.Fatal(err)
		}
		if byTrailers {
			rc.hb.Reset()
			_ = rc.he.WriteField(hpack.HeaderField{Name: "x-trailer", Value: "v"})
			if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
		}
		if f, ok := rc.next().(*http2.RSTStreamFrame); !ok || f.StreamID != 1 || f.ErrCode != http2.ErrCodeProtocol {
			t.Fatalf("ended by trailers %v: want stream 1 reset (PROTOCOL_ERROR), got %v", byTrailers, f)
		}
		select {
		case err := <-readErr:
			if err == nil {
				t.Errorf("ended by trailers %v: the handler read a clean end of a body 7 bytes short", byTrailers)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ended by trailers %v: the handler's read never returned", byTrailers)
		}
	}
}
