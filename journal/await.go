package journal

import (
	"fmt"
	"strings"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// Mode says when an await over several completions is satisfied.
type Mode uint8

const (
	// AllCompleted: every completion arrived (success or failure).
	AllCompleted Mode = iota
	// FirstCompleted: at least one completion arrived.
	FirstCompleted
)

func (d Mode) String() string {
	if d == FirstCompleted {
		return "first completed"
	}
	return "all completed"
}

// Handle names what an await waits for: a completion id (the result of a
// command) or a signal index (an awakeable). Signals are not tied to a
// command, so the two live in separate namespaces.
type Handle uint64

// signalBit marks a Handle as a signal index.
const signalBit = Handle(1) << 32

// CompletionHandle is the Handle of completion id.
func CompletionHandle(id uint32) Handle { return Handle(id) }

// SignalHandle is the Handle of signal index idx.
func SignalHandle(idx uint32) Handle { return Handle(idx) | signalBit }

// signal reports the signal index of a signal Handle.
func (h Handle) signal() (uint32, bool) { return uint32(h), h&signalBit != 0 }

func handlesOf(ids []uint32) []Handle {
	hs := make([]Handle, len(ids))
	for i, id := range ids {
		hs[i] = CompletionHandle(id)
	}
	return hs
}

// completion returns the result of id and the arrival order of what
// completed it (0: not complete). On v7 an acknowledged run proposal
// completes its run; its RunCompletionNotification takes the ack's place
// on replay, so whichever came first counts.
func (m *Machine) completion(id uint32) (Result, uint64) {
	var res Result
	var seq uint64
	if n := m.findNotif(id); n != nil {
		res, seq = n.res, n.seq
	}
	if p := m.findProposal(id); p != nil && p.ackSeq != 0 && (seq == 0 || p.ackSeq < seq) {
		res, seq = p.res, p.ackSeq
	}
	return res, seq
}

// resultOf is completion for either kind of Handle.
func (m *Machine) resultOf(h Handle) (Result, uint64) {
	if idx, ok := h.signal(); ok {
		if s := m.findSignal(idx); s != nil {
			return s.res, s.seq
		}
		return Result{}, 0
	}
	return m.completion(uint32(h))
}

// Completed returns the result of completion id and whether it is there.
// It ignores CANCEL: callers use it for the results of a Ready await.
func (m *Machine) Completed(id uint32) (Result, bool) {
	return m.CompletedHandle(CompletionHandle(id))
}

// CompletedHandle is Completed for a completion or signal Handle.
func (m *Machine) CompletedHandle(h Handle) (Result, bool) {
	res, seq := m.resultOf(h)
	return res, seq != 0
}

// FirstArrived is the position in hs of the one whose completion arrived
// first, -1 when none is complete. A FirstCompleted await returns that
// one and only that one: a replay holds every completion the journal
// recorded, later ones included, and arrival order is the only choice the
// attempt that recorded the journal made the same way (the protocol: "on
// replay the SDK MUST observe the same relative order it observed when
// processing").
func (m *Machine) FirstArrived(hs []Handle) int {
	at, first := -1, uint64(0)
	for i, h := range hs {
		if _, seq := m.resultOf(h); seq != 0 && (first == 0 || seq < first) {
			at, first = i, seq
		}
	}
	return at
}

// AwaitMany reports the state of an await over completion ids; see
// AwaitHandles.
func (m *Machine) AwaitMany(ids []uint32, mode Mode) Status {
	return m.AwaitHandles(handlesOf(ids), mode)
}

// AwaitHandles reports the state of an await over hs (completions and
// signals): Ready once every one (AllCompleted) or at least one
// (FirstCompleted) completed; CompletedHandle then gives each result. A
// CANCEL signal that arrived before the await was satisfied wins, in
// arrival order, so a replay decides as the attempt that recorded the
// journal did; once taken (TakeCancel) it no longer counts. When the await
// is not satisfied and the runtime closed its side, AwaitHandles suspends
// (see SuspendHandles). An empty hs is satisfied in either mode.
func (m *Machine) AwaitHandles(hs []Handle, mode Mode) Status {
	return m.awaitHandles(hs, mode, true)
}

// AwaitUncancelled is Await for a completion that a CANCEL signal does
// not preempt: the invocation id of a one-way call, which was sent
// whatever arrives after it. The SDKs surface a cancellation at the next
// wait, never at a send; the CANCEL stays pending for that wait.
func (m *Machine) AwaitUncancelled(id uint32) (Result, Status) {
	hs := [1]Handle{CompletionHandle(id)}
	st := m.awaitHandles(hs[:], AllCompleted, false)
	if st != Ready {
		return Result{}, st
	}
	res, _ := m.Completed(id)
	return res, st
}

func (m *Machine) awaitHandles(hs []Handle, mode Mode, cancellable bool) Status {
	if m.phase == closed {
		return Closed
	}
	var first, last uint64 // earliest and latest arrival; last 0 if one is missing
	missing := false
	for _, h := range hs {
		_, seq := m.resultOf(h)
		if seq == 0 {
			missing = true
			continue
		}
		if first == 0 || seq < first {
			first = seq
		}
		if seq > last {
			last = seq
		}
	}
	satisfied := last
	if missing {
		satisfied = 0
	}
	if mode == FirstCompleted {
		satisfied = first
	}
	if len(hs) == 0 {
		satisfied = m.seq + 1 // vacuously satisfied, after any signal
	}
	if cancellable && m.cancelPending() && (satisfied == 0 || m.cancelSeq < satisfied) {
		return Cancelled
	}
	if satisfied != 0 {
		return Ready
	}
	if m.Replaying() {
		// The attempt that recorded the journal went on past this wait, so
		// what let it go on is recorded before the commands that follow; it
		// is not there, so the handler waits for something else.
		i := m.cmdIndex
		m.mismatch(i, "journal mismatch at command index %d: the handler waits (%s) for %s, which the journal does not complete, yet the journal continues with %s %q after the wait", i, mode, describeHandles(hs), m.commands[i].typ, m.commands[i].name)
		return Closed
	}
	if m.inputClosed {
		m.SuspendHandles(hs, mode)
		return Suspended
	}
	return Pending
}

// describeHandles names hs for an error: "completion 2, signal 17".
func describeHandles(hs []Handle) string {
	var b strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteString(", ")
		}
		if idx, ok := h.signal(); ok {
			fmt.Fprintf(&b, "signal %d", idx)
		} else {
			fmt.Fprintf(&b, "completion %d", uint32(h))
		}
	}
	return b.String()
}

