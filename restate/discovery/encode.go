package discovery

import (
	"encoding/json"
	"fmt"
	"time"
)

// Defaults rendered when a handler leaves its content types empty; they are
// the runtime's own defaults, written out so the manifest is explicit.
const (
	DefaultInputContentType  = "*/*"
	DefaultOutputContentType = "application/json"
)

// Encode validates m and renders it as the JSON document of manifest
// version (1..4), with only the fields that version's schema defines;
// fields it does not define are left out (see [DroppedFields]). Durations
// are rendered in milliseconds.
func Encode(m Manifest, version int) ([]byte, error) {
	if version < MinVersion || version > MaxVersion {
		return nil, fmt.Errorf("discovery: manifest version %d is not supported (want %d..%d)", version, MinVersion, MaxVersion)
	}
	if err := Validate(m); err != nil {
		return nil, err
	}
	out := wireEndpoint{
		ProtocolMode:       m.ProtocolMode,
		MinProtocolVersion: m.MinProtocolVersion,
		MaxProtocolVersion: m.MaxProtocolVersion,
		Services:           make([]wireService, 0, len(m.Services)),
	}
	for _, s := range m.Services {
		ws := wireService{
			Name:        s.Name,
			Ty:          serviceType(s.Type),
			Handlers:    make([]wireHandler, 0, len(s.Handlers)),
			wireOptions: renderOptions(version, optionsOfService(s)),
		}
		if version >= 2 {
			ws.Documentation = s.Documentation
			ws.Metadata = nonEmpty(s.Metadata)
		}
		for _, h := range s.Handlers {
			wh := wireHandler{
				Name:        h.Name,
				Ty:          h.Type,
				Input:       wireInput{Required: false, ContentType: orDefault(h.InputContentType, DefaultInputContentType)},
				Output:      wireOutput{SetContentTypeIfEmpty: false, ContentType: orDefault(h.OutputContentType, DefaultOutputContentType)},
				wireOptions: renderOptions(version, optionsOfHandler(h)),
			}
			if version >= 2 {
				wh.Documentation = h.Documentation
				wh.Metadata = nonEmpty(h.Metadata)
			}
			ws.Handlers = append(ws.Handlers, wh)
		}
		out.Services = append(out.Services, ws)
	}
	return json.Marshal(out)
}

// DroppedFields lists, as "service/handler: field" paths, the fields set in
// m that manifest version cannot carry and that [Encode] therefore leaves
// out, so the endpoint can warn that an old runtime will not apply them.
func DroppedFields(m Manifest, version int) []string {
	var dropped []string
	check := func(where string, docs string, meta map[string]string, o options) {
		if version < 2 {
			if docs != "" {
				dropped = append(dropped, where+": documentation")
			}
			if len(meta) > 0 {
				dropped = append(dropped, where+": metadata")
			}
		}
		if version < 3 {
			for _, f := range o.v3Fields() {
				dropped = append(dropped, where+": "+f)
			}
		}
		if version < 4 && o.retry != nil {
			dropped = append(dropped, where+": retryPolicy")
		}
	}
	for _, s := range m.Services {
		check(s.Name, s.Documentation, s.Metadata, optionsOfService(s))
		for _, h := range s.Handlers {
			check(s.Name+"/"+h.Name, h.Documentation, h.Metadata, optionsOfHandler(h))
		}
	}
	return dropped
}

// PrivateDropped lists the services and handlers ("service" or
// "service/handler") marked ingressPrivate that manifest version cannot
// mark so (v3 can): a runtime given that manifest would let anyone call
// them at its ingress, so an endpoint must not serve it.
func PrivateDropped(m Manifest, version int) []string {
	if version >= 3 {
		return nil
	}
	var out []string
	private := func(b *bool) bool { return b != nil && *b }
	for _, s := range m.Services {
		if private(s.IngressPrivate) {
			out = append(out, s.Name)
		}
		for _, h := range s.Handlers {
			if private(h.IngressPrivate) {
				out = append(out, s.Name+"/"+h.Name)
			}
		}
	}
	return out
}

// options are the settings services and handlers share.
type options struct {
	inactivity, abort, journal, idempotency *time.Duration
	workflow                                *time.Duration // handlers only
	ingressPrivate, lazyState               *bool
	retry                                   *RetryPolicy
}

func optionsOfService(s Service) options {
	return options{s.InactivityTimeout, s.AbortTimeout, s.JournalRetention, s.IdempotencyRetention, nil, s.IngressPrivate, s.EnableLazyState, s.RetryPolicy}
}

func optionsOfHandler(h Handler) options {
	return options{h.InactivityTimeout, h.AbortTimeout, h.JournalRetention, h.IdempotencyRetention, h.WorkflowCompletionRetention, h.IngressPrivate, h.EnableLazyState, h.RetryPolicy}
}

// v3Fields names the manifest fields of o that need version 3.
func (o options) v3Fields() []string {
	var names []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"inactivityTimeout", o.inactivity != nil},
		{"abortTimeout", o.abort != nil},
		{"journalRetention", o.journal != nil},
		{"idempotencyRetention", o.idempotency != nil},
		{"workflowCompletionRetention", o.workflow != nil},
		{"ingressPrivate", o.ingressPrivate != nil},
		{"enableLazyState", o.lazyState != nil},
	} {
		if f.set {
			names = append(names, f.name)
		}
	}
	return names
}

func renderOptions(version int, o options) wireOptions {
	var w wireOptions
	if version >= 3 {
		w.InactivityTimeout = millis(o.inactivity)
		w.AbortTimeout = millis(o.abort)
		w.JournalRetention = millis(o.journal)
		w.IdempotencyRetention = millis(o.idempotency)
		w.WorkflowCompletionRetention = millis(o.workflow)
		w.IngressPrivate = o.ingressPrivate
		w.EnableLazyState = o.lazyState
	}
	if version >= 4 && o.retry != nil {
		w.RetryPolicyInitialInterval = millis(o.retry.InitialInterval)
		w.RetryPolicyMaxInterval = millis(o.retry.MaxInterval)
		w.RetryPolicyMaxAttempts = o.retry.MaxAttempts
		w.RetryPolicyExponentiationFactor = o.retry.ExponentiationFactor
		w.RetryPolicyOnMaxAttempts = o.retry.OnMaxAttempts
	}
	return w
}

func millis(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

func serviceType(t ServiceType) ServiceType {
	if t == "" {
		return ServiceTypeService
	}
	return t
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func nonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
