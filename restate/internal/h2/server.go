package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ClientPreface opens every HTTP/2 connection (RFC 9113 §3.4).
const ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Server serves HTTP/2 connections for a handler. The zero value serves
// with the defaults each field names; set fields before the first
// ServeConn.
type Server struct {
	// MaxConcurrentStreams bounds the streams a client may keep open on
	// one connection; a stream beyond it is refused (REFUSED_STREAM, which
	// a client may retry). Default 256.
	MaxConcurrentStreams uint32
	// StreamWindow is what a client may send on one stream before the
	// handler reads it. Default 1 MiB.
	StreamWindow uint32
	// ConnWindow is the same for all streams of a connection together.
	// Default 4 MiB.
	ConnWindow uint32
	// MaxHeaderListSize bounds a request's decoded header fields.
	// Default 1 MiB.
	MaxHeaderListSize uint32
	// IdleTimeout closes a connection that has had no stream this long
	// (with a GOAWAY first). Zero: never.
	IdleTimeout time.Duration
	// PingAfter sends a PING on a connection that has sent nothing this
	// long; PingTimeout then closes it if it still sends nothing. Zero:
	// no health checks.
	PingAfter, PingTimeout time.Duration
	// Logf reports connection errors and handler panics. Default: none.
	Logf func(format string, args ...any)

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	shutdown bool
}

func (s *Server) maxStreams() uint32 { return orDefault(s.MaxConcurrentStreams, 256) }
func (s *Server) streamWindow() int64 {
	return int64(min(orDefault(s.StreamWindow, 1<<20), maxWindow))
}
func (s *Server) connWindow() int64 { return int64(min(orDefault(s.ConnWindow, 4<<20), maxWindow)) }
func (s *Server) maxHeaderList() uint32 {
	return orDefault(s.MaxHeaderListSize, 1<<20)
}

func orDefault(v, d uint32) uint32 {
	if v == 0 {
		return d
	}
	return v
}

const (
	// maxWindow is the largest flow-control window (RFC 9113 §6.9.1).
	maxWindow = 1<<31 - 1
	// initialWindow is every window's size before SETTINGS say otherwise.
	initialWindow = 65535
	// maxReadFrame is the largest frame a client may send us: the
	// protocol's default, so no SETTINGS entry is needed and a
	// connection's read buffer stays at 16 KiB.
	maxReadFrame = 16 << 10
	// healthTick is how often idle and ping deadlines are checked.
	healthTick = time.Second
)

// Shutdown sends GOAWAY on every connection: no new stream is accepted,
// the open ones finish, and each connection closes when its last stream
// ends. Connections served after Shutdown are refused at once.
// http.Server.Shutdown waits for them (it counts them as active).
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.shutdown = true
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway(http2.ErrCodeNo, nil)
	}
}

// ServeConn serves one connection whose client preface (ClientPreface)
// has already been read, until the connection ends; it returns once every
// handler it started has returned. h gets each request; a handler with a
// BaseContext() context.Context method (net/http's TLSNextProto handlers)
// provides the requests' base context. For a *tls.Conn the requests carry
// its connection state.
func (s *Server) ServeConn(nc net.Conn, h http.Handler) {
	sc := s.newConn(nc, h)
	defer func() {
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
	}()
	sc.serve()
}

// register adds sc to the connections Shutdown reaches, once its SETTINGS
// are out (a GOAWAY must not precede them); false after Shutdown.
func (s *Server) register(sc *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return false
	}
	if s.conns == nil {
		s.conns = map[*serverConn]struct{}{}
	}
	s.conns[sc] = struct{}{}
	return true
}

