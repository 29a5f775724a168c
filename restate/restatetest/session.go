package restatetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// NewH2CClient returns an HTTP client that speaks cleartext HTTP/2 with
// prior knowledge, as restate-server does.
func NewH2CClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:           &p,
		MaxIdleConnsPerHost: 64,
		DialContext:         (&net.Dialer{}).DialContext,
		TLSClientConfig:     &tls.Config{},
		HTTP2:               &http.HTTP2Config{MaxConcurrentStreams: 1000},
	}}
}

// InvokeURL joins an endpoint base URL and a handler's invoke path.
func InvokeURL(base, service, handler string) string {
	return strings.TrimRight(base, "/") + "/invoke/" + service + "/" + handler
}

// ContentType is the invocation content type of protocol version v.
func ContentType(v int) string { return "application/vnd.restate.invocation.v" + strconv.Itoa(v) }

// Session is one invocation stream opened against an endpoint: frames are
// sent on a streaming request body while response frames are read
// concurrently, as in BIDI_STREAM mode.
type Session struct {
	pw      *io.PipeWriter
	respCh  chan result
	resp    *http.Response
	reader  *wire.Reader
	Version int
}

type result struct {
	resp *http.Response
	err  error
}

// Open starts a POST to url with content type and accept of protocol
// version, and returns immediately; Send writes frames, Next reads them.
func Open(ctx context.Context, client *http.Client, url string, version int) *Session {
	pr, pw := io.Pipe()
	s := &Session{pw: pw, respCh: make(chan result, 1), Version: version}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	if err != nil {
		s.respCh <- result{err: err}
		return s
	}
	// An HTTP/1.1 client waits for its body copy before reporting a
	// failed round trip; ending the body with ctx keeps that bounded.
	context.AfterFunc(ctx, func() { _ = pw.CloseWithError(ctx.Err()) })
	ct := ContentType(version)
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Accept", ct)
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			_ = pr.CloseWithError(err)
		}
		s.respCh <- result{resp, err}
	}()
	return s
}

// Send writes frames (proto messages or Out values) to the request body.
func (s *Session) Send(msgs ...any) error {
	b := Encode(msgs...)
	_, err := s.pw.Write(b)
	return err
}

// SendRaw writes bytes as they are, e.g. a partial frame.
func (s *Session) SendRaw(b []byte) error {
	_, err := s.pw.Write(b)
	return err
}

// CloseSend ends the request body, as the runtime does when it has nothing
// more to send.
func (s *Session) CloseSend() error { return s.pw.Close() }

// Response waits for the response headers.
func (s *Session) Response() (*http.Response, error) {
	if s.resp != nil {
		return s.resp, nil
	}
	r := <-s.respCh
	if r.err != nil {
		s.respCh <- r
		return nil, r.err
	}
	s.resp = r.resp
	s.reader = wire.NewReader(r.resp.Body, 0)
	return s.resp, nil
}

// Next reads the next response frame. It fails when the response is not
// 200 (the error quotes the status and body).
func (s *Session) Next() (Frame, error) {
	resp, err := s.Response()
	if err != nil {
		return Frame{}, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return Frame{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	h, p, err := s.reader.Next()
	if err != nil {
		return Frame{}, err
	}
	m, err := wire.Decode(h, p)
	if err != nil {
		return Frame{}, err
	}
	return Frame{Header: h, Message: m}, nil
}

// Read is one result of Next.
type Read struct {
	Frame Frame
	Err   error
}

// NextAsync reads the next response frame in a goroutine: a test can
// check that none arrives for a while, then take the one that does. The
// channel always gets the result, an error included, so a receive never
// waits for a frame that cannot come.
func (s *Session) NextAsync() <-chan Read {
	ch := make(chan Read, 1)
	go func() {
		f, err := s.Next()
		ch <- Read{f, err}
	}()
	return ch
}

// Close releases the stream.
func (s *Session) Close() {
	_ = s.pw.CloseWithError(errors.New("session closed"))
	if s.resp == nil {
		select {
		case r := <-s.respCh:
			s.resp = r.resp
		default:
		}
	}
	if s.resp != nil {
		_ = s.resp.Body.Close()
	}
}

// Play runs the runtime side of a BIDI_STREAM invocation: it sends start
// (the StartMessage and replayed entries), answers every run proposal like
// restate-server, and returns every frame the endpoint sent up to and
// including the terminal one. inject, when set, is called for each
// received frame and may return extra frames to send (e.g. a CANCEL).
func (s *Session) Play(start []any, inject func(Frame) []proto.Message) ([]Frame, error) {
	if err := s.Send(start...); err != nil {
		// A server that answered without reading the body (404, 401)
		// closed it: its answer says why.
		if _, rerr := s.Next(); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	var got []Frame
	for {
		f, err := s.Next()
		if err != nil {
			return got, err
		}
		got = append(got, f)
		if Terminal(f.Type()) {
			_ = s.CloseSend()
			return got, nil
		}
		var extra []any
		if inject != nil {
			for _, m := range inject(f) {
				extra = append(extra, m)
			}
		}
		if a, ok := Answer(f); ok {
			extra = append(extra, a)
		}
		if len(extra) > 0 {
			if err := s.Send(extra...); err != nil {
				return got, err
			}
		}
	}
}

// Message returns the frame's message as T, for assertions.
func Message[T proto.Message](f Frame) (T, bool) {
	m, ok := f.Message.(T)
	return m, ok
}
