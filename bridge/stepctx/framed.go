package stepctx

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// FramedPreface opens a framed connection: the client sends it, then the
// attempt's token and "\n", once; every request after that is one frame.
// An HTTP request never starts with it, so both protocols share a
// listener.
const FramedPreface = "FNBRIDGE/1 "

// maxFramedToken bounds the preface's token line.
const maxFramedToken = 512

// maxKeptFrame is the largest request buffer a framed connection keeps
// for its next frame; a larger one (a big value) is dropped after use.
const maxKeptFrame = 64 << 10

// prefaceTimeout bounds how long an accepted connection may take to show
// which protocol it speaks (and, framed, to send its token).
const prefaceTimeout = 10 * time.Second

// waitingOps are the operations that may wait on Restate: while one is
// served, a framed connection is watched so that a client that hangs up
// ends the wait (as an HTTP request's context does).
var waitingOps = map[string]bool{"sleep": true, "call": true, "await": true, "promise/get": true}

// framedRoutes are routes keyed by operation name ("run/start").
var framedRoutes = func() map[string]opFunc {
	m := make(map[string]opFunc, len(routes))
	for r, op := range routes {
		m[strings.TrimPrefix(r, "/v1/")] = op
	}
	return m
}()

// connListener hands the connections that speak HTTP to the http.Server.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// sniffedConn is a connection whose first bytes were read into r.
type sniffedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *sniffedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Serve serves both protocols on l until Shutdown: HTTP/1.1, and framed
// connections (FramedPreface). Like http.Server.Serve it returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(l net.Listener) error {
	hl := &connListener{addr: l.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		l.Close()
		return http.ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		_ = s.srv.Serve(hl)
	}()
	defer func() {
		hl.Close()
		<-httpDone
	}()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			if !closing && !acceptRetryable(err) {
				delete(s.listeners, l)
			}
			s.mu.Unlock()
			if closing {
				return http.ErrServerClosed
			}
			if acceptRetryable(err) {
				// Out of descriptors or buffers for a moment (a burst of
				// connections, a leak elsewhere): keep the listener and
				// try again, as http.Server does; returning would leave
				// every function's connection waiting in the backlog.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		cc, ok := s.admit(c)
		if !ok {
			c.Close() // at MaxConns, none to shed
			s.fullLog.Warn().Int("max_conns", s.maxConns).Str("remote", c.RemoteAddr().String()).
				Msg("the durable-steps context endpoint is at its connection bound, with no connection to shed (each showed a live attempt's token or is new): a new one was closed (logged a few times in 10 s)")
			continue
		}
		go s.sniff(cc, hl)
	}
}

// connKey is the context key of the connection an HTTP request came on.
type connKey struct{}

// unprovenGrace is how long a new connection has to show a live token
// before admit may shed it: a function's client sends its token at once,
// so a flood of new connections cannot shed it before it could.
var unprovenGrace atomic.Int64

func init() { unprovenGrace.Store(int64(time.Second)) }

// admit counts a new connection in. At MaxConns it closes the oldest
// connection that has not shown a live token within unprovenGrace to make
// room, and refuses c when there is none.
func (s *Server) admit(c net.Conn) (*countedConn, bool) {
	for s.conns.Add(1) > int64(s.maxConns) {
		s.conns.Add(-1)
		s.pmu.Lock()
		e := s.unproven.Front() // the oldest
		var victim *countedConn
		if e != nil && time.Since(e.Value.(*countedConn).since) >= time.Duration(unprovenGrace.Load()) {
			victim = s.unproven.Remove(e).(*countedConn)
			victim.elem = nil
		}
		s.pmu.Unlock()
		if victim == nil {
			return nil, false
		}
		victim.Close()
	}
	cc := &countedConn{Conn: c, s: s, since: time.Now()}
	s.pmu.Lock()
	cc.elem = s.unproven.PushBack(cc)
	s.pmu.Unlock()
	return cc, true
}

// prove marks c (a *countedConn) as having shown a live attempt's token:
// admit no longer sheds it.
func (s *Server) prove(c net.Conn) {
	cc, ok := c.(*countedConn)
	if !ok {
		return
	}
	s.pmu.Lock()
	if cc.elem != nil {
		s.unproven.Remove(cc.elem)
		cc.elem = nil
	}
	s.pmu.Unlock()
}

