package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// stream is one request and its response.
type stream struct {
	sc     *serverConn
	id     uint32
	req    *http.Request
	cancel context.CancelFunc
	rw     responseWriter // the handler's goroutine only
	h      http.Handler   // the connection's, or the answer to a refused request

	// Under sc.mu.
	sendWindow  int64 // what the client lets us send on this stream
	peerDone    bool  // the client's side ended (END_STREAM or reset)
	localDone   bool  // our END_STREAM is written
	handlerDone bool
	reset       bool      // reset by either side: nothing more is written
	counted     bool      // in sc.open
	how         closedHow // who reset it first (0: nobody yet)

	// The request body, under mu.
	mu          sync.Mutex
	buf         []byte // received, not yet read: buf[off:]
	off         int
	eof         bool
	err         error // the stream or connection failed
	closed      bool  // Body.Close: later data is dropped
	recvWindow  int64 // what the client may still send on this stream
	recvUnacked int64 // read, not yet returned in a WINDOW_UPDATE
	declared    int64 // the request's content-length, -1 for none
	received    int64 // DATA payload bytes so far
	late        bool  // the read deadline passed
	deadlineGen int
	timer       *time.Timer
	wake        chan struct{} // cap 1: data, end, error or deadline
}

// newStreamLocked makes the stream of a request and adds it to the
// connection's (sc.mu held). h, when set, answers instead of the
// connection's handler.
func (sc *serverConn) newStreamLocked(id uint32, req *http.Request, ended bool, h http.Handler) *stream {
	ctx, cancel := context.WithCancel(sc.baseCtx)
	st := &stream{sc: sc, id: id, cancel: cancel, eof: ended, peerDone: ended, h: h,
		recvWindow: sc.srv.streamWindow(), declared: req.ContentLength, wake: make(chan struct{}, 1)}
	if st.h == nil {
		st.h = sc.h
	}
	st.rw.st = st
	st.rw.noBody = req.Method == http.MethodHead
	if ended {
		req.Body = http.NoBody
		req.ContentLength = 0
	} else {
		req.Body = (*requestBody)(st)
	}
	st.req = req.WithContext(ctx)
	st.sendWindow = sc.initialSend
	st.counted = true
	sc.open++
	sc.streams[id] = st
	return st
}

// newRequest builds the request of a HEADERS frame (its body is set by
// newStream).
func (sc *serverConn) newRequest(f *http2.MetaHeadersFrame) (*http.Request, error) {
	method, path := f.PseudoValue("method"), f.PseudoValue("path")
	authority := f.PseudoValue("authority")
	if method == "" || path == "" || f.PseudoValue("scheme") == "" || method == http.MethodConnect {
		return nil, fmt.Errorf("request without :method, :path and :scheme, or a CONNECT (%q %q)", method, path)
	}
	regular := f.RegularFields()
	h := make(http.Header, len(regular))
	for _, hf := range regular {
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return nil, fmt.Errorf("connection-specific header %q in an HTTP/2 request", hf.Name)
		case "te":
			if hf.Value != "trailers" {
				return nil, fmt.Errorf("header te: %q, want trailers", hf.Value)
			}
		}
		k := canonicalKey(hf.Name)
		h[k] = append(h[k], hf.Value)
	}
	if authority == "" {
		authority = h.Get("Host")
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, fmt.Errorf("bad :path %q: %v", path, err)
	}
	cl := int64(-1)
	if v := h.Get("Content-Length"); v != "" {
		if cl, err = strconv.ParseInt(v, 10, 64); err != nil || cl < 0 {
			return nil, fmt.Errorf("bad content-length %q", v)
		}
	}
	return &http.Request{
		Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h,
		ContentLength: cl, Host: authority, RemoteAddr: sc.remote, RequestURI: path, TLS: sc.tls,
	}, nil
}

