package bridge

import (
	"fmt"

	"github.com/fnbridge/fnbridge/restate"
)

// Values of a service's type.
const (
	// TypeService is a plain, stateless service (the default).
	TypeService = "service"
	// TypeVirtualObject is a keyed service with state: one exclusive
	// invocation per key at a time, shared ones alongside.
	TypeVirtualObject = "virtual_object"
	// TypeWorkflow is a keyed service whose handler named run
	// (WorkflowHandler) runs once per id; every other handler is shared.
	TypeWorkflow = "workflow"
)

// WorkflowHandler is the name of a workflow's workflow handler.
const WorkflowHandler = "run"

// Keyed reports whether the service is a virtual object or workflow: its
// invocations have a key (FNBRIDGE_KEY) and state.
func (s *ServiceConfig) Keyed() bool { return s.Type == TypeVirtualObject || s.Type == TypeWorkflow }

// HandlerType is h's type in the manifest: empty for a plain service;
// exclusive or shared in a virtual object; workflow (run) or shared in a
// workflow.
func (s *ServiceConfig) HandlerType(h *HandlerConfig) restate.HandlerType {
	switch s.Type {
	case TypeVirtualObject:
		if h.Shared {
			return restate.HandlerTypeShared
		}
		return restate.HandlerTypeExclusive
	case TypeWorkflow:
		if h.Name == WorkflowHandler {
			return restate.HandlerTypeWorkflow
		}
		return restate.HandlerTypeShared
	}
	return ""
}

// restateType is the service's type for the endpoint.
func (s *ServiceConfig) restateType() restate.ServiceType {
	switch s.Type {
	case TypeVirtualObject:
		return restate.ServiceTypeVirtualObject
	case TypeWorkflow:
		return restate.ServiceTypeWorkflow
	}
	return restate.ServiceTypeService
}

// resolveKeyed defaults and checks type and lazy_state of service s (path
// sp) and shared of its handlers: shared only in a virtual object (in a
// workflow it is what every handler but run is anyway), a workflow must
// have its run handler, and only keyed services have state to load lazily.
func (s *ServiceConfig) resolveKeyed(sp string, bad func(path, format string, args ...any)) {
	switch s.Type {
	case "":
		s.Type = TypeService
	case TypeService, TypeVirtualObject, TypeWorkflow:
	default:
		bad(sp+".type", "%q is not allowed (service | virtual_object | workflow)", s.Type)
		return
	}
	if s.LazyState && !s.Keyed() {
		bad(sp+".lazy_state", "only a virtual_object or workflow has state to load lazily; service %q is a plain service (type: service)", s.Name)
	}
	hasRun := false
	for hi := range s.Handlers {
		h := &s.Handlers[hi]
		hasRun = hasRun || h.Name == WorkflowHandler
		hp := fmt.Sprintf("%s.handlers[%d]", sp, hi)
		if h.WorkflowCompletionRetention != 0 && (s.Type != TypeWorkflow || h.Name != WorkflowHandler) {
			bad(hp+".workflow_completion_retention", "only the run handler of a workflow completes a workflow; set idempotency_retention for a result kept by idempotency key")
		}
		if h.IdempotencyRetention != 0 && s.Type == TypeWorkflow && h.Name == WorkflowHandler {
			bad(hp+".idempotency_retention", "a workflow's run handler keeps its result for workflow_completion_retention instead")
		}
		if !h.Shared {
			continue
		}
		switch {
		case s.Type == TypeService:
			bad(hp+".shared", "only handlers of a virtual_object can be shared; service %q is a plain service (type: service), whose handlers all run concurrently and have no state", s.Name)
		case s.Type == TypeWorkflow && h.Name == WorkflowHandler:
			bad(hp+".shared", "the run handler of workflow %q is the workflow itself and cannot be shared (every other handler of a workflow is shared)", s.Name)
		}
	}
	if s.Type == TypeWorkflow && !hasRun && len(s.Handlers) > 0 {
		bad(sp+".handlers", "workflow %q has no handler named %s: a workflow needs one (the workflow itself; every other handler is shared)", s.Name, WorkflowHandler)
	}
}