// cancelPending reports a CANCEL signal the handler has not taken.
func (m *Machine) cancelPending() bool { return m.cancelSeq != 0 && !m.cancelTaken }

// TakeCancel records that the handler observed the CANCEL signal (an
// await returned Cancelled and the handler goes on, as SDKs let a
// cancelled invocation run its compensations): later awaits and
// suspensions no longer count it. Only handlers that deliver cancellation
// as a failure call it; on replay they take it at the same await again,
// since arrival order decides which await that is.
func (m *Machine) TakeCancel() {
	if m.cancelSeq != 0 {
		m.cancelTaken = true
	}
}

// CancelTaken reports whether TakeCancel took the CANCEL signal.
func (m *Machine) CancelTaken() bool { return m.cancelTaken }

// Suspend ends the attempt with a SuspensionMessage for an await over
// completion ids; see SuspendHandles.
func (m *Machine) Suspend(ids []uint32, mode Mode) { m.SuspendHandles(handlesOf(ids), mode) }

// SuspendHandles ends the attempt with a SuspensionMessage for an await
// over hs in mode: the runtime resumes the invocation once the pending
// ones among hs can satisfy it, or on CANCEL (unless it was taken). v5
// and v6 list the pending completion ids and signal indexes flat (the
// runtime resumes on any of them). v7 describes the await point as a
// Future tree the way SDKs do: CANCEL must resume it on its own, so it is
// FIRST_COMPLETED of the CANCEL signal and what is awaited, the latter
// nested under ALL_COMPLETED when every one of several is needed.
func (m *Machine) SuspendHandles(hs []Handle, mode Mode) {
	if m.phase == closed {
		return
	}
	var pending, signals []uint32
	for _, h := range hs {
		if _, seq := m.resultOf(h); seq != 0 {
			continue
		}
		if idx, ok := h.signal(); ok {
			if !contains(signals, idx) {
				signals = append(signals, idx)
			}
		} else if !contains(pending, uint32(h)) {
			pending = append(pending, uint32(h))
		}
	}
	if pending == nil {
		pending = []uint32{}
	}
	var cancel []uint32
	if !m.cancelTaken {
		cancel = []uint32{cancelSignal}
	}
	var s servicev1.SuspensionMessage
	switch {
	case !m.rules.futureSuspension:
		s.WaitingCompletions, s.WaitingSignals = pending, append(cancel, signals...)
	case mode == FirstCompleted || len(pending)+len(signals) <= 1:
		s.AwaitingOn = &servicev1.Future{WaitingCompletions: pending, WaitingSignals: append(cancel, signals...),
			CombinatorType: servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED}
	default:
		all := &servicev1.Future{WaitingCompletions: pending, WaitingSignals: signals,
			CombinatorType: servicev1.CombinatorType_COMBINATOR_TYPE_ALL_COMPLETED}
		if cancel == nil {
			s.AwaitingOn = all
		} else {
			s.AwaitingOn = &servicev1.Future{WaitingSignals: cancel, NestedFutures: []*servicev1.Future{all},
				CombinatorType: servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED}
		}
	}
	m.emit(wire.SuspensionMessageType, 0, &s)
	m.end(wire.SuspensionMessageType)
}

func contains(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
