package discovery

// The JSON shapes of endpoint_manifest_schema.json. Every optional field is
// a pointer or omitempty so that a field the negotiated version does not know
// is absent from the document, not null.

type wireEndpoint struct {
	ProtocolMode       ProtocolMode  `json:"protocolMode"`
	MinProtocolVersion int           `json:"minProtocolVersion"`
	MaxProtocolVersion int           `json:"maxProtocolVersion"`
	Services           []wireService `json:"services"`
}

type wireService struct {
	Name          string            `json:"name"`
	Ty            ServiceType       `json:"ty"`
	Documentation string            `json:"documentation,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Handlers      []wireHandler     `json:"handlers"`
	wireOptions
}

type wireHandler struct {
	Name          string            `json:"name"`
	Ty            HandlerType       `json:"ty,omitempty"`
	Documentation string            `json:"documentation,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Input         wireInput         `json:"input"`
	Output        wireOutput        `json:"output"`
	wireOptions
}

// wireOptions are the fields services and handlers share (v3, v4).
type wireOptions struct {
	InactivityTimeout    *int64 `json:"inactivityTimeout,omitempty"`
	AbortTimeout         *int64 `json:"abortTimeout,omitempty"`
	JournalRetention     *int64 `json:"journalRetention,omitempty"`
	IdempotencyRetention *int64 `json:"idempotencyRetention,omitempty"`
	// Handlers only, of a workflow's WORKFLOW handler.
	WorkflowCompletionRetention *int64 `json:"workflowCompletionRetention,omitempty"`
	IngressPrivate              *bool  `json:"ingressPrivate,omitempty"`
	EnableLazyState             *bool  `json:"enableLazyState,omitempty"`

	RetryPolicyInitialInterval      *int64   `json:"retryPolicyInitialInterval,omitempty"`
	RetryPolicyMaxInterval          *int64   `json:"retryPolicyMaxInterval,omitempty"`
	RetryPolicyMaxAttempts          *int     `json:"retryPolicyMaxAttempts,omitempty"`
	RetryPolicyExponentiationFactor *float64 `json:"retryPolicyExponentiationFactor,omitempty"`
	RetryPolicyOnMaxAttempts        string   `json:"retryPolicyOnMaxAttempts,omitempty"`
}

type wireInput struct {
	Required    bool   `json:"required"`
	ContentType string `json:"contentType"`
}

type wireOutput struct {
	SetContentTypeIfEmpty bool   `json:"setContentTypeIfEmpty"`
	ContentType           string `json:"contentType"`
}
