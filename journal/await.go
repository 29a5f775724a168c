package journal

import (
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
	for i := range m.proposals {
		p := &m.proposals[i]
		if p.id == id && p.ackSeq != 0 && (seq == 0 || p.ackSeq < seq) {
			res, seq = p.res, p.ackSeq
		}
	}
	return res, seq
}

// Completed returns the result of completion id and whether it is there.
// It ignores CANCEL: callers use it for the results of a Ready await.
func (m *Machine) Completed(id uint32) (Result, bool) {
	res, seq := m.completion(id)
	return res, seq != 0
}

// AwaitMany reports the state of an await over ids: Ready once every id
// (AllCompleted) or at least one (FirstCompleted) completed; Completed
// then gives each result. A CANCEL signal that arrived before the await
// was satisfied wins, in arrival order, so a replay decides as the attempt
// that recorded the journal did. When the await is not satisfied and the
// runtime closed its side, AwaitMany suspends (see Suspend). An empty ids
// is satisfied in either mode.
func (m *Machine) AwaitMany(ids []uint32, mode Mode) Status {
	if m.phase == closed {
		return Closed
	}
	var first, last uint64 // earliest and latest arrival; last 0 if one is missing
	missing := false
	for _, id := range ids {
		_, seq := m.completion(id)
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
	if len(ids) == 0 {
		satisfied = m.seq + 1 // vacuously satisfied, after any signal
	}
	if m.cancelSeq != 0 && (satisfied == 0 || m.cancelSeq < satisfied) {
		return Cancelled
	}
	if satisfied != 0 {
		return Ready
	}
	if m.inputClosed {
		m.Suspend(ids, mode)
		return Suspended
	}
	return Pending
}

// Suspend ends the attempt with a SuspensionMessage for an await over ids
// in mode: the runtime resumes the invocation once the pending ones among
// ids can satisfy it, or on CANCEL. v5 and v6 list the pending completion
// ids and the CANCEL signal flat (the runtime resumes on any of them). v7
// describes the await point as a Future tree the way SDKs do: CANCEL
// must resume it on its own, so it is FIRST_COMPLETED of the CANCEL signal
// and the completions, the latter nested under ALL_COMPLETED when every
// one of several is needed.
func (m *Machine) Suspend(ids []uint32, mode Mode) {
	if m.phase == closed {
		return
	}
	pending := make([]uint32, 0, len(ids))
	for _, id := range ids {
		if _, seq := m.completion(id); seq == 0 && !contains(pending, id) {
			pending = append(pending, id)
		}
	}
	var s servicev1.SuspensionMessage
	signals := []uint32{cancelSignal}
	switch {
	case !m.rules.futureSuspension:
		s.WaitingCompletions, s.WaitingSignals = pending, signals
	case mode == FirstCompleted || len(pending) <= 1:
		s.AwaitingOn = &servicev1.Future{WaitingCompletions: pending, WaitingSignals: signals,
			CombinatorType: servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED}
	default:
		s.AwaitingOn = &servicev1.Future{WaitingSignals: signals,
			NestedFutures:  []*servicev1.Future{{WaitingCompletions: pending, CombinatorType: servicev1.CombinatorType_COMBINATOR_TYPE_ALL_COMPLETED}},
			CombinatorType: servicev1.CombinatorType_COMBINATOR_TYPE_FIRST_COMPLETED}
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
