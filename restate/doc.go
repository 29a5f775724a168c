// Package restate is fnbridge's Restate service deployment endpoint: the
// HTTP handler restate-server invokes (POST {prefix}/invoke/{service}/
// {handler}, GET {prefix}/discover, GET {prefix}/health), protocol version
// negotiation (service protocol v5 to v7), request identity, both transport
// modes (BIDI_STREAM over h2c or full-duplex HTTP/1.1, and
// REQUEST_RESPONSE), and the small handler API the bridge programs against:
// a HandlerFunc receives a Context whose Run journals a side effect.
//
// Frames and the message type table live in restate/wire, the invocation
// state machine in package journal, the manifest in restate/discovery and
// request identity in restate/identity; this package wires them to
// net/http.
package restate
