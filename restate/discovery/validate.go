package discovery

import (
	"fmt"
	"math"
	"regexp"
	"time"
)

// The name patterns of endpoint_manifest_schema.json: service names may
// contain '.' and '-', handler names may not.
var (
	serviceNamePattern = regexp.MustCompile(`^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9._-]*$`)
	handlerNamePattern = regexp.MustCompile(`^([a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9_]*$`)
)

// Validate reports the first problem that would make restate-server reject
// m (or that the schema forbids), naming the offending field. [Encode]
// calls it; an endpoint may call it once at start-up to fail early.
func Validate(m Manifest) error {
	switch m.ProtocolMode {
	case BidiStream, RequestResponse:
	case "":
		return fmt.Errorf("discovery: protocolMode is required (%s or %s)", BidiStream, RequestResponse)
	default:
		return fmt.Errorf("discovery: protocolMode %q is not %s or %s", m.ProtocolMode, BidiStream, RequestResponse)
	}
	if m.MinProtocolVersion < 1 || m.MaxProtocolVersion < 1 {
		return fmt.Errorf("discovery: protocol versions must be >= 1 (min %d, max %d)", m.MinProtocolVersion, m.MaxProtocolVersion)
	}
	if m.MinProtocolVersion > m.MaxProtocolVersion {
		return fmt.Errorf("discovery: minProtocolVersion %d is greater than maxProtocolVersion %d", m.MinProtocolVersion, m.MaxProtocolVersion)
	}
	if len(m.Services) == 0 {
		return fmt.Errorf("discovery: the manifest has no services")
	}
	seen := make(map[string]int, len(m.Services))
	for i, s := range m.Services {
		where := fmt.Sprintf("services[%d] %q", i, s.Name)
		if err := validateService(where, s); err != nil {
			return err
		}
		if j, dup := seen[s.Name]; dup {
			return fmt.Errorf("discovery: %s: name duplicates services[%d]", where, j)
		}
		seen[s.Name] = i
	}
	return nil
}

func validateService(where string, s Service) error {
	if s.Name == "" {
		return fmt.Errorf("discovery: %s: name is empty", where)
	}
	if !serviceNamePattern.MatchString(s.Name) {
		return fmt.Errorf("discovery: %s: name must match %s", where, serviceNamePattern)
	}
	typ := serviceType(s.Type)
	switch typ {
	case ServiceTypeService, ServiceTypeVirtualObject, ServiceTypeWorkflow:
	default:
		return fmt.Errorf("discovery: %s: type %q is not SERVICE, VIRTUAL_OBJECT or WORKFLOW", where, s.Type)
	}
	if err := validateOptions(where, optionsOfService(s)); err != nil {
		return err
	}
	if len(s.Handlers) == 0 {
		return fmt.Errorf("discovery: %s: the service has no handlers", where)
	}
	seen := make(map[string]int, len(s.Handlers))
	for i, h := range s.Handlers {
		hwhere := fmt.Sprintf("%s: handlers[%d] %q", where, i, h.Name)
		if h.Name == "" {
			return fmt.Errorf("discovery: %s: name is empty", hwhere)
		}
		if !handlerNamePattern.MatchString(h.Name) {
			return fmt.Errorf("discovery: %s: name must match %s", hwhere, handlerNamePattern)
		}
		if j, dup := seen[h.Name]; dup {
			return fmt.Errorf("discovery: %s: name duplicates handlers[%d]", hwhere, j)
		}
		seen[h.Name] = i
		if err := validateHandlerType(hwhere, typ, h.Type); err != nil {
			return err
		}
		if h.Type == HandlerTypeWorkflow && h.IdempotencyRetention != nil {
			return fmt.Errorf("discovery: %s: idempotencyRetention is not valid on a WORKFLOW handler", hwhere)
		}
		if h.WorkflowCompletionRetention != nil && (typ != ServiceTypeWorkflow || h.Type != HandlerTypeWorkflow) {
			return fmt.Errorf("discovery: %s: workflowCompletionRetention is only valid on the WORKFLOW handler of a WORKFLOW service", hwhere)
		}
		if err := validateOptions(hwhere, optionsOfHandler(h)); err != nil {
			return err
		}
	}
	return nil
}

func validateHandlerType(where string, service ServiceType, h HandlerType) error {
	if h == "" {
		return nil
	}
	ok := false
	switch service {
	case ServiceTypeVirtualObject:
		ok = h == HandlerTypeExclusive || h == HandlerTypeShared
	case ServiceTypeWorkflow:
		ok = h == HandlerTypeWorkflow || h == HandlerTypeShared
	}
	if !ok {
		return fmt.Errorf("discovery: %s: handler type %q is not allowed in a %s", where, h, service)
	}
	return nil
}

func validateOptions(where string, o options) error {
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{
		{"inactivityTimeout", o.inactivity},
		{"abortTimeout", o.abort},
		{"journalRetention", o.journal},
		{"idempotencyRetention", o.idempotency},
		{"workflowCompletionRetention", o.workflow},
	} {
		if err := validateDuration(where, d.name, d.v); err != nil {
			return err
		}
	}
	if r := o.retry; r != nil {
		if err := validateDuration(where, "retryPolicy.initialInterval", r.InitialInterval); err != nil {
			return err
		}
		if err := validateDuration(where, "retryPolicy.maxInterval", r.MaxInterval); err != nil {
			return err
		}
		if r.InitialInterval != nil && r.MaxInterval != nil && *r.MaxInterval < *r.InitialInterval {
			return fmt.Errorf("discovery: %s: retryPolicy.maxInterval %s is less than initialInterval %s", where, *r.MaxInterval, *r.InitialInterval)
		}
		if f := r.ExponentiationFactor; f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0) || *f <= 0) {
			return fmt.Errorf("discovery: %s: retryPolicy.exponentiationFactor %v must be a finite number > 0", where, *f)
		}
		if r.MaxAttempts != nil && *r.MaxAttempts < 0 {
			return fmt.Errorf("discovery: %s: retryPolicy.maxAttempts %d must be >= 0", where, *r.MaxAttempts)
		}
		switch r.OnMaxAttempts {
		case "", OnMaxAttemptsPause, OnMaxAttemptsKill:
		default:
			return fmt.Errorf("discovery: %s: retryPolicy.onMaxAttempts %q is not PAUSE or KILL", where, r.OnMaxAttempts)
		}
	}
	return nil
}

// validateDuration: the schema carries whole non-negative milliseconds, so a
// negative or sub-millisecond value would be silently changed on the wire.
func validateDuration(where, name string, d *time.Duration) error {
	if d == nil {
		return nil
	}
	if *d < 0 {
		return fmt.Errorf("discovery: %s: %s %s is negative", where, name, *d)
	}
	if *d%time.Millisecond != 0 {
		return fmt.Errorf("discovery: %s: %s %s is not a whole number of milliseconds", where, name, *d)
	}
	return nil
}
