package restatetest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
)

// Stream is one invocation stream served in memory: the handler's
// ServeHTTP runs on its own goroutine, reading a request body that Send
// feeds, under a request context the test may cancel (as when the
// connection drops or the server shuts down). Every frame the endpoint
// writes is kept, so a test sees exactly what the runtime would have.
type Stream struct {
	pw     *io.PipeWriter
	body   *watchedBody
	rec    *httptest.ResponseRecorder
	cancel context.CancelFunc
	done   chan struct{}
}

// ServeStream starts an HTTP/2 POST of path with the content type of
// protocol version against h and returns at once.
func ServeStream(h http.Handler, path string, version int) *Stream {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	body := &watchedBody{r: pr}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, body)
	req.Header.Set("Content-Type", ContentType(version))
	// As restate-server's h2c: full duplex without asking for it.
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	s := &Stream{pw: pw, body: body, rec: httptest.NewRecorder(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer pr.Close()
		h.ServeHTTP(s.rec, req)
	}()
	return s
}

// Send writes frames (proto messages or Out values) to the request body.
func (s *Stream) Send(msgs ...any) error {
	_, err := s.pw.Write(Encode(msgs...))
	return err
}

// CloseSend ends the request body.
func (s *Stream) CloseSend() error { return s.pw.Close() }

// Cancel cancels the request context.
func (s *Stream) Cancel() { s.cancel() }

// Done is closed once ServeHTTP has returned.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Wait waits for ServeHTTP to return and reports the response status,
// the frames written (for a 200) and the raw body.
func (s *Stream) Wait() (status int, frames []Frame, body []byte, err error) {
	<-s.done
	s.cancel()
	body = s.rec.Body.Bytes()
	if s.rec.Code != http.StatusOK {
		return s.rec.Code, nil, body, nil
	}
	frames, err = Decode(body)
	return s.rec.Code, frames, body, err
}

// Header is the response header, valid after Wait.
func (s *Stream) Header() http.Header { return s.rec.Result().Header }

// BodyRead reports whether the handler ever read the request body.
func (s *Stream) BodyRead() bool { return s.body.read.Load() }

// watchedBody records whether it was read.
type watchedBody struct {
	r    *io.PipeReader
	read atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.r.Read(p)
}

func (b *watchedBody) Close() error { return b.r.Close() }