// serverConn is one connection: the read loop's state, the write lock and
// the streams.
type serverConn struct {
	srv     *Server
	nc      net.Conn
	h       http.Handler
	baseCtx context.Context
	tls     *tls.ConnectionState
	remote  string

	// fr reads in the read loop only; its writers are used under wmu
	// (Framer allows one reader and one writer at a time).
	fr   *http2.Framer
	hdec *hpack.Decoder // read loop only

	wmu  sync.Mutex
	bw   *bufio.Writer
	henc *hpack.Encoder
	hbuf bytes.Buffer

	mu            sync.Mutex
	sendCond      *sync.Cond // send windows grew, or the connection broke
	streams       map[uint32]*stream
	maxClientID   uint32 // the highest stream id the client opened
	goingAway     bool   // GOAWAY sent or received: no new streams
	sentGoAway    bool   // our GOAWAY is written
	goAwayIdle    bool   // a response said Connection: close: GOAWAY once no stream is open
	broken        error  // set once the connection cannot be written
	sendWindow    int64  // what the client lets us send on the connection
	initialSend   int64  // the client's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrameSize  uint32 // the client's SETTINGS_MAX_FRAME_SIZE
	recvWindow    int64  // what the client may still send on the connection
	recvUnacked   int64  // read or discarded, not yet returned in a WINDOW_UPDATE
	open          uint32 // streams open on the wire (MAX_CONCURRENT_STREAMS)
	ended         closedStreams
	lastActive    time.Time // the last time a stream was open (or opened)
	pingOut       bool
	silentFor     time.Duration
	pingSentAt    time.Duration // silentFor when the PING went out
	stuckFor      time.Duration // a writer held the write lock this long
	handlers      sync.WaitGroup
	frames        atomic.Uint64 // frames read, for the health check
	framesChecked uint64
	health        *time.Timer
}

func (s *Server) newConn(nc net.Conn, h http.Handler) *serverConn {
	sc := &serverConn{
		srv: s, nc: nc, h: h, baseCtx: context.Background(), remote: nc.RemoteAddr().String(),
		streams: map[uint32]*stream{}, sendWindow: initialWindow, initialSend: initialWindow,
		maxFrameSize: 16384, recvWindow: initialWindow, lastActive: time.Now(),
	}
	if b, ok := h.(interface{ BaseContext() context.Context }); ok {
		sc.baseCtx = b.BaseContext()
	}
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		sc.tls = &st
	}
	sc.sendCond = sync.NewCond(&sc.mu)
	sc.bw = bufio.NewWriterSize(nc, 16<<10)
	sc.fr = http2.NewFramer(sc.bw, bufio.NewReaderSize(nc, 16<<10))
	sc.fr.SetMaxReadFrameSize(maxReadFrame)
	sc.fr.SetReuseFrames() // DATA payloads are copied before the next read
	sc.hdec = hpack.NewDecoder(4096, nil)
	sc.fr.ReadMetaHeaders = sc.hdec
	sc.fr.MaxHeaderListSize = s.maxHeaderList()
	sc.henc = hpack.NewEncoder(&sc.hbuf)
	return sc
}

func (sc *serverConn) logf(format string, args ...any) { sc.srv.logf(sc.nc, format, args...) }

// serve writes the server's SETTINGS and window, then reads frames until
// the connection ends.
func (sc *serverConn) serve() {
	sc.wmu.Lock()
	err := sc.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: sc.srv.maxStreams()},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(sc.srv.streamWindow())},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: sc.srv.maxHeaderList()},
	)
	if extra := sc.srv.connWindow() - initialWindow; err == nil && extra > 0 {
		err = sc.fr.WriteWindowUpdate(0, uint32(extra))
		sc.recvWindow += extra
	}
	if err == nil {
		err = sc.bw.Flush()
	}
	sc.wmu.Unlock()
	if err == nil && !sc.srv.register(sc) {
		err = errors.New("the server is shut down")
	}
	if err != nil {
		sc.fail(err)
		return
	}
	sc.health = time.AfterFunc(healthTick, sc.checkHealth)
	err = sc.readLoop()
	sc.health.Stop()
	sc.mu.Lock()
	sentGoAway := sc.sentGoAway
	sc.mu.Unlock()
	if err == nil || sentGoAway {
		// GOAWAY went out, and no stream is left or the client broke the
		// protocol: stop writing, and read what the client still sends
		// for a moment before closing, so that the kernel does not answer
		// it with a reset that could destroy our last frames (the GOAWAY
		// that says why) before the client read them.
		if err == nil {
			err = errors.New("closed after GOAWAY")
		}
		sc.markBroken(err)
		lingerClose(sc.nc)
	}
	sc.fail(err)
	sc.handlers.Wait()
}