// run serves the stream's request on the handler, then ends the stream.
func (st *stream) run() {
	defer st.sc.handlers.Done()
	panicked := true
	defer func() {
		if panicked {
			// A nil p is runtime.Goexit: the handler ended the goroutine.
			p := recover()
			if p != nil && p != http.ErrAbortHandler {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				st.sc.logf("panic serving stream %d (%s %s): %v\n%s", st.id, st.req.Method, st.req.URL.Path, p, buf)
			}
			st.sc.resetStream(st.id, http2.ErrCodeInternal)
			st.done(true)
		}
	}()
	st.h.ServeHTTP(&st.rw, st.req)
	panicked = false
	if !st.rw.ended {
		_ = st.rw.flush(true, true)
	} else {
		st.sc.mu.Lock()
		open := !st.peerDone && !st.reset
		st.sc.mu.Unlock()
		if open {
			st.sc.resetStream(st.id, http2.ErrCodeNo)
		}
	}
	st.done(false)
}

// done ends the handler's part: the stream is forgotten (a client still
// sending was told to stop by flush's RST_STREAM) and its context
// cancelled. The last stream of a connection going away closes it.
func (st *stream) done(reset bool) {
	st.cancel()
	st.mu.Lock()
	st.closed = true
	dropped := int64(len(st.buf) - st.off)
	st.buf, st.off = nil, 0
	if st.timer != nil {
		st.timer.Stop()
	}
	st.mu.Unlock()
	st.signal() // a read still waiting (the handler left it behind) fails
	sc := st.sc
	sc.mu.Lock()
	st.handlerDone = true
	if reset {
		st.reset = true
	}
	if st.counted {
		st.counted = false
		sc.open--
	}
	sc.forgetLocked(st)
	last, goAway := sc.streamGoneLocked()
	sc.mu.Unlock()
	_ = sc.consumed(dropped)
	switch {
	case last:
		sc.wakeReader() // the connection going away ends with its last stream
	case goAway:
		sc.goAway(http2.ErrCodeNo, nil)
	}
}

// abort fails the stream: its body reads and writes fail and its context
// is cancelled. gone says the connection broke (no window to give back).
func (st *stream) abort(err error, gone bool) {
	// Reset first: a handler woken by the failed read must find it.
	sc := st.sc
	sc.mu.Lock()
	st.reset, st.peerDone = true, true
	sc.wireClosedLocked(st)
	var goAway bool
	if st.handlerDone {
		sc.forgetLocked(st)
		_, goAway = sc.streamGoneLocked()
	}
	sc.sendCond.Broadcast()
	sc.mu.Unlock()
	if goAway {
		sc.goAway(http2.ErrCodeNo, nil)
	}
	st.mu.Lock()
	if st.err == nil {
		st.err = err
	}
	dropped := int64(len(st.buf) - st.off)
	st.buf, st.off = nil, 0
	st.mu.Unlock()
	st.signal()
	st.cancel()
	if !gone {
		_ = sc.consumed(dropped)
	}
}