// countedConn is an admitted connection: its first Close counts it out,
// whichever protocol served it.
type countedConn struct {
	net.Conn
	s    *Server
	once sync.Once
	elem *list.Element // in s.unproven until proven or closed; under s.pmu
	// since is when it was admitted.
	since time.Time
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.s.prove(c) // out of the unproven list
		c.s.conns.Add(-1)
	})
	return c.Conn.Close()
}

// acceptRetryable reports whether an Accept error is a passing shortage
// or a connection that went away before it was accepted, not a listener
// that stopped working.
func acceptRetryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sniff tells a framed connection from an HTTP one by its first bytes.
func (s *Server) sniff(c net.Conn, hl *connListener) {
	_ = c.SetReadDeadline(time.Now().Add(prefaceTimeout))
	br := bufio.NewReaderSize(c, 16<<10)
	head, err := br.Peek(len(FramedPreface))
	if err != nil && len(head) == 0 {
		c.Close()
		return
	}
	if string(head) == FramedPreface {
		s.serveFramed(c, br)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	select {
	case hl.conns <- &sniffedConn{Conn: c, r: br}:
	case <-hl.done:
		c.Close()
	}
}

// Shutdown stops Serve: listeners close, in-flight requests finish or are
// cut at ctx's deadline. Attempts are not closed by it.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for l := range s.listeners {
		l.Close()
	}
	for fc := range s.framed {
		fc.closeIfIdle()
	}
	s.mu.Unlock()
	err := s.srv.Shutdown(ctx)
	for {
		s.mu.Lock()
		n := len(s.framed)
		for fc := range s.framed {
			if ctx.Err() != nil {
				fc.forceClose()
			} else {
				fc.closeIfIdle()
			}
		}
		s.mu.Unlock()
		if n == 0 {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// framedIdle is how long a framed connection stays open once the attempt
// of its token has ended, for the client's next preface; then it is
// closed, so a worker that goes idle does not hold it. A time.Duration,
// atomic: a test sets it while connections of earlier tests wind down.
var framedIdle atomic.Int64

func init() { framedIdle.Store(int64(5 * time.Second)) }

// framedConn is one framed connection being served.
type framedConn struct {
	c    net.Conn
	mu   sync.Mutex
	busy bool // a request is being served
	shut bool // closed by Shutdown
	// gen counts the connection's tokens; idle is set once the attempt of
	// token gen ended (the connection waits for another preface), until
	// when: requests with the ended token do not extend it.
	gen   int
	idle  bool
	until time.Time
	// runs are the attempts where the connection started a run (maybe
	// completed since); only the connection's own goroutine touches it.
	runs map[*Attempt]struct{}
	// lastStart is the handle of the run the connection's latest run/start
	// executed ("" when that start was refused or recorded): the only run
	// a run/complete without a handle may complete.
	lastStart string
	// after is the "ahead" of the start its client's parent sent before
	// starting it (the preface's after=k; 0: none): requests wait for it.
	after uint64
	// completeNext: the request served is followed by a whole run/complete
	// already read (a pipelined step whose closure has run).
	completeNext bool
}

// started records that fc started a run of a, forgetting the attempts
// that ended: a worker's connection serves attempt after attempt.
func (fc *framedConn) started(a *Attempt) {
	if fc.runs == nil {
		fc.runs = map[*Attempt]struct{}{}
	}
	for x := range fc.runs {
		if x.Err() != nil {
			delete(fc.runs, x)
		}
	}
	fc.runs[a] = struct{}{}
}

// abandonRuns fails the runs fc started and left open, once it closed:
// no outcome can come for them. Not after Shutdown, which closed it
// rather than the client.
func (fc *framedConn) abandonRuns() {
	fc.mu.Lock()
	shut := fc.shut
	fc.mu.Unlock()
	if shut {
		return
	}
	for a := range fc.runs {
		a.abandon(fc)
	}
}

// track makes fc wait for the attempt of token (key): the connection
// goes idle when it ends, or at once when no open attempt has the token.
// It returns what stops the watch.
func (s *Server) track(fc *framedConn, key [32]byte) func() bool {
	fc.mu.Lock()
	fc.gen++
	gen := fc.gen
	fc.idle, fc.until = false, time.Time{}
	_ = fc.c.SetReadDeadline(time.Time{})
	_ = fc.c.SetWriteDeadline(time.Time{})
	fc.mu.Unlock()
	a, _, _ := s.lookupKey(key)
	if a == nil {
		fc.goIdle(gen)
		return func() bool { return false }
	}
	s.prove(fc.c)
	return context.AfterFunc(a.ctx, func() { fc.goIdle(gen) })
}

// goIdle starts the idle time of token gen, unless another preface came
// since; a request being served arms the read deadline when it is
// answered. The write deadline is armed at once: an answer the client
// does not read is cut then too.
func (fc *framedConn) goIdle(gen int) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.gen != gen {
		return
	}
	fc.idle, fc.until = true, time.Now().Add(time.Duration(framedIdle.Load()))
	_ = fc.c.SetWriteDeadline(fc.until)
	if !fc.busy {
		_ = fc.c.SetReadDeadline(fc.until)
	}
}

// forceClose closes the connection, served or not (Shutdown's deadline).
func (fc *framedConn) forceClose() {
	fc.mu.Lock()
	fc.shut = true
	fc.mu.Unlock()
	fc.c.Close()
}

// closeIfIdle closes the connection unless a request is being served; it
// is then closed after its answer.
func (fc *framedConn) closeIfIdle() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.shut = true
	if !fc.busy {
		fc.c.Close()
	}
}

