package restate

import (
	"net/http"
	"time"
)

// NewHTTPServer returns an http.Server for h that speaks HTTP/1.1 and
// cleartext HTTP/2 with prior knowledge (what restate-server uses), with
// timeouts that bound idle and header-reading clients but never cut a
// long-running invocation stream (no read or write timeout).
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
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
}