// goAwayLinger is how long a connection closing after its GOAWAY reads
// what the client still sends.
const goAwayLinger = time.Second

// wakeReader makes the read loop's pending read return, so that it sees
// the connection is done (closing).
func (sc *serverConn) wakeReader() { _ = sc.nc.SetReadDeadline(time.Now()) }

// readLoop reads and handles frames until an error ends the connection.
func (sc *serverConn) readLoop() error {
	settingsSeen := false
	for {
		f, err := sc.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// A malformed frame of one stream: that stream is reset
				// (a malformed request is refused, its id taken).
				sc.mu.Lock()
				st := sc.streams[se.StreamID]
				if st == nil {
					sc.maxClientID = max(sc.maxClientID, se.StreamID)
				}
				sc.mu.Unlock()
				sc.resetStream(se.StreamID, se.Code)
				if st != nil {
					st.abort(fmt.Errorf("h2: stream error: %v", se), false)
				}
				continue
			}
			if sc.closing() {
				return nil // woken by wakeReader: GOAWAY sent, no stream left
			}
			var ce http2.ConnectionError
			switch {
			case errors.As(err, &ce):
				sc.goAway(http2.ErrCode(ce), err)
			case errors.Is(err, http2.ErrFrameTooLarge):
				// Beyond our SETTINGS_MAX_FRAME_SIZE (§4.2).
				sc.goAway(http2.ErrCodeFrameSize, err)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		sc.frames.Add(1)
		if !settingsSeen {
			// The preface's second half is a SETTINGS frame (§3.4).
			if s, ok := f.(*http2.SettingsFrame); !ok || s.IsAck() {
				sc.goAway(http2.ErrCodeProtocol, fmt.Errorf("the client's first frame is %v, not SETTINGS", f.Header().Type))
				return errors.New("no SETTINGS after the preface")
			}
			settingsSeen = true
		}
		if err := sc.handleFrame(f); err != nil {
			code := http2.ErrCodeProtocol
			var ce *connError
			if errors.As(err, &ce) {
				code = ce.code
			}
			sc.goAway(code, err)
			return err
		}
		if sc.closing() {
			return nil
		}
	}
}

// connError is a connection error with its message.
type connError struct {
	code http2.ErrCode
	msg  string
}

func (e *connError) Error() string { return fmt.Sprintf("%v: %s", e.code, e.msg) }

func protocolError(format string, args ...any) error {
	return &connError{http2.ErrCodeProtocol, fmt.Sprintf(format, args...)}
}

func (sc *serverConn) handleFrame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return sc.handleHeaders(f)
	case *http2.DataFrame:
		return sc.handleData(f)
	case *http2.WindowUpdateFrame:
		return sc.handleWindowUpdate(f)
	case *http2.SettingsFrame:
		return sc.handleSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		return sc.write(func() error { return sc.fr.WritePing(true, f.Data) })
	case *http2.RSTStreamFrame:
		sc.mu.Lock()
		st, err := sc.openStreamLocked(f.StreamID, "RST_STREAM")
		if st != nil && st.how == 0 {
			st.how = closedByPeer
		}
		sc.mu.Unlock()
		if st != nil {
			st.abort(fmt.Errorf("the client reset the stream (%v)", f.ErrCode), false)
		}
		return err
	case *http2.GoAwayFrame:
		sc.mu.Lock()
		sc.goingAway = true
		sc.mu.Unlock()
		return nil
	case *http2.PushPromiseFrame:
		return protocolError("PUSH_PROMISE from a client")
	case *http2.PriorityFrame:
		// Priorities are ignored, but a stream cannot depend on itself
		// (RFC 7540 §5.3.1): a stream error.
		if f.StreamDep == f.StreamID {
			sc.streamError(f.StreamID, http2.ErrCodeProtocol, errors.New("the stream was made to depend on itself"))
		}
		return nil
	default:
		// Unknown extension frames are ignored (§5.5).
		return nil
	}
}

