package restate

import (
	"github.com/fnbridge/fnbridge/restate/discovery"
	"github.com/rs/zerolog"
)

// ProtocolMode is the transport mode announced in the manifest.
type ProtocolMode = discovery.ProtocolMode

// The two transport modes.
const (
	// BidiStream streams both ways on one HTTP request (h2c, or full-duplex
	// HTTP/1.1). The default.
	BidiStream = discovery.BidiStream
	// RequestResponse reads the whole request body before answering; any
	// wait for a completion suspends the invocation.
	RequestResponse = discovery.RequestResponse
)

// Config configures an Endpoint. The zero value is usable: BIDI_STREAM,
// no prefix, 32 MiB messages, unsigned requests accepted, logs discarded.
type Config struct {
	// ProtocolMode defaults to BidiStream.
	ProtocolMode ProtocolMode
	// PathPrefix is stripped from request paths, e.g. "/restate".
	PathPrefix string
	// MaxMessageSize bounds one protocol message's payload (default 32 MiB,
	// restate-server's own default). Larger frames fail the attempt before
	// anything is allocated for them.
	MaxMessageSize int
	// IdentityKeys are restate-server request-identity public keys
	// ("publickeyv1_..."). When set, unsigned or badly signed requests get
	// 401; /health stays open.
	IdentityKeys []string
	// Logger receives endpoint logs.
	Logger zerolog.Logger
	// AfterRunJournaled, when set, is called after a run executed by this
	// attempt is durably recorded (ack or completion received) and before
	// the handler continues. A test hook: crash tests block here to kill
	// the process between a journaled run and the invocation's output.
	AfterRunJournaled func(invocationID, runName string)
}
