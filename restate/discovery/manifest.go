package discovery

import "time"

// ProtocolMode is the transport mode the deployment speaks; the runtime
// takes it only from the manifest.
type ProtocolMode string

const (
	// BidiStream: runtime and deployment exchange messages concurrently on
	// one stream (HTTP/2, or full-duplex HTTP/1.1).
	BidiStream ProtocolMode = "BIDI_STREAM"
	// RequestResponse: the runtime sends its whole request body before the
	// deployment answers; the deployment suspends to get completions.
	RequestResponse ProtocolMode = "REQUEST_RESPONSE"
)

// ServiceType is the manifest's "ty" of a service.
type ServiceType string

const (
	// ServiceTypeService is a stateless service; its handlers carry no type.
	ServiceTypeService ServiceType = "SERVICE"
	// ServiceTypeVirtualObject is a keyed service with exclusive and shared
	// handlers.
	ServiceTypeVirtualObject ServiceType = "VIRTUAL_OBJECT"
	// ServiceTypeWorkflow is a keyed service with one workflow handler and
	// shared ones.
	ServiceTypeWorkflow ServiceType = "WORKFLOW"
)

// HandlerType is the manifest's "ty" of a handler. It is meaningful only in
// virtual objects and workflows.
type HandlerType string

const (
	// HandlerTypeExclusive handlers of a virtual object run one at a time
	// per key.
	HandlerTypeExclusive HandlerType = "EXCLUSIVE"
	// HandlerTypeShared handlers run concurrently with any other handler of
	// the key.
	HandlerTypeShared HandlerType = "SHARED"
	// HandlerTypeWorkflow is the run handler of a workflow.
	HandlerTypeWorkflow HandlerType = "WORKFLOW"
)

// Manifest is what a deployment tells the runtime about itself.
type Manifest struct {
	// ProtocolMode is required: the runtime rejects a manifest without it.
	ProtocolMode ProtocolMode
	// MinProtocolVersion and MaxProtocolVersion bound the service-protocol
	// versions (application/vnd.restate.invocation.vN) the deployment speaks.
	MinProtocolVersion, MaxProtocolVersion int
	// Services are rendered in this order.
	Services []Service
}

// Service describes one Restate service of the deployment. Optional fields
// are pointers or empty strings/maps; unset ones are not rendered, so the
// runtime applies its own defaults.
type Service struct {
	// Name must match ^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9._-]*$ and be unique.
	Name string
	// Type defaults to SERVICE when empty.
	Type ServiceType
	// Documentation (v2+), free text, usually Markdown.
	Documentation string
	// Metadata (v2+) is shown by the admin API.
	Metadata map[string]string
	// Handlers must be non-empty and uniquely named.
	Handlers []Handler

	// Per-service defaults for every handler (v3+). Durations are sent in
	// whole milliseconds.
	InactivityTimeout, AbortTimeout, JournalRetention, IdempotencyRetention *time.Duration
	// IngressPrivate (v3+) hides the service from the HTTP and Kafka ingress.
	IngressPrivate *bool
	// EnableLazyState (v3+) makes the runtime send no eager state in
	// StartMessage: every read goes through GetLazyState.
	EnableLazyState *bool
	// RetryPolicy (v4+) overrides the runtime's default retry policy.
	RetryPolicy *RetryPolicy
}

// Handler describes one handler of a service.
type Handler struct {
	// Name must match ^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9_]*$ and be unique
	// within its service.
	Name string
	// Type is optional; it must be empty in a SERVICE, EXCLUSIVE or SHARED in
	// a VIRTUAL_OBJECT, WORKFLOW or SHARED in a WORKFLOW. Empty lets the
	// runtime default it (EXCLUSIVE, resp. WORKFLOW).
	Type HandlerType
	// Documentation (v2+), free text, usually Markdown.
	Documentation string
	// Metadata (v2+) is shown by the admin API.
	Metadata map[string]string
	// InputContentType is the content type the ingress accepts; it may hold
	// wildcards like an Accept header. Empty means "*/*". The input body is
	// always optional.
	InputContentType string
	// OutputContentType is set on the ingress response. Empty means
	// "application/json". It is not set on an empty output.
	OutputContentType string

	// Per-handler settings (v3+), overriding the service's. Durations are
	// sent in whole milliseconds.
	InactivityTimeout, AbortTimeout, JournalRetention, IdempotencyRetention *time.Duration
	// WorkflowCompletionRetention (v3+) keeps a workflow's result and
	// state after its WORKFLOW handler completed; only on that handler.
	WorkflowCompletionRetention *time.Duration
	// IngressPrivate (v3+) hides the handler from the HTTP and Kafka ingress.
	IngressPrivate *bool
	// EnableLazyState (v3+) overrides the service's for this handler.
	EnableLazyState *bool
	// RetryPolicy (v4+) overrides the service's and the runtime's policy.
	RetryPolicy *RetryPolicy
}

// RetryPolicy is the runtime-side retry policy of invocations (v4+). Every
// field is optional; unset ones keep the runtime's value.
type RetryPolicy struct {
	// InitialInterval is the delay before the first retry (whole ms).
	InitialInterval *time.Duration
	// MaxInterval caps the delay between retries (whole ms).
	MaxInterval *time.Duration
	// ExponentiationFactor multiplies the delay after each retry (> 0).
	ExponentiationFactor *float64
	// MaxAttempts bounds the attempts (>= 0).
	MaxAttempts *int
	// OnMaxAttempts is "PAUSE" or "KILL" (empty: runtime default).
	OnMaxAttempts string
}

// Values of RetryPolicy.OnMaxAttempts.
const (
	OnMaxAttemptsPause = "PAUSE"
	OnMaxAttemptsKill  = "KILL"
)