func (sc *serverConn) handleSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	// Under the write lock until the ACK is out: a writer that finds a
	// window the new settings opened writes after the ACK, which the
	// client then reads first, as it sent them.
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			sc.mu.Lock()
			delta := int64(s.Val) - sc.initialSend
			sc.initialSend = int64(s.Val)
			for _, st := range sc.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					sc.mu.Unlock()
					return &connError{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream's window"}
				}
			}
			sc.mu.Unlock()
		case http2.SettingMaxFrameSize:
			sc.mu.Lock()
			sc.maxFrameSize = s.Val
			sc.mu.Unlock()
		case http2.SettingHeaderTableSize:
			sc.henc.SetMaxDynamicTableSizeLimit(s.Val) // wmu held
		}
		return nil
	})
	if err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return &connError{http2.ErrCode(ce), err.Error()}
		}
		return err
	}
	err = sc.writeLocked(func() error { return sc.fr.WriteSettingsAck() })
	sc.mu.Lock()
	sc.sendCond.Broadcast() // windows may have grown
	sc.mu.Unlock()
	return err
}

func (sc *serverConn) handleWindowUpdate(f *http2.WindowUpdateFrame) error {
	sc.mu.Lock()
	if f.StreamID == 0 {
		sc.sendWindow += int64(f.Increment)
		overflow := sc.sendWindow > maxWindow
		sc.sendCond.Broadcast()
		sc.mu.Unlock()
		if overflow {
			return &connError{http2.ErrCodeFlowControl, "WINDOW_UPDATE overflows the connection's window"}
		}
		return nil
	}
	st, err := sc.openStreamLocked(f.StreamID, "WINDOW_UPDATE")
	if st == nil {
		sc.mu.Unlock()
		return err
	}
	st.sendWindow += int64(f.Increment)
	overflow := st.sendWindow > maxWindow
	sc.sendCond.Broadcast()
	sc.mu.Unlock()
	if overflow {
		sc.resetStream(f.StreamID, http2.ErrCodeFlowControl)
		st.abort(errors.New("WINDOW_UPDATE overflowed the stream's window"), false)
	}
	return nil
}

// closedHow says how a stream no longer open on the wire closed, which
// decides what frames still arriving on it mean (RFC 9113 §5.1).
type closedHow uint8

const (
	// closedSkipped: an id below the highest opened that was never used
	// (the client's first use of a higher id closed it, §5.1.1).
	closedSkipped closedHow = iota + 1
	// closedForgotten: closed too long ago to be remembered; its frames
	// are ignored.
	closedForgotten
	// closedByUs: we sent RST_STREAM; frames the client sent before it
	// arrived are ignored.
	closedByUs
	// closedByPeer: the client sent RST_STREAM.
	closedByPeer
	// closedEnded: both sides sent END_STREAM.
	closedEnded
)

// closedStreams remembers how the most recent streams closed, a bounded
// number of them, oldest forgotten first.
type closedStreams struct {
	byID      map[uint32]closedHow
	order     []uint32 // ring of the ids in byID, oldest at next
	next      int
	forgotten uint32 // the highest id forgotten so far
}

// closedMemory is how many closed streams a connection remembers: far
// more than can have frames in flight at once.
const closedMemory = 1024

// how is how stream id closed (an id no higher than the highest opened).
func (c *closedStreams) how(id uint32) closedHow {
	if h, ok := c.byID[id]; ok {
		return h
	}
	if id <= c.forgotten {
		return closedForgotten
	}
	return closedSkipped
}

// ignored says frames on a stream closed this way are dropped without a
// word: the client may have sent them before it learnt of the close.
func (h closedHow) ignored() bool { return h == closedByUs || h == closedForgotten }

func (c *closedStreams) remember(id uint32, how closedHow) {
	if c.byID == nil {
		c.byID = make(map[uint32]closedHow)
	}
	if _, ok := c.byID[id]; ok {
		c.byID[id] = how
		return
	}
	if len(c.order) < closedMemory {
		c.order = append(c.order, id)
	} else {
		old := c.order[c.next]
		delete(c.byID, old)
		c.forgotten = max(c.forgotten, old)
		c.order[c.next] = id
		c.next = (c.next + 1) % closedMemory
	}
	c.byID[id] = how
}

