package restate

import (
	"context"
	"time"

	"github.com/fnbridge/fnbridge/restate/discovery"
)

// HandlerFunc implements one Restate handler. input is the invocation's
// payload; the returned bytes are its output. Return a *TerminalError to
// end the invocation with a failure, a *RetryableError (or any other
// error) to fail the attempt and let Restate retry it.
type HandlerFunc func(ctx Context, input []byte) ([]byte, error)

// Context is what a HandlerFunc gets for one invocation attempt.
type Context interface {
	// Context is done when the runtime cancels the invocation (CANCEL
	// signal; context.Cause is ErrCancelled) or the attempt's stream ends.
	// Ended without CANCEL, the attempt journals nothing more: whatever Run
	// or the handler returns afterwards is neither proposed nor output.
	context.Context
	// InvocationID is the printable invocation id (inv_...).
	InvocationID() string
	// Key is the virtual object or workflow key; empty for services.
	Key() string
	// Headers are the headers the invocation was sent with.
	Headers() map[string]string
	// Run executes fn at most once per successful journal record: if the
	// journal already holds the run's result, Run returns it (value, or a
	// *TerminalError) without calling fn. Otherwise fn runs, its result is
	// proposed to the runtime and Run returns once it is durable. A
	// non-terminal error from fn fails the attempt (nothing is recorded,
	// so fn runs again on the retry) and Run returns ErrAttemptEnded, as it
	// does when the invocation must suspend. Runs must be issued in the
	// same order, with the same names, on every attempt.
	Run(name string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error)
}

// RetryPolicy is the runtime-side retry policy of a handler.
type RetryPolicy = discovery.RetryPolicy

// Service is a named group of handlers, served as a Restate SERVICE.
type Service struct {
	// Name must match ^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9._-]*$.
	Name          string
	Documentation string
	Metadata      map[string]string
	Handlers      []Handler
}

// Handler is one handler of a Service. Zero durations and a nil
// RetryPolicy leave the runtime's defaults in place.
type Handler struct {
	// Name must match ^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9_]*$.
	Name string
	// Fn is required.
	Fn            HandlerFunc
	Documentation string
	Metadata      map[string]string
	// Content types announced to the ingress (defaults */* and
	// application/json).
	InputContentType, OutputContentType string
	// Runtime settings announced in the manifest (manifest v3+).
	InactivityTimeout, AbortTimeout, JournalRetention, IdempotencyRetention time.Duration
	// RetryPolicy is announced in the manifest (v4+).
	RetryPolicy *RetryPolicy
}

func durationPtr(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// manifestService describes s for the discovery manifest.
func manifestService(s Service) discovery.Service {
	out := discovery.Service{
		Name:          s.Name,
		Type:          discovery.ServiceTypeService,
		Documentation: s.Documentation,
		Metadata:      s.Metadata,
		Handlers:      make([]discovery.Handler, 0, len(s.Handlers)),
	}
	for _, h := range s.Handlers {
		out.Handlers = append(out.Handlers, discovery.Handler{
			Name:                 h.Name,
			Documentation:        h.Documentation,
			Metadata:             h.Metadata,
			InputContentType:     h.InputContentType,
			OutputContentType:    h.OutputContentType,
			InactivityTimeout:    durationPtr(h.InactivityTimeout),
			AbortTimeout:         durationPtr(h.AbortTimeout),
			JournalRetention:     durationPtr(h.JournalRetention),
			IdempotencyRetention: durationPtr(h.IdempotencyRetention),
			RetryPolicy:          h.RetryPolicy,
		})
	}
	return out
}
