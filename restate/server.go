package restate

import (
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/restate/internal/h2"
)

// NewHTTPServer returns an http.Server for h that speaks HTTP/1.1 and
// cleartext HTTP/2 with prior knowledge (what restate-server uses), with
// timeouts that bound idle and header-reading clients but never cut a
// long-running invocation stream (no read or write timeout).
//
// HTTP/2 connections are served by the endpoint's own HTTP/2 server
// (restate/internal/h2), not net/http's: an invocation is a few small
// frames each way, and net/http's server hands every body read and every
// flush to other goroutines, which was most of an invocation's CPU. Ours
// reads each connection on one goroutine and lets the handler write its
// own frames.
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
	}
	if ep, ok := h.(*Endpoint); ok {
		// The server's own errors (accept failures, HTTP/2 connection
		// errors) go to the endpoint's log, in its format and level,
		// not to stderr as plain text.
		srv.ErrorLog = log.New(warnWriter{ep.cfg.Logger}, "", 0)
	}
	h2s := &h2.Server{
		// restate-server opens up to 128 streams per connection.
		MaxConcurrentStreams: 256,
		// Receive windows large enough that a 32 MiB message does not
		// stall on flow control round trips.
		ConnWindow:        4 << 20,
		StreamWindow:      1 << 20,
		MaxHeaderListSize: 1 << 20,
		IdleTimeout:       srv.IdleTimeout,
		PingAfter:         time.Minute,
		PingTimeout:       15 * time.Second,
		Logf:              func(format string, args ...any) { logHTTP2(srv, format, args...) },
	}
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		// Cleartext with prior knowledge: net/http read the preface and
		// hands the connection over inside a *tls.Conn that is no TLS.
		h2cKey: func(_ *http.Server, c *tls.Conn, h http.Handler) {
			u, ok := c.NetConn().(unencryptedConn)
			if !ok {
				_ = c.Close()
				return
			}
			h2s.ServeConn(u.UnencryptedNetConn(), h)
		},
		// TLS after ALPN (when the server is given a TLS config that
		// offers h2): the client's preface is still to be read.
		"h2": func(_ *http.Server, c *tls.Conn, h http.Handler) {
			h2s.ServeConnPreface(c, h, srv.ReadHeaderTimeout)
		},
	}
	srv.RegisterOnShutdown(h2s.Shutdown)
	return srv
}

// logHTTP2 reports the HTTP/2 server's connection errors and handler
// panics where net/http reports its own.
func logHTTP2(srv *http.Server, format string, args ...any) {
	if srv.ErrorLog != nil {
		srv.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// warnWriter logs each line written to it as a warning.
type warnWriter struct{ log zerolog.Logger }

func (w warnWriter) Write(p []byte) (int, error) {
	w.log.Warn().Str("component", "http server").Msg(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// h2cKey is the TLSNextProto key through which net/http hands a cleartext
// HTTP/2 connection (preface already read) to an HTTP/2 server.
const h2cKey = "unencrypted_http2"

// unencryptedConn is how net/http wraps a cleartext connection in the
// *tls.Conn that TLSNextProto functions take.
type unencryptedConn interface {
	net.Conn
	UnencryptedNetConn() net.Conn
}