// closedHowLocked is how stream id (st, when it is still served) has
// closed on the wire, 0 while it is open (sc.mu held; id not idle).
func (sc *serverConn) closedHowLocked(id uint32, st *stream) closedHow {
	if st != nil {
		switch {
		case st.how == closedByPeer || st.how == closedByUs:
			return st.how
		case st.peerDone && st.localDone:
			return closedEnded // its handler is still returning
		}
		return 0
	}
	return sc.ended.how(id)
}

// forgetLocked drops st from the streams served, remembering how it
// closed (sc.mu held).
func (sc *serverConn) forgetLocked(st *stream) {
	if sc.streams[st.id] != st {
		return
	}
	delete(sc.streams, st.id)
	if len(sc.streams) == 0 {
		sc.lastActive = time.Now() // idle from now on
	}
	how := st.how
	if how == 0 {
		// Not reset by either side: ended both ways, or the connection
		// broke (then nothing arrives any more).
		how = closedEnded
	}
	sc.ended.remember(st.id, how)
}

// openStreamLocked returns the open stream id (sc.mu held); for none, a
// protocol error when the client never opened it (a frame of kind on an
// idle stream, RFC 9113 §5.1), nil when it is closed.
func (sc *serverConn) openStreamLocked(id uint32, kind string) (*stream, error) {
	if st := sc.streams[id]; st != nil {
		return st, nil
	}
	if id > sc.maxClientID {
		return nil, protocolError("%s on idle stream %d", kind, id)
	}
	return nil, nil
}

func (sc *serverConn) handleData(f *http2.DataFrame) error {
	n := int64(f.Header().Length) // padding counts too (§6.1)
	sc.mu.Lock()
	if n > sc.recvWindow {
		sc.mu.Unlock()
		return &connError{http2.ErrCodeFlowControl, "DATA beyond the connection's window"}
	}
	sc.recvWindow -= n
	st, err := sc.openStreamLocked(f.StreamID, "DATA")
	how := sc.closedHowLocked(f.StreamID, st)
	sc.mu.Unlock()
	if err != nil {
		return err
	}
	if how != 0 {
		// The data is dropped, its room given back. A client that ended
		// or reset the stream itself knows it may not send on it: a
		// stream error (RFC 9113 §5.1); after our RST_STREAM, data may
		// have been on its way and is ignored.
		if !how.ignored() {
			sc.resetStream(f.StreamID, http2.ErrCodeStreamClosed)
		}
		return sc.consumed(n)
	}
	if f.StreamEnded() {
		// Before the handler can read the body's end: a handler that
		// returns then must find the client done, and send no RST_STREAM.
		sc.peerEnded(st)
	}
	if code, err := st.receive(f.Data(), n, f.StreamEnded()); err != nil {
		sc.resetStream(f.StreamID, code)
		st.abort(err, false)
		return sc.consumed(n)
	}
	return nil
}

// consumed gives n bytes of the connection's window back once a quarter
// of it is waiting.
func (sc *serverConn) consumed(n int64) error {
	if n == 0 {
		return nil
	}
	sc.mu.Lock()
	sc.recvUnacked += n
	inc := sc.recvUnacked
	if inc < sc.srv.connWindow()/4 {
		sc.mu.Unlock()
		return nil
	}
	sc.recvUnacked = 0
	sc.recvWindow += inc
	sc.mu.Unlock()
	return sc.write(func() error { return sc.fr.WriteWindowUpdate(0, uint32(inc)) })
}

