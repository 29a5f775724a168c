// Package journal is the invocation state machine of the Restate service
// invocation protocol, seen from the service deployment: bootstrapping from
// StartMessage, replaying the known journal, processing new commands,
// completion ids, run proposals and their acks or notifications, signals
// (CANCEL), eager state, suspension, and the single terminal message (End,
// Suspension or Error) every stream ends with.
//
// It is pure logic: no network, no goroutines, no clocks. The caller feeds
// runtime frames with Receive and InputClosed, drives handler operations
// (Input, RunStart, ProposeRun, Await, Output, Fail, state access) and
// drains the encoded frames to send with TakeOutput. Everything that differs
// between protocol versions 5, 6 and 7 is looked up in one rules table.
//
// A Machine is not safe for concurrent use; callers serialise access.
package journal
