package restate

import (
	"time"

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

// Defaults of the Config bounds a zero field stands for.
const (
	// DefaultStartTimeout: restate-server writes the StartMessage and the
	// known journal as soon as it opens a stream, so a healthy runtime
	// needs moments; 30 s leaves room for a large journal on a slow link.
	DefaultStartTimeout = 30 * time.Second
	// DefaultMaxConcurrentInvocations is far above what one restate-server
	// node keeps in flight against one deployment, and low enough that the
	// endpoint's per-stream memory (goroutines, buffers) stays bounded.
	DefaultMaxConcurrentInvocations = 10000
	// DefaultMaxJournalFactor times MaxMessageSize is the default
	// MaxJournalBytes (128 MiB with 32 MiB messages): room for an input, a
	// run result and their entries each of the largest message size.
	DefaultMaxJournalFactor = 4
)

// Config configures an Endpoint. The zero value is usable: BIDI_STREAM,
// no prefix, 32 MiB messages, unsigned requests accepted, logs discarded,
// and the default bounds above.
type Config struct {
	// ProtocolMode defaults to BidiStream.
	ProtocolMode ProtocolMode
	// PathPrefix is stripped from request paths, e.g. "/restate".
	PathPrefix string
	// MaxMessageSize is the runtime's message size limit (default 32 MiB,
	// restate-server's own default). The endpoint sends payloads of up to
	// a 32nd less and reads payloads of up to a 32nd more (restate-server
	// adds room of its own to the limit); a larger frame fails the attempt
	// before anything is allocated for it, asking Restate to pause the
	// invocation, since every retry would bring it again.
	MaxMessageSize int
	// StartTimeout bounds how long after the request arrived the endpoint
	// waits for what the handler needs to start: the StartMessage and the
	// journal entries it announces (in REQUEST_RESPONSE, the whole request
	// body). Past it the attempt ends with ErrorMessage 571 and the stream
	// is closed. Zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// MaxConcurrentInvocations bounds the invocation streams served at
	// once. A stream over the bound is refused with 503 (and Retry-After)
	// before its body is read; restate-server retries the attempt by its
	// retry policy. A stream's slot is free again once its terminal
	// message (End, Suspension, Error) is written, since restate-server
	// may open the next stream as soon as it reads it. Zero means
	// DefaultMaxConcurrentInvocations.
	MaxConcurrentInvocations int
	// MaxJournalBytes bounds the journal one invocation attempt holds in
	// memory: the payloads of its StartMessage, replayed entries and
	// received notifications. An attempt over it fails with ErrorMessage
	// 571 asking Restate to pause the invocation (v7; a retry after
	// journal.PauseFallbackDelay before), since every retry would replay
	// the same journal. Zero means DefaultMaxJournalFactor times
	// MaxMessageSize.
	MaxJournalBytes int
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
	// OnRefused, when set, is called with one of [RefusalReasons] for each
	// request answered before any handler ran: what an operator watches
	// for saturation, a drain, or requests restate-server did not sign.
	// It is called on the request's goroutine and must not block.
	OnRefused func(reason string)
}

// Why a request was refused before any handler ran, as Config.OnRefused
// reports it.
const (
	// RefusedUnauthenticated: a request (discovery or invoke) without a
	// valid restate-server signature, answered 401.
	RefusedUnauthenticated = "unauthenticated"
	// RefusedDraining: an invocation stream while the endpoint drains,
	// answered 503 with Retry-After.
	RefusedDraining = "draining"
	// RefusedConcurrencyLimit: an invocation stream over
	// MaxConcurrentInvocations, answered 503 with Retry-After.
	RefusedConcurrencyLimit = "concurrency_limit"
	// RefusedBeforeStart: an invocation stream that failed before its
	// handler could start: a protocol version this endpoint does not speak
	// (415), or no StartMessage and journal within StartTimeout, a journal
	// over MaxJournalBytes, a malformed or cut frame (ErrorMessage 571).
	RefusedBeforeStart = "failed_before_start"
	// RefusedUnknownHandler: an invocation stream for a service or handler
	// this endpoint does not serve, answered 404. restate-server retries
	// it while the registered deployment still names the handler, as
	// after a redeploy or reload that removed it with invocations pinned.
	RefusedUnknownHandler = "unknown_handler"
)

// RefusalReasons are every reason Config.OnRefused reports, in a fixed
// order.
var RefusalReasons = []string{RefusedUnauthenticated, RefusedDraining, RefusedConcurrencyLimit, RefusedBeforeStart, RefusedUnknownHandler}

// refused reports reason to Config.OnRefused, when set.
func (e *Endpoint) refused(reason string) {
	if f := e.cfg.OnRefused; f != nil {
		f(reason)
	}
}