func (sc *serverConn) handleHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return protocolError("HEADERS on even stream %d", id)
	}
	sc.mu.Lock()
	if id <= sc.maxClientID {
		st := sc.streams[id]
		switch how := sc.closedHowLocked(id, st); {
		case how.ignored():
			sc.mu.Unlock()
			return nil // on its way before our RST_STREAM arrived
		case how == closedSkipped:
			last := sc.maxClientID
			sc.mu.Unlock()
			return protocolError("HEADERS opening stream %d after stream %d (§5.1.1)", id, last)
		case how != 0:
			sc.mu.Unlock()
			return &connError{http2.ErrCodeStreamClosed, fmt.Sprintf("HEADERS on closed stream %d", id)}
		}
	}
	if st := sc.streams[id]; st != nil {
		// Trailers: the request body ends here; their fields are not kept.
		sc.mu.Unlock()
		st.mu.Lock()
		ended := st.eof
		st.mu.Unlock()
		switch {
		case ended:
			// Half closed (remote): nothing but WINDOW_UPDATE, PRIORITY
			// and RST_STREAM may follow (§5.1).
			sc.streamError(id, http2.ErrCodeStreamClosed, errors.New("the client sent HEADERS after ending the stream"))
		case !f.StreamEnded():
			// Malformed (§8.1): a second header block must end the
			// stream. A stream error, as every malformed request is
			// (§8.1.1): the connection's other streams go on.
			sc.streamError(id, http2.ErrCodeProtocol, errors.New("trailers without END_STREAM"))
		case len(f.PseudoFields()) > 0:
			// Malformed (§8.1): pseudo-headers only open a request.
			sc.streamError(id, http2.ErrCodeProtocol, errors.New("a pseudo-header field in the trailers"))
		default:
			sc.peerEnded(st)
			if code, err := st.receive(nil, 0, true); err != nil {
				sc.streamError(id, code, err)
			}
		}
		return nil
	}
	sc.mu.Unlock()
	var handler http.Handler
	req, err := sc.newRequest(f)
	switch {
	case f.Truncated:
		req, err, handler = sc.tooLarge(), nil, http.HandlerFunc(headersTooLarge)
	case err == nil && f.HasPriority() && f.Priority.StreamDep == id:
		err = errors.New("the stream depends on itself (RFC 7540 §5.3.1)")
	case err == nil && f.StreamEnded() && req.ContentLength > 0:
		// Malformed: its DATA frames do not add up to it (§8.1.1).
		err = fmt.Errorf("content-length %d on a request without a body", req.ContentLength)
	}
	sc.mu.Lock()
	sc.maxClientID = id
	sc.lastActive = time.Now()
	max := sc.srv.maxStreams()
	refuse := sc.goingAway || sc.open >= max || uint32(len(sc.streams)) >= 2*max
	var st *stream
	if !refuse && err == nil {
		// In the same critical section as the GOAWAY check: a GOAWAY
		// naming this stream finds it open.
		st = sc.newStreamLocked(id, req, f.StreamEnded(), handler)
	}
	sc.mu.Unlock()
	switch {
	case refuse:
		sc.resetStream(id, http2.ErrCodeRefusedStream)
	case err != nil:
		sc.logf("stream %d: %v", id, err)
		sc.resetStream(id, http2.ErrCodeProtocol)
	default:
		sc.handlers.Add(1)
		go st.run()
	}
	return nil
}

// tooLarge is the request that stands for one whose header fields passed
// MaxHeaderListSize; headersTooLarge answers it.
func (sc *serverConn) tooLarge() *http.Request {
	return &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: http.Header{}, ContentLength: -1, RemoteAddr: sc.remote, RequestURI: "/", TLS: sc.tls}
}

func headersTooLarge(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "request header fields too large", http.StatusRequestHeaderFieldsTooLarge)
}

// peerEnded notes the client's END_STREAM on st; a stream whose handler
// is also done is forgotten.
func (sc *serverConn) peerEnded(st *stream) {
	sc.mu.Lock()
	st.peerDone = true
	sc.wireClosedLocked(st)
	sc.mu.Unlock()
}

// wireClosedLocked notes a stream closed on the wire (reset, or ended both
// ways): the client no longer counts it against MAX_CONCURRENT_STREAMS, so
// neither do we, though its handler may still be returning.
func (sc *serverConn) wireClosedLocked(st *stream) {
	if st.counted && (st.reset || (st.peerDone && st.localDone)) {
		st.counted = false
		sc.open--
	}
}