func (st *stream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// receive takes a DATA frame's payload (n bytes with padding) from the
// read loop; an error comes with the code to reset the stream with.
func (st *stream) receive(data []byte, n int64, end bool) (http2.ErrCode, error) {
	st.mu.Lock()
	if st.eof {
		st.mu.Unlock()
		return http2.ErrCodeStreamClosed, errors.New("the client sent a frame after ending the stream")
	}
	if n > st.recvWindow {
		st.mu.Unlock()
		return http2.ErrCodeFlowControl, errors.New("the client sent DATA beyond the stream's window")
	}
	st.recvWindow -= n
	st.received += int64(len(data))
	if st.declared >= 0 && (st.received > st.declared || (end && st.received != st.declared)) {
		// Malformed (RFC 9113 §8.1.1): the body is not what it said.
		st.mu.Unlock()
		return http2.ErrCodeProtocol, fmt.Errorf("the request body is not its content-length %d", st.declared)
	}
	drop := n - int64(len(data)) // padding
	if st.closed || st.err != nil {
		drop = n
	} else {
		st.buf = append(st.buf, data...)
	}
	if end {
		st.eof = true
	}
	st.mu.Unlock()
	st.signal()
	return http2.ErrCodeNo, st.refund(drop)
}

// refund gives n bytes that the handler read or the server dropped back
// to the client: the stream's window once a quarter of it is waiting
// (while the client may still send on it), the connection's likewise.
func (st *stream) refund(n int64) error {
	if n == 0 {
		return nil
	}
	st.mu.Lock()
	var inc int64
	st.recvUnacked += n
	if !st.eof && st.recvUnacked >= st.sc.srv.streamWindow()/4 {
		inc, st.recvUnacked = st.recvUnacked, 0
		st.recvWindow += inc
	}
	st.mu.Unlock()
	if inc > 0 {
		_ = st.sc.write(func() error { return st.sc.fr.WriteWindowUpdate(st.id, uint32(inc)) })
	}
	return st.sc.consumed(n)
}

// requestBody is a stream's request body.
type requestBody stream

var errBodyClosed = errors.New("h2: read on a closed request body")

// Read returns what has arrived, waiting for the first byte.
func (b *requestBody) Read(p []byte) (int, error) {
	st := (*stream)(b)
	for {
		st.mu.Lock()
		if st.closed {
			st.mu.Unlock()
			return 0, errBodyClosed
		}
		if st.err != nil {
			err := st.err
			st.mu.Unlock()
			return 0, err
		}
		if st.off < len(st.buf) {
			n := copy(p, st.buf[st.off:])
			st.off += n
			if st.off == len(st.buf) {
				st.buf, st.off = st.buf[:0], 0
			}
			st.mu.Unlock()
			return n, st.refund(int64(n))
		}
		if st.eof {
			st.mu.Unlock()
			return 0, io.EOF
		}
		if st.late {
			st.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		st.mu.Unlock()
		<-st.wake
	}
}

// Close drops the rest of the body.
func (b *requestBody) Close() error {
	st := (*stream)(b)
	st.mu.Lock()
	st.closed = true
	dropped := int64(len(st.buf) - st.off)
	st.buf, st.off = nil, 0
	st.mu.Unlock()
	st.signal()
	return st.refund(dropped)
}

func (st *stream) setReadDeadline(t time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.timer != nil {
		st.timer.Stop()
	}
	st.deadlineGen++
	st.late = false
	if t.IsZero() {
		return
	}
	d := time.Until(t)
	if d <= 0 {
		st.late = true
		st.signal()
		return
	}
	gen := st.deadlineGen
	st.timer = time.AfterFunc(d, func() {
		st.mu.Lock()
		if st.deadlineGen == gen {
			st.late = true
		}
		st.mu.Unlock()
		st.signal()
	})
}

// responseWriter is a stream's http.ResponseWriter, http.Flusher and the
// read deadline of http.ResponseController. The header map is encoded at
// the first flush: changes between WriteHeader and then are sent too.
type responseWriter struct {
	st          *stream
	header      http.Header
	status      int
	wroteHeader bool
	sentHeader  bool
	noBody      bool
	ended       bool // END_STREAM written
	closeConn   bool // the headers sent said Connection: close
	buf         []byte
}

// maxBuffered is what Write buffers before it writes DATA by itself.
const maxBuffered = 32 << 10

func (w *responseWriter) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 4)
	}
	return w.header
}

