// Package journal is the invocation state machine of the Restate service
// invocation protocol, seen from the service deployment: bootstrapping from
// StartMessage, replaying the known journal, processing new commands,
// completion ids, run proposals and their acks or notifications, signals
// (CANCEL, awakeables), eager and lazy state, workflow promises,
// suspension, and the single terminal message (End, Suspension or Error)
// every stream ends with.
//
// It is pure logic: no network, no goroutines, no clocks (Sleep and
// OneWayCall take their times from the caller). The caller feeds runtime
// frames with Receive and InputClosed, drives handler operations (Input,
// RunStart, ProposeRun, Sleep, Call, OneWayCall, Await, AwaitHandles,
// Suspend, Output, Fail, state access, awakeables, promises, cancelling
// another invocation) and drains the encoded frames to send with
// TakeOutput.
//
// An await waits on Handles: completion ids of commands, or signal
// indexes. Awakeables are signals: creating one journals nothing and takes
// the next signal index from 17 (1 to 16 are built-in), so its id
// (AwakeableID) is the same on every attempt; whoever completes it sends
// the signal. A suspension lists the pending signals next to CANCEL.
//
// Replayed commands must be issued again in journal order: a different
// command type, run name, or call target (service, handler, key,
// idempotency key, parameter) fails the attempt with 570 naming both the
// recorded and the issued command. AwaitMany waits for all or the first of
// several completions; not satisfied once the runtime closed its side, it
// suspends with the pending ids (v5/v6 flat lists; v7 a Future tree that
// the CANCEL signal also resumes).
//
// Everything that differs between protocol versions 5, 6 and 7 is looked
// up in one rules table.
//
// A Machine is not safe for concurrent use; callers serialise access.
package journal