// resetStream writes RST_STREAM for id. A stream reset for the first
// time is closed by us from then on, for the frames still arriving on it.
func (sc *serverConn) resetStream(id uint32, code http2.ErrCode) {
	sc.mu.Lock()
	if st := sc.streams[id]; st != nil {
		if st.how == 0 {
			st.how = closedByUs
		}
	} else if id <= sc.maxClientID && sc.ended.how(id) == closedSkipped {
		sc.ended.remember(id, closedByUs) // refused, or malformed
	}
	sc.mu.Unlock()
	_ = sc.write(func() error { return sc.fr.WriteRSTStream(id, code) })
}

// streamError resets stream id with code and fails it if it is served.
func (sc *serverConn) streamError(id uint32, code http2.ErrCode, why error) {
	sc.mu.Lock()
	st := sc.streams[id]
	sc.mu.Unlock()
	sc.resetStream(id, code)
	if st != nil {
		st.abort(fmt.Errorf("h2: stream error: %w", why), false)
	}
}

// write runs fn (frame writes) under the write lock and flushes.
func (sc *serverConn) write(fn func() error) error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	return sc.writeLocked(fn)
}

func (sc *serverConn) writeLocked(fn func() error) error {
	sc.mu.Lock()
	err := sc.broken
	sc.mu.Unlock()
	if err != nil {
		return err
	}
	if err = fn(); err == nil {
		err = sc.bw.Flush()
	}
	if err != nil {
		sc.fail(err)
	}
	return err
}

// fail marks the connection broken (markBroken) and closes it, which
// unblocks a read loop still reading and any writer stuck in Write.
func (sc *serverConn) fail(err error) {
	sc.markBroken(err)
	_ = sc.nc.Close()
}

// markBroken makes every stream's body and writes fail and cancels their
// contexts. The first error is kept.
func (sc *serverConn) markBroken(err error) {
	if err == nil {
		err = io.EOF
	}
	sc.mu.Lock()
	if sc.broken == nil {
		sc.broken = fmt.Errorf("the HTTP/2 connection ended: %w", err)
	}
	streams := make([]*stream, 0, len(sc.streams))
	for _, st := range sc.streams {
		streams = append(streams, st)
	}
	sc.sendCond.Broadcast()
	broken := sc.broken
	sc.mu.Unlock()
	for _, st := range streams {
		st.abort(broken, true)
	}
}

// goAway sends GOAWAY with the last stream id taken; the connection closes
// when its streams are done (or at once, after a connection error).
func (sc *serverConn) goAway(code http2.ErrCode, why error) {
	sc.mu.Lock()
	sc.goingAway = true
	last := sc.maxClientID
	sc.mu.Unlock()
	var debug []byte
	if why != nil {
		sc.logf("closing the connection: %v", why)
		debug = []byte(why.Error())
	}
	if sc.write(func() error { return sc.fr.WriteGoAway(last, code, debug) }) == nil {
		sc.mu.Lock()
		sc.sentGoAway = true
		sc.mu.Unlock()
	}
	if code != http2.ErrCodeNo {
		return
	}
	if sc.closing() {
		sc.wakeReader() // nothing open: the connection ends now
	}
}

// goAwayWhenIdle is a response's Connection: close (st's): GOAWAY at once
// when no other stream is open on the connection, else when the last one
// ends (streamGone). Not earlier: restate-server 1.7.12 fails every
// stream of a connection that sends it a GOAWAY, NO_ERROR included
// ("stream closed because of a broken pipe"), so a drain's refusal would
// cut the invocations still running beside it, which the drain exists to
// let finish.
func (sc *serverConn) goAwayWhenIdle(st *stream) {
	sc.mu.Lock()
	others := len(sc.streams)
	if sc.streams[st.id] == st {
		others--
	}
	if others > 0 {
		sc.goAwayIdle = true
	}
	sc.mu.Unlock()
	if others == 0 {
		sc.goAway(http2.ErrCodeNo, nil)
	}
}

// streamGoneLocked is what the end of a stream (just forgotten) asks of
// the connection (sc.mu held): wake the reader of one going away with no
// stream left, or the GOAWAY a Connection: close put off (goAwayWhenIdle).
func (sc *serverConn) streamGoneLocked() (last, goAway bool) {
	if len(sc.streams) > 0 {
		return false, false
	}
	if sc.goingAway {
		return true, false
	}
	goAway, sc.goAwayIdle = sc.goAwayIdle, false
	return false, goAway
}