func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("h2: invalid WriteHeader code %v", code))
	}
	if code < 200 {
		return // informational responses are not sent
	}
	w.status, w.wroteHeader = code, true
	if code == http.StatusNoContent || code == http.StatusNotModified {
		w.noBody = true
	}
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		if w.status == http.StatusNoContent || w.status == http.StatusNotModified {
			return 0, http.ErrBodyNotAllowed
		}
		return len(p), nil // HEAD
	}
	if w.ended {
		return 0, errors.New("h2: write after the response ended")
	}
	if err := w.st.writeErr(); err != nil {
		return 0, err
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= maxBuffered {
		if err := w.flush(false, false); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush sends the headers and what was written.
func (w *responseWriter) Flush() { _ = w.flush(false, false) }

// FlushError is Flush with its error (http.ResponseController uses it).
func (w *responseWriter) FlushError() error { return w.flush(false, false) }

// EndStream sends what was written and ends the response (END_STREAM in
// the same frame) while the handler may go on reading the request body;
// later writes fail. The invocation endpoint ends its response with its
// terminal message this way, so restate-server gets both at once.
func (w *responseWriter) EndStream() error { return w.flush(true, false) }

// SetReadDeadline bounds the request body's reads (http.ResponseController).
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	w.st.setReadDeadline(t)
	return nil
}

func (st *stream) writeErr() error {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.broken != nil {
		return sc.broken
	}
	if st.reset {
		return errors.New("h2: the stream was reset")
	}
	return nil
}

// flush writes the headers (once) and the buffered body as the client's
// windows allow; end also ends the stream, and finish (the handler
// returned) then resets a request the client is still sending (RFC 9113
// §8.1: a complete response may stop the request).
func (w *responseWriter) flush(end, finish bool) error {
	st, sc := w.st, w.st.sc
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.ended || (w.sentHeader && len(w.buf) == 0 && !end) {
		return nil
	}
	if end {
		w.ended = true
	}
	data := w.buf
	defer func() { w.buf = w.buf[:0] }()
	for {
		n := 0
		// Only DATA is flow controlled (RFC 9113 §5.2): the headers go
		// out whatever the windows, and the body waits for room after
		// them.
		sc.mu.Lock()
		for w.sentHeader && len(data) > 0 && sc.broken == nil && !st.reset && (sc.sendWindow <= 0 || st.sendWindow <= 0) {
			sc.sendCond.Wait()
		}
		sc.mu.Unlock()
		// The windows are taken under the write lock: SETTINGS, which may
		// shrink them, are applied and acknowledged under it too, so what
		// goes out here fits the windows the client has when it reads it.
		sc.wmu.Lock()
		sc.mu.Lock()
		if sc.broken != nil || st.reset {
			sc.mu.Unlock()
			sc.wmu.Unlock()
			return st.writeErr()
		}
		if w.sentHeader && len(data) > 0 && (sc.sendWindow <= 0 || st.sendWindow <= 0) {
			sc.mu.Unlock()
			sc.wmu.Unlock()
			continue // shrunk meanwhile
		}
		if len(data) > 0 && sc.sendWindow > 0 && st.sendWindow > 0 {
			n = int(min(int64(len(data)), sc.sendWindow, st.sendWindow))
			sc.sendWindow -= int64(n)
			st.sendWindow -= int64(n)
		}
		maxFrame := int(sc.maxFrameSize)
		last := n == len(data)
		stop := finish && last && !st.peerDone
		sc.mu.Unlock()
		err := sc.writeLocked(func() error {
			endStream := end && last
			if endStream {
				// Before the frame goes out: the client may answer it
				// before this goroutine runs again, and its next frame
				// on the stream must find the stream closed.
				w.st.ending(stop)
			}
			if !w.sentHeader {
				w.sentHeader = true
				if err := w.writeHeaders(endStream && n == 0, end, len(data), maxFrame); err != nil {
					return err
				}
				if endStream && n == 0 {
					return w.stopRequest(stop)
				}
			} else if n == 0 && endStream {
				if err := sc.fr.WriteData(st.id, true, nil); err != nil {
					return err
				}
				return w.stopRequest(stop)
			}
			chunk := data[:n]
			for len(chunk) > 0 {
				k := min(len(chunk), maxFrame)
				if err := sc.fr.WriteData(st.id, endStream && k == len(chunk), chunk[:k]); err != nil {
					return err
				}
				chunk = chunk[k:]
			}
			return w.stopRequest(stop)
		})
		sc.wmu.Unlock()
		if err != nil {
			return err
		}
		if w.closeConn {
			// Connection: close asks for the connection's end: GOAWAY,
			// so the client opens a new one (which a load balancer may
			// give to another server), once its other streams finished.
			w.closeConn = false
			sc.goAwayWhenIdle(st)
		}
		data = data[n:]
		if last {
			return nil
		}
	}
}

// ending notes the stream's END_STREAM, and with stop the RST_STREAM
// NO_ERROR that follows it, as sent.
func (st *stream) ending(stop bool) {
	sc := st.sc
	sc.mu.Lock()
	st.localDone = true
	if stop {
		st.reset = true
		if st.how == 0 {
			st.how = closedByUs
		}
	}
	sc.wireClosedLocked(st)
	sc.mu.Unlock()
}

func (w *responseWriter) stopRequest(stop bool) error {
	if !stop {
		return nil
	}
	return w.st.sc.fr.WriteRSTStream(w.st.id, http2.ErrCodeNo)
}

// writeHeaders encodes the response headers (under the write lock: the
// encoder's table follows the wire's order) into HEADERS and
// CONTINUATION frames. A response that is complete here says its length.
func (w *responseWriter) writeHeaders(endStream, complete bool, length, maxFrame int) error {
	sc := w.st.sc
	sc.hbuf.Reset()
	enc := sc.henc
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(w.status)})
	hasLength := false
	for k, vs := range w.header {
		lk := lowerKey(k)
		switch lk {
		case "connection":
			for _, v := range vs {
				if strings.EqualFold(strings.TrimSpace(v), "close") {
					w.closeConn = true
				}
			}
			continue
		case "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "trailer":
			continue
		case "content-length":
			hasLength = true
		}
		for _, v := range vs {
			_ = enc.WriteField(hpack.HeaderField{Name: lk, Value: v})
		}
	}
	if complete && !hasLength && !w.noBody {
		_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(length)})
	}
	block := sc.hbuf.Bytes()
	first := block[:min(len(block), maxFrame)]
	block = block[len(first):]
	if err := sc.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: w.st.id, BlockFragment: first, EndStream: endStream, EndHeaders: len(block) == 0,
	}); err != nil {
		return err
	}
	for len(block) > 0 {
		k := min(len(block), maxFrame)
		if err := sc.fr.WriteContinuation(w.st.id, k == len(block), block[:k]); err != nil {
			return err
		}
		block = block[k:]
	}
	return nil
}

func statusText(code int) string {
	if code == http.StatusOK {
		return "200"
	}
	return strconv.Itoa(code)
}

// commonKeys maps the lower-case names the invocation protocol and its
// health checks use to their canonical forms, and back, without
// allocating.
var commonKeys, commonLower = func() (map[string]string, map[string]string) {
	names := []string{"Accept", "Accept-Encoding", "Authorization", "Content-Length", "Content-Type",
		"Connection", "Date", "Host", "Retry-After", "Te", "Traceparent", "Tracestate", "User-Agent",
		"X-Content-Type-Options", "X-Restate-Server", "X-Restate-Signature-Scheme", "X-Restate-Jwt-V1",
		"X-Restate-Invocation-Id", "X-Restate-Id", "Baggage"}
	canon, lower := map[string]string{}, map[string]string{}
	for _, n := range names {
		canon[strings.ToLower(n)] = n
		lower[n] = strings.ToLower(n)
	}
	return canon, lower
}()

func canonicalKey(lower string) string {
	if k, ok := commonKeys[lower]; ok {
		return k
	}
	return http.CanonicalHeaderKey(lower)
}

func lowerKey(k string) string {
	if l, ok := commonLower[k]; ok {
		return l
	}
	return strings.ToLower(k)
}