// setBusy marks a request served (or not); false after Shutdown. An idle
// connection's deadline is set again after a request (a wait's hang-up
// watch clears it), at the same time: a client cannot keep a connection
// whose attempt ended by sending requests.
func (fc *framedConn) setBusy(b bool) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.busy = b
	if !b && fc.idle {
		_ = fc.c.SetReadDeadline(fc.until)
	}
	return !fc.shut
}

// serveFramed serves a framed connection. Its frames are a 4-byte
// big-endian length, then that many bytes: a request is "<operation>\n"
// and its JSON body, an answer "<status>\n" and its JSON body. Requests
// of a connection are served in order, one at a time.
func (s *Server) serveFramed(c net.Conn, br *bufio.Reader) {
	defer c.Close()
	fc := &framedConn{c: c}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.framed[fc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.framed, fc)
		s.mu.Unlock()
	}()
	// Runs first (defers run last first): whoever sees the connection
	// gone (Shutdown, a test) finds its runs failed.
	defer fc.abandonRuns()
	if _, err := br.Discard(len(FramedPreface)); err != nil {
		return
	}
	line, err := br.ReadSlice('\n')
	token, after, bad := prefaceToken(line, err)
	if bad != "" {
		refusePreface(c, bad)
		return
	}
	fc.after = after
	key := sha256.Sum256([]byte(token))
	stop := s.track(fc, key) // clears the preface's deadline
	defer func() { stop() }()
	var out, frame []byte
	var hdr [4]byte
	// held: out is the answer of a numbered run/start, not written yet. Its
	// client reads it only after sending its next request (see "Pipelined
	// steps"), so it goes out with that request's answer, in one write: the
	// client wakes once for the two, not once for each. A connection that
	// ends first (the client closed its side, a read failed) writes it
	// then, bounded, as the client may not read; Shutdown closes the
	// connection without it, leaving the client to find the endpoint gone
	// at its next request, as it would a moment later anyway.
	held := false
	defer func() {
		if held {
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(out)
		}
	}()
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		if !fc.setBusy(true) {
			return
		}
		n := int64(binary.BigEndian.Uint32(hdr[:]))
		if string(hdr[:]) == FramedPreface[:4] && n > s.maxBody+64 {
			if held {
				// A client moves on with every answer read; one that did
				// not gets what it is owed first.
				held = false
				if _, err := c.Write(out); err != nil {
					return
				}
			}
			// A preface again ("FNBR" read as a length is over any body
			// limit): the connection moves to another attempt, the
			// client's next, and speaks for it alone from now on.
			line, err := br.ReadSlice('\n')
			if !bytes.HasPrefix(line, []byte(FramedPreface[4:])) {
				refusePreface(c, "a frame starting \"FNBR\" that is no preface")
				return
			}
			t, after, bad := prefaceToken(line[len(FramedPreface)-4:], err)
			if bad != "" {
				refusePreface(c, bad)
				return
			}
			token, fc.after = t, after
			key = sha256.Sum256([]byte(token))
			stop()
			stop = s.track(fc, key)
			if !fc.setBusy(false) {
				return
			}
			continue
		}
		var status int
		var v any
		var hold bool // see held
		fc.completeNext = false
		switch {
		case n > s.maxBody+64:
			if _, err := io.CopyN(io.Discard, br, n); err != nil {
				return
			}
			status, v = s.frameTooLarge(token, key, n)
		case n > maxUnheldFrame && !s.live(key):
			// No open attempt has the token, so the answer depends on the
			// operation's name and the token alone: the body is read
			// past, never buffered, and a connection without a live
			// token cannot make the server hold maxBody bytes.
			head := make([]byte, maxUnheldFrame)
			if _, err := io.ReadFull(br, head); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, br, n-maxUnheldFrame); err != nil {
				return
			}
			status, v = s.serveFrame(fc, br, token, key, head)
		default:
			// One buffer per connection serves every frame: operations copy
			// what they keep (see serveFrame). A large one is not kept.
			if int64(cap(frame)) < n {
				frame = make([]byte, n)
			}
			frame = frame[:n]
			if _, err := io.ReadFull(br, frame); err != nil {
				return
			}
			fc.completeNext = completionBuffered(br)
			status, v = s.serveFrame(fc, br, token, key, frame)
			hold = fc.numberedStart(frame) > 0
			if cap(frame) > maxKeptFrame {
				frame = nil
			}
		}
		if !held {
			out = out[:0]
		}
		out = appendAnswer(out, status, v)
		// Held only when small (a numbered start is answered "execute" or
		// refused), and never two: a client that numbers starts reads
		// each answer before its next start.
		if hold && !held && len(out) <= maxHeldAnswer {
			held = true
		} else {
			held = false
			if _, err := c.Write(out); err != nil {
				return
			}
			if cap(out) > maxKeptFrame {
				out = nil // a large answer (a value) is not kept either
			}
		}
		if !fc.setBusy(false) {
			return
		}
	}
}

