// Package restatetest plays the runtime side of the Restate service
// invocation protocol against an endpoint, in memory or over a real h2c
// connection: it builds and parses frame streams, opens invocation streams,
// answers run proposals the way restate-server does (ProposeRunCompletionAck
// on v7 when asked, RunCompletionNotification otherwise), records every
// frame, answers timers and calls (Completer) and the commands of keyed
// services against an in-memory store of state and promises (Keyed), and
// drives load for benchmarks (Drive).
//
// It is test support: it trusts its inputs and favours clear failures over
// speed, except in Drive's hot loop.
package restatetest
