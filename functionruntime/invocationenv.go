package functionruntime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
)

// MetadataEnv is the InvokeFunction metadata key of the per-invocation
// environment: each value is one NAME=VALUE, NAME from
// [InvocationEnvNames]. The worker exports them for that invocation only
// (its function and the processes it starts); the next invocation does not
// see them. It is binary metadata ("-bin": base64 on the wire, raw bytes in
// Go) because a value such as a virtual object key may be any UTF-8, which
// plain gRPC metadata cannot carry. The executor.v1 messages stay as the
// contract defines them.
const MetadataEnv = "fnbridge-env-bin"

// The names a per-invocation environment may set.
const (
	// EnvKey is the virtual object key or workflow id of a keyed
	// invocation (set, possibly empty, only for keyed services).
	EnvKey = "FNBRIDGE_KEY"
	// EnvTraceparent and EnvTracestate are the W3C trace context of the
	// invocation.
	EnvTraceparent = "TRACEPARENT"
	EnvTracestate  = "TRACESTATE"
)

// InvocationEnvNames is the fixed allow-list of per-invocation variables:
// nothing else may reach a worker this way, so a caller cannot change how
// the interpreter, the loader or the function's own configuration behave.
var InvocationEnvNames = []string{EnvKey, EnvTraceparent, EnvTracestate}

// MaxInvocationEnvValue bounds one per-invocation value in bytes.
const MaxInvocationEnvValue = 8192

// WithInvocationEnv returns ctx carrying NAME=VALUE as per-invocation
// environment in its outgoing metadata, for an InvokeFunction call.
func WithInvocationEnv(ctx context.Context, name, value string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MetadataEnv, name+"="+value)
}

// invocationEnvOf reads the per-invocation environment from the incoming
// metadata of an InvokeFunction call: nil when there is none; an error
// naming the problem for a name off the allow-list, a name given twice, or
// a value that is too long, not UTF-8 or holds a NUL byte.
func invocationEnvOf(ctx context.Context) (map[string]string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataEnv)
	if len(vals) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(vals))
	for _, kv := range vals {
		name, value, ok := strings.Cut(kv, "=")
		switch {
		case !ok || !slices.Contains(InvocationEnvNames, name):
			return nil, fmt.Errorf("%s value %q: want NAME=VALUE with NAME one of %s", MetadataEnv, clipName(kv), strings.Join(InvocationEnvNames, ", "))
		case dup(env, name):
			return nil, fmt.Errorf("%s sets %s more than once", MetadataEnv, name)
		case len(value) > MaxInvocationEnvValue:
			return nil, fmt.Errorf("%s: %s is %d bytes, at most %d allowed", MetadataEnv, name, len(value), MaxInvocationEnvValue)
		case !utf8.ValidString(value) || strings.ContainsRune(value, 0):
			return nil, fmt.Errorf("%s: %s must be UTF-8 without NUL bytes", MetadataEnv, name)
		}
		env[name] = value
	}
	return env, nil
}

func dup(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// clipName shortens a malformed metadata value for an error message.
func clipName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