// prefaceToken is the token of a preface's line (after FramedPreface) as
// ReadSlice returned it, and the start its requests wait for (" after=k"
// after the token, EnvAfter; 0: none), or what is wrong with the line. An
// empty token is served (every request is then answered 401).
func prefaceToken(line []byte, err error) (string, uint64, string) {
	switch {
	case len(line) > maxFramedToken:
		return "", 0, fmt.Sprintf("the token line is longer than %d bytes", maxFramedToken)
	case err != nil:
		return "", 0, "the token line does not end with \"\\n\" (" + err.Error() + ")"
	}
	token := strings.TrimSuffix(string(line), "\n")
	var after uint64
	if t, k, ok := strings.Cut(token, " after="); ok {
		n, err := strconv.ParseUint(k, 10, 64)
		if err != nil || n == 0 {
			return "", 0, fmt.Sprintf("after=%q is not a start's ahead number (1 or more)", k)
		}
		token, after = t, n
	}
	if token != "" {
		if err := checkToken(token); err != nil {
			return "", 0, strings.TrimPrefix(err.Error(), "stepctx: ")
		}
	}
	return token, after, ""
}

// refusePreface answers a malformed preface with one 400 frame, before
// the connection closes, so the client learns why.
func refusePreface(c net.Conn, why string) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(appendAnswer(nil, http.StatusBadRequest, errorResponse{Error: "malformed framed preface: " + why + "; a connection starts with \"" + FramedPreface + "<token>\\n\", the token from " + EnvToken}))
}

// maxHeldAnswer bounds an answer serveFramed holds for the next one.
const maxHeldAnswer = 4 << 10

// maxUnheldFrame is how much of a frame is read for a token no open
// attempt has: enough for the operation's name.
const maxUnheldFrame = 512

// live reports whether an open attempt, not ended, has the token of key.
func (s *Server) live(key [32]byte) bool {
	a, _, _ := s.lookupKey(key)
	return a != nil && a.Err() == nil
}

