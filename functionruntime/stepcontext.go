package functionruntime

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
)

// DeclareContextCommand records that the running executable is the
// fnbridge command of Bash workers when it is started under that name (the
// bridge's main dispatches on os.Args[0]). Adapters then put it on their
// workers' PATH whatever the executable itself is called; without the
// declaration only an executable named bridge or fnbridge is taken. Call
// it before the first adapter is built.
func DeclareContextCommand() { proc.DeclareContextCommand() }

// gRPC metadata keys on InvokeFunction that give a handler with durable
// steps its context endpoint; both are absent for a plain function.
const (
	// MetadataContext is the context endpoint: unix:///abs/path or
	// tcp://host:port.
	MetadataContext = "fnbridge-context"
	// MetadataContextToken is the attempt's bearer token.
	MetadataContextToken = "fnbridge-context-token"
	// MetadataContextFresh, "true", says the attempt replays nothing:
	// every run step it starts executes. A worker may then run a step's
	// closure without waiting for the answer to its run/start (see
	// bridge/stepctx, "Pipelined steps"). Absent: the worker waits.
	MetadataContextFresh = "fnbridge-context-fresh"
	// MetadataContextOrdered, "true", says the context endpoint orders
	// a step's children after its start sent ahead: a worker may number
	// those starts ("ahead") and tell the children (see bridge/stepctx,
	// EnvAfter). Absent (an older bridge, which would refuse the number):
	// it does neither.
	MetadataContextOrdered = "fnbridge-context-ordered"
)

// AttemptEndedType is the HandlerError.Type of an invocation whose step
// context ended the attempt (it suspended, a step failed, the journal
// could not go on) before the function returned: the function's result,
// if any, is discarded, and the error is retryable.
const AttemptEndedType = "fnbridge.Suspended"

// maxContextMetadata bounds each of the two metadata values.
const maxContextMetadata = 1024

// StepContext is how the function of one invocation attempt reaches its
// durable-steps context endpoint.
type StepContext struct {
	Address string // unix:///abs/path or tcp://host:port
	Token   string
	// Fresh: the attempt replays nothing (MetadataContextFresh).
	Fresh bool
	// Ordered: the endpoint takes numbered starts sent ahead
	// (MetadataContextOrdered).
	Ordered bool
}

// stepContextOf reads the step context from the metadata of an
// InvokeFunction call, from its incoming metadata (the in-process client
// turns the caller's outgoing metadata into incoming, as gRPC does). It
// returns nil when neither key is set.
func stepContextOf(ctx context.Context) (*StepContext, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	addrs, tokens := md.Get(MetadataContext), md.Get(MetadataContextToken)
	if len(addrs) == 0 && len(tokens) == 0 {
		return nil, nil
	}
	if len(addrs) != 1 || len(tokens) != 1 {
		return nil, fmt.Errorf("want exactly one %s and one %s, got %d and %d values",
			MetadataContext, MetadataContextToken, len(addrs), len(tokens))
	}
	sc := &StepContext{Address: addrs[0], Token: tokens[0]}
	if err := checkStepContext(sc); err != nil {
		return nil, err
	}
	var err error
	if sc.Fresh, err = flagOf(md, MetadataContextFresh); err != nil {
		return nil, err
	}
	if sc.Ordered, err = flagOf(md, MetadataContextOrdered); err != nil {
		return nil, err
	}
	return sc, nil
}

// flagOf reads the metadata key, a flag: absent, or "true" once.
func flagOf(md metadata.MD, key string) (bool, error) {
	switch v := md.Get(key); {
	case len(v) == 0:
		return false, nil
	case len(v) == 1 && v[0] == "true":
		return true, nil
	default:
		return false, fmt.Errorf("%s must be given at most once, as \"true\", got %q", key, v)
	}
}

func checkStepContext(sc *StepContext) error {
	for _, v := range []struct{ key, val string }{{MetadataContext, sc.Address}, {MetadataContextToken, sc.Token}} {
		if v.val == "" || len(v.val) > maxContextMetadata || !utf8.ValidString(v.val) || strings.ContainsFunc(v.val, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return fmt.Errorf("%s must be 1 to %d bytes of printable UTF-8 without spaces", v.key, maxContextMetadata)
		}
	}
	switch {
	case strings.HasPrefix(sc.Address, "unix://"):
		if !filepath.IsAbs(strings.TrimPrefix(sc.Address, "unix://")) {
			return fmt.Errorf("%s %q: want unix:///absolute/path", MetadataContext, sc.Address)
		}
	case strings.HasPrefix(sc.Address, "tcp://"):
		host := strings.TrimPrefix(sc.Address, "tcp://")
		if i := strings.LastIndexByte(host, ':'); i <= 0 || i == len(host)-1 {
			return fmt.Errorf("%s %q: want tcp://host:port", MetadataContext, sc.Address)
		}
	default:
		return fmt.Errorf("%s %q: want unix:///absolute/path or tcp://host:port", MetadataContext, sc.Address)
	}
	return nil
}
