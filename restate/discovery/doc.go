// Package discovery owns the Restate endpoint manifest: the JSON document a
// service deployment returns from GET /discover so that restate-server learns
// which services and handlers it exposes, which transport mode it speaks and
// which service-protocol versions it supports.
//
// The manifest is versioned independently of the invocation protocol
// (ServiceDiscoveryProtocolVersion in discovery.proto). The runtime lists the
// versions it understands in the Accept header; [Negotiate] picks one, and
// [Encode] renders a [Manifest] with exactly the fields that version's schema
// allows:
//
//	v1: protocolMode, min/maxProtocolVersion, services{name, ty,
//	    handlers{name, ty, input, output}}
//	v2: + documentation and metadata on services and handlers
//	v3: + inactivityTimeout, abortTimeout, journalRetention,
//	    idempotencyRetention, ingressPrivate on services and handlers,
//	    workflowCompletionRetention on a workflow's run handler,
//	    enableLazyState
//	v4: + the retry policy (retryPolicy* fields) on services and handlers
//
// A field the negotiated version cannot carry is left out rather than
// failing the discovery, so an old runtime still learns the services;
// [DroppedFields] names what was left out so the caller can log it.
package discovery