// serveFrame serves one request frame. The frame's buffer is reused for
// the next one, so nothing may keep a slice of it: decoding copies.
func (s *Server) serveFrame(fc *framedConn, br *bufio.Reader, token string, key [32]byte, frame []byte) (int, any) {
	name, body, _ := bytes.Cut(frame, []byte{'\n'})
	if n := string(name); n != "run/complete" && n != "invocation-id" {
		// Any other request ends what a completion without a handle may
		// mean, refused or not (a run/start refused before it is served
		// included): only a run/start that executes sets it again.
		fc.lastStart = ""
	}
	op, ok := framedRoutes[string(name)]
	if !ok {
		return errorAnswer(&apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no fnbridge context operation %q (this bridge speaks protocol v1)", name)})
	}
	if token == "" {
		return errorAnswer(&apiError{status: http.StatusUnauthorized, msg: "missing token: a framed fnbridge context connection starts with \"" + FramedPreface + "<token>\\n\", the token from " + EnvToken})
	}
	a, status, msg := s.lookupKey(key)
	if a == nil {
		return errorAnswer(&apiError{status: status, msg: msg})
	}
	if err := a.Err(); err != nil {
		return errorAnswer(endedError(err))
	}
	if fc.after > 0 && !a.waitAhead(fc.after) {
		// A child of a step's function: not before that step's start,
		// which did not come (its sender's connection broke before the
		// endpoint read it, and it may yet be sent again): served now,
		// its call could be journaled ahead of the step.
		return errorAnswer(&apiError{status: http.StatusConflict, msg: fmt.Sprintf(
			"the step this process was started in (start %d of the attempt) did not reach the bridge within %s: "+
				"its calls cannot be ordered after that step, so none is made", fc.after, aheadWait)})
	}
	ctx := context.Background()
	if waitingOps[string(name)] {
		var stop func()
		ctx, stop = watchHangUp(fc.c, br)
		defer stop()
	}
	status, v := a.serveOp(ctx, op, body, fc)
	if k := fc.numberedStart(frame); k > 0 {
		// Served, whatever its outcome: a child waiting for it goes on.
		a.noteAhead(k)
	}
	return status, v
}

// numberedStart is the "ahead" of frame when it is a run/start its
// sender numbered (0: none). A child's own start numbers none of its
// parent's, so a connection with after set has none.
func (fc *framedConn) numberedStart(frame []byte) uint64 {
	const op = "run/start\n"
	if fc.after != 0 || !bytes.HasPrefix(frame, []byte(op)) {
		return 0
	}
	return aheadOf(frame[len(op):])
}

// completionBuffered says whether br holds a whole run/complete frame
// next, read already: the closure of the run/start before it has run.
func completionBuffered(br *bufio.Reader) bool {
	const op = "run/complete\n"
	if br.Buffered() < 4+len(op) {
		return false
	}
	b, _ := br.Peek(4 + len(op))
	return string(b[4:]) == op && 4+int(binary.BigEndian.Uint32(b)) <= br.Buffered()
}

// aheadOf is a run/start body's "ahead" (0: none), read without decoding
// the body: the start of a pipelined step (see EnvAfter).
func aheadOf(body []byte) uint64 {
	const key = `,"ahead":`
	i := bytes.LastIndex(body, []byte(key))
	if i < 0 {
		return 0
	}
	var k uint64
	for j, c := range body[i+len(key):] {
		if c < '0' || c > '9' || j == 18 {
			break
		}
		k = k*10 + uint64(c-'0')
	}
	return k
}

// frameTooLarge answers a frame of n bytes, over the body limit: the
// attempt of the token decides (Attempt.tooLarge) when there is one.
func (s *Server) frameTooLarge(token string, key [32]byte, n int64) (int, any) {
	if token != "" {
		if a, _, _ := s.lookupKey(key); a != nil {
			return errorAnswer(a.tooLarge(n, s.maxBody))
		}
	}
	return errorAnswer(&apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body exceeds %d bytes", s.maxBody)})
}

// watchHangUp returns a context that ends when the client closes c while
// a request waits; stop ends the watch, leaving any bytes the client sent
// meanwhile (a pipelined request) in br.
func watchHangUp(c net.Conn, br *bufio.Reader) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := br.Peek(1); err != nil {
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				cancel()
			}
		}
	}()
	return ctx, func() {
		_ = c.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = c.SetReadDeadline(time.Time{})
		cancel()
	}
}

// appendAnswer appends the answer frame of status and v to b.
func appendAnswer(b []byte, status int, v any) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, '\n')
	body, err := json.Marshal(v)
	if err != nil {
		b = b[:at+4]
		b = strconv.AppendInt(b, http.StatusInternalServerError, 10)
		b = append(b, '\n')
		body, _ = json.Marshal(errorResponse{Error: "encoding the response: " + err.Error()})
	}
	b = append(b, body...)
	binary.BigEndian.PutUint32(b[at:at+4], uint32(len(b)-at-4))
	return b
}
