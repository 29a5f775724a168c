package restate

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// NewHTTPServer returns an http.Server for h that speaks HTTP/1.1 and
// cleartext HTTP/2 with prior knowledge (what restate-server uses), with
// timeouts that bound idle and header-reading clients but never cut a
// long-running invocation stream (no read or write timeout).
//
// Cleartext HTTP/2 connections read through a buffer: the HTTP/2 server
// reads every frame header and payload straight from the socket, two
// system calls per frame, which was the largest single CPU cost of an
// invocation; buffered, one read usually returns several frames.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		HTTP2: &http.HTTP2Config{
			// restate-server opens up to 128 streams per connection.
			MaxConcurrentStreams: 256,
			// Receive windows large enough that a 32 MiB message does not
			// stall on flow control round trips.
			MaxReceiveBufferPerConnection: 4 << 20,
			MaxReceiveBufferPerStream:     1 << 20,
			PingTimeout:                   15 * time.Second,
			SendPingTimeout:               time.Minute,
		},
	}
	bufferH2C(srv)
	return srv
}

// h2cKey is the TLSNextProto key through which net/http hands a cleartext
// HTTP/2 connection (preface already read) to the HTTP/2 server.
const h2cKey = "unencrypted_http2"

// h2cReadBuffer is the per-connection read buffer: a few dozen small
// frames, or the start of one large DATA frame (larger reads bypass it).
const h2cReadBuffer = 16 << 10

// bufferH2C installs the HTTP/2 server explicitly (golang.org/x/net/http2,
// which reads srv.HTTP2 for its settings) so the cleartext connection it
// is handed can be wrapped in a read buffer first. Should the hand-off key
// ever be missing, connections are served unbuffered.
func bufferH2C(srv *http.Server) {
	//lint:ignore SA1019 the only public way to get hold of the HTTP/2 server's connection hand-off, which we wrap; it configures srv (settings from srv.HTTP2, graceful shutdown) like net/http would.
	if err := http2.ConfigureServer(srv, &http2.Server{}); err != nil {
		return
	}
	serve, ok := srv.TLSNextProto[h2cKey]
	if !ok {
		return
	}
	srv.TLSNextProto[h2cKey] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		u, ok := c.NetConn().(unencryptedConn)
		if !ok {
			serve(hs, c, h)
			return
		}
		raw := u.UnencryptedNetConn()
		bc := &bufferedConn{Conn: raw, r: bufio.NewReaderSize(raw, h2cReadBuffer)}
		serve(hs, tls.Client(h2cConn{bc}, nil), h)
	}
}

// unencryptedConn is how net/http wraps a cleartext connection in the
// *tls.Conn that TLSNextProto functions take.
type unencryptedConn interface {
	net.Conn
	UnencryptedNetConn() net.Conn
}

// h2cConn carries a cleartext connection through a *tls.Conn to the
// HTTP/2 server, as net/http does.
type h2cConn struct{ net.Conn }

func (c h2cConn) UnencryptedNetConn() net.Conn { return c.Conn }

// bufferedConn reads through a buffer; everything else is the connection's.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
