// Package h2 owns the endpoint's HTTP/2 server: it serves HTTP/2
// connections (cleartext with prior knowledge, what restate-server uses,
// and TLS after ALPN) for an http.Handler.
//
// It exists for cost, not features. An invocation stream is a handful of
// small frames each way, and golang.org/x/net/http2's server hands every
// request body read and every flush to its connection goroutine, which
// starts a goroutine per write: through restate-server that machinery was
// most of an invocation's CPU. Here one goroutine reads each connection
// and routes frames to streams, and a handler writes its own frames under
// the connection's write lock, so a flush is one system call from the
// handler's goroutine and the response headers travel with the first
// data. Framing and header compression are golang.org/x/net/http2's
// Framer and hpack.
//
// What it serves: requests with bodies both ways, full duplex (a handler
// may write while the request body is still arriving), flow control both
// ways, PING, RST_STREAM and GOAWAY, graceful shutdown, read deadlines
// through http.ResponseController, and http.Flusher. What it leaves out,
// because the invocation protocol has no use for them: trailers (read and
// dropped), server push, priorities (ignored, beyond refusing a stream
// that depends on itself), the Expect header, and the h2c upgrade from
// HTTP/1.1 (restate-server speaks prior knowledge). Whatever a client
// sends, the answer is the one RFC 9113 prescribes: h2spec, the HTTP/2
// conformance suite, passes in full (TestH2specConformance).
package h2