// closing reports a connection going away with no stream left.
func (sc *serverConn) closing() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.goingAway && len(sc.streams) == 0
}

// checkHealth runs every healthTick: it closes a connection idle past
// IdleTimeout, pings a silent one after PingAfter and closes it when the
// ping goes unanswered for PingTimeout.
func (sc *serverConn) checkHealth() {
	s := sc.srv
	n := sc.frames.Load()
	heard := n != sc.framesChecked
	sc.framesChecked = n
	sc.mu.Lock()
	if sc.broken != nil {
		sc.mu.Unlock()
		return
	}
	if heard {
		sc.silentFor, sc.pingOut, sc.stuckFor = 0, false, 0
	} else {
		sc.silentFor += healthTick
	}
	// Idle: no stream now, and none since IdleTimeout ago. Streams open
	// and close between two checks, so the check reads when the last one
	// ended rather than sampling whether one is open.
	idle := s.IdleTimeout > 0 && len(sc.streams) == 0 && time.Since(sc.lastActive) >= s.IdleTimeout
	ping := s.PingAfter > 0 && !sc.pingOut && sc.silentFor >= s.PingAfter
	dead := s.PingTimeout > 0 && ((sc.pingOut && sc.silentFor-sc.pingSentAt >= s.PingTimeout) || sc.stuckFor >= s.PingTimeout)
	sc.mu.Unlock()
	switch {
	case dead:
		sc.logf("no answer to a PING (or no write possible) in %v: closing the connection", s.PingTimeout)
		sc.fail(errors.New("ping timeout"))
		return
	case idle:
		sc.goAway(http2.ErrCodeNo, nil)
	case ping:
		// A writer stuck on a client that reads nothing holds the write
		// lock: then no PING goes out, and that counts as no answer.
		sent := sc.wmu.TryLock()
		if sent {
			_ = sc.writeLocked(func() error { return sc.fr.WritePing(false, [8]byte{'f', 'n', 'b', 'r', 'i', 'd', 'g', 'e'}) })
			sc.wmu.Unlock()
		}
		sc.mu.Lock()
		if sent {
			sc.pingOut, sc.pingSentAt, sc.stuckFor = true, sc.silentFor, 0
		} else {
			sc.stuckFor += healthTick
		}
		sc.mu.Unlock()
	}
	sc.health.Reset(healthTick)
}

// ServeConnPreface is ServeConn for a connection whose client preface is
// still to be read (TLS after ALPN), which it reads within timeout (zero:
// no bound). A connection that opens with anything else is closed (RFC
// 9113 §3.4) once what the client sent with it has been read, so that
// the client sees the connection end rather than a reset.
func (s *Server) ServeConnPreface(nc net.Conn, h http.Handler, timeout time.Duration) {
	if timeout > 0 {
		_ = nc.SetReadDeadline(time.Now().Add(timeout))
	}
	if err := readPreface(nc); err != nil {
		if errors.Is(err, errBadPreface) {
			s.logf(nc, "%v", err) // a connection that closed first is no news
		}
		lingerClose(nc)
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	s.ServeConn(nc, h)
}

func (s *Server) logf(nc net.Conn, format string, args ...any) {
	if s.Logf != nil {
		s.Logf("h2: %s: "+format, append([]any{nc.RemoteAddr().String()}, args...)...)
	}
}

// lingerClose stops writing to nc, reads what the client still sends for
// goAwayLinger, then closes it: closing a connection with unread data
// makes the kernel send a reset, which can destroy our last frames before
// the client read them.
func lingerClose(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = nc.SetReadDeadline(time.Now().Add(goAwayLinger))
	_, _ = io.Copy(io.Discard, nc)
	_ = nc.Close()
}

// readPreface reads the client preface from c.
func readPreface(c net.Conn) error {
	var buf [len(ClientPreface)]byte
	if _, err := io.ReadFull(c, buf[:]); err != nil {
		return err
	}
	if string(buf[:]) != ClientPreface {
		return errBadPreface
	}
	return nil
}

var errBadPreface = errors.New("the connection does not open with the HTTP/2 client preface")
