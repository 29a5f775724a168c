// Package restate is fnbridge's Restate service deployment endpoint: the
// HTTP handler restate-server invokes (POST {prefix}/invoke/{service}/
// {handler}, GET {prefix}/discover, GET {prefix}/health), protocol version
// negotiation (service protocol v5 to v7), request identity, both transport
// modes (BIDI_STREAM over h2c or full-duplex HTTP/1.1, and
// REQUEST_RESPONSE), and the small handler API the bridge programs against:
// a HandlerFunc receives a Context whose Run journals a side effect.
//
// The Context also carries the durable-steps operations: RunStart and
// RunComplete (Run in two halves), Sleep, Call, Send, Await over several
// Futures (all or any) and RandomSeed. Every command is flushed to the
// runtime before the operation returns, Run's RunCommand before its
// closure runs, so Restate sees a step in flight while it executes. An
// Await not complete within its budget, or at once when the runtime closed
// its input (REQUEST_RESPONSE), suspends the attempt (ErrSuspended).
// RandomSeed is StartMessage.random_seed, or the FNV-1a hash of the
// invocation id when the runtime sent none (v5, or a zero seed), so every
// attempt sees the same seed.
//
// Keyed services (Service.Type virtual object or workflow, Handler.Type)
// add state (GetState, StateKeys, SetState, ClearState, ClearAllState:
// eager from StartMessage, lazy when it is partial) and workflow promises
// (Promise, PeekPromise, CompletePromise); every service may create
// awakeables (Awakeable: an id and a Future of the signal that completes
// it), complete other invocations' (CompleteAwakeable) and cancel other
// invocations (CancelInvocation).
//
// Peers are bounded (Config): a stream that does not deliver its
// StartMessage and announced journal within StartTimeout ends with
// ErrorMessage 571; a stream over MaxConcurrentInvocations is refused with
// 503 and Retry-After before its body is read; an attempt whose journal
// (StartMessage, replayed entries and notifications held in memory)
// exceeds MaxJournalBytes fails with 571 and a pause request, because
// every retry would replay the same journal.
//
// Only the runtime's CANCEL signal ends an invocation with the terminal
// 409 "cancelled", or, for a Handler with DeliverCancel, fails the first
// wait it beats with ErrCancelled and leaves the rest to the handler. When the handler's Context ends for any other reason
// (the stream closed, the request or server context done) the attempt
// proposes nothing, neither a run result nor an output, and fails with a
// retryable 503 if the stream can still carry it; an ErrCancelled that a
// run closure or handler returns without a CANCEL is retried the same way.
//
// Frames and the message type table live in restate/wire, the invocation
// state machine in package journal, the manifest in restate/discovery and
// request identity in restate/identity; this package wires them to
// net/http.
package restate
