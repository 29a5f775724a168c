package journal

import (
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/protobuf/proto"
)

// cancelSignal is the index of the built-in CANCEL signal.
const cancelSignal = uint32(servicev1.BuiltInSignal_BUILT_IN_SIGNAL_CANCEL)

type phase uint8

const (
	waitingStart phase = iota
	replaying          // receiving StartMessage.known_entries
	processing         // journal received; new entries flow both ways
	closed             // terminal message emitted
)

// Failure is a terminal, user-visible failure: an invocation output or a
// run result that is recorded in the journal and never retried.
type Failure struct {
	Code    Code
	Message string
}

// Result is the recorded outcome of a command or notification. Exactly one
// of the result variants is meaningful, chosen by the notification type.
type Result struct {
	// Value is the payload of a successful result.
	Value []byte
	// Failure is set for a failed result.
	Failure *Failure
	// Void marks an empty result (e.g. state key not found).
	Void bool
	// InvocationID is set by CallInvocationIdCompletionNotification.
	InvocationID string
	// StateKeys is set by the state key listings.
	StateKeys [][]byte
}

// command is one replayed command.
type command struct {
	typ  wire.MessageType
	name string
	msg  any // proto message or *wire.CustomEntry
}

// runRef names a run: its command index and name.
type runRef struct {
	index int
	name  string
}

// notification is one received completion, keyed by completion id.
type notification struct {
	id  uint32
	typ wire.MessageType
	res Result
	seq uint64 // arrival order, shared with signals and acks
}

// expectation records which notification type a completion id must carry.
type expectation struct {
	id  uint32
	typ wire.MessageType
}

// proposal is a run result proposed under REQUESTED_ACK (v7).
type proposal struct {
	id     uint32
	res    Result
	ackSeq uint64 // 0 until acknowledged
}

// stateValue is one key of the local state view.
type stateValue struct {
	value   []byte
	present bool
}

// Machine is the state machine of one invocation attempt (one stream).
type Machine struct {
	version int
	rules   rules
	phase   phase

	start     *servicev1.StartMessage
	remaining uint32 // known entries not received yet

	commands []command // replayed commands, in journal order
	cmdIndex int       // index of the next command the handler issues
	// outputNext: a run was proposed as the handler's last operation
	// (ProposeLastRun); only the Output may follow it.
	outputNext bool

	nextCompletion uint32
	notifs         []notification
	expect         []expectation
	proposals      []proposal
	// notifAt, expectAt, proposalAt and signalAt index the slices by id
	// once they are long (see indexFrom).
	notifAt, expectAt, proposalAt, signalAt index

	seq       uint64
	cancelSeq uint64
	// cancelTaken: the handler observed CANCEL and goes on (TakeCancel).
	cancelTaken bool

	// signals are the indexed signals received (awakeables), first
	// delivery of each index only; nextSignal is the index the next
	// awakeable gets.
	signals    []notification
	nextSignal uint32

	// state is the local view of the invocation's state: known values
	// and keys known to be absent (cleared), on top of StartMessage.state_map.
	state   map[string]stateValue
	partial bool

	// held is the payload bytes of the journal frames received (start,
	// entries, notifications), bounded by maxHeld when it is positive.
	held, maxHeld int
	// maxSend bounds the payload of a frame the machine emits (0: none).
	maxSend int
	// proposing is the run whose proposal is being emitted (index -1:
	// unnamed), for checkSize's message.
	proposing runRef

	inputClosed bool
	terminal    wire.MessageType
	failure     *Error
	out         []byte

	// Backing arrays for the journal of a typical invocation (input, a run
	// or two and their completions), so it needs no slice growth.
	commandsArr [4]command
	notifsArr   [2]notification
	expectArr   [2]expectation
}

// New returns a machine for the negotiated protocol version (5, 6 or 7).
func New(version int) (*Machine, error) {
	r, err := rulesFor(version)
	if err != nil {
		return nil, err
	}
	m := &Machine{version: version, rules: r, nextCompletion: 1, nextSignal: firstAwakeableSignal, proposing: runRef{index: -1}}
	m.commands, m.notifs, m.expect = m.commandsArr[:0], m.notifsArr[:0], m.expectArr[:0]
	return m, nil
}

// LimitJournal bounds the journal the machine holds: the payload bytes of
// the StartMessage, replayed entries and notifications it received. A frame
// that would take it past max fails the attempt with ErrorMessage 571
// asking the runtime to pause the invocation (a retry after
// PauseFallbackDelay before v7): every retry replays the same journal, so
// only an operator raising the bound can help. max <= 0 means no bound.
func (m *Machine) LimitJournal(max int) { m.maxHeld = max }

// LimitMessages bounds the payload of every message the machine emits by
// max, what the runtime's message size limit (restate-server's
// message_size_limit, 32 MiB by default) lets through, less any room the
// runtime needs: it refuses larger ones. Such a message (a step's value, an output, a state
// value) fails the attempt with an ErrorMessage saying so instead, asking
// the runtime to pause the invocation (a retry after PauseFallbackDelay
// before v7): a retry would only produce it again. max <= 0 means no bound.
func (m *Machine) LimitMessages(max int) { m.maxSend = max }

// hold accounts for a journal frame of n payload bytes.
func (m *Machine) hold(t wire.MessageType, n int) error {
	m.held += n
	if m.maxHeld <= 0 || m.held <= m.maxHeld {
		return nil
	}
	e := newError(CodeProtocolViolation, "the invocation's journal exceeds the %d bytes this endpoint holds per invocation (%s of %d bytes brings it to %d); the same journal is replayed on every retry, so raise the endpoint's journal bound and resume the invocation", m.maxHeld, t, n, m.held)
	e.Pause = true
	m.Fail(e)
	return e
}

// Version is the negotiated protocol version.
func (m *Machine) Version() int { return m.version }

// Ready reports that the StartMessage and every known entry arrived: the
// handler may run.
func (m *Machine) Ready() bool { return m.phase == processing }

// Done reports that the terminal message (End, Suspension or Error) was
// emitted; it may still be waiting in the output buffer.
func (m *Machine) Done() bool { return m.phase == closed }

// Terminal is the type of the terminal message emitted, valid once Done.
func (m *Machine) Terminal() wire.MessageType { return m.terminal }

// Failure is the attempt failure emitted as ErrorMessage, if any.
func (m *Machine) Failure() *Error { return m.failure }

// Cancelled reports that the built-in CANCEL signal was received.
func (m *Machine) Cancelled() bool { return m.cancelSeq != 0 }

// Start is the StartMessage, nil before it arrived.
func (m *Machine) Start() *servicev1.StartMessage { return m.start }

// InvocationID is the printable invocation id (StartMessage.debug_id).
func (m *Machine) InvocationID() string { return m.start.GetDebugId() }

// Key is the virtual object or workflow key, empty for plain services.
func (m *Machine) Key() string { return m.start.GetKey() }

// Replaying reports that the next handler command is served from the
// replayed journal rather than produced anew.
func (m *Machine) Replaying() bool { return m.cmdIndex < len(m.commands) }

// TakeOutput returns the encoded frames produced since the last call and
// continues into spare[:0], so a caller can double-buffer without copying.
// The returned slice belongs to the caller.
func (m *Machine) TakeOutput(spare []byte) []byte {
	out := m.out
	m.out = spare[:0]
	return out
}

// Pending reports whether output is waiting to be taken.
func (m *Machine) Pending() bool { return len(m.out) > 0 }

// emit appends one frame. Encoding our own well-formed messages cannot
// fail; should it, the attempt fails with 500 rather than sending garbage.
func (m *Machine) emit(t wire.MessageType, flags uint16, msg proto.Message) {
	before := len(m.out)
	out, err := wire.AppendFrame(m.out, t, flags, msg)
	m.out = out
	if err != nil {
		if m.phase != closed {
			m.Fail(newError(CodeInternal, "%v", err))
		}
		return
	}
	m.checkSize(before, t)
}

// checkSize drops the frame that starts at start when its payload is over
// maxSend, and fails the attempt saying why (see LimitMessages).
func (m *Machine) checkSize(start int, t wire.MessageType) {
	n := len(m.out) - start - wire.HeaderSize
	if m.maxSend <= 0 || n <= m.maxSend || t == wire.ErrorMessageType || m.phase == closed {
		return
	}
	m.out = m.out[:start]
	e := newError(CodeInternal, "the %s of %d bytes is over the %d bytes a message to the runtime may have (its message size limit, less room it needs), which it would refuse: make the value smaller (a step's result, the output, a state value), or raise the limit on both sides, and resume the invocation", t, n, m.maxSend)
	if r := m.proposing; t == wire.ProposeRunCompletionMessageType && r.index >= 0 {
		e = newError(CodeInternal, "the result of step %q makes a %d-byte message, over the %d bytes a message to the runtime may have (its message size limit, less room it needs), which it would refuse: make the value smaller, or raise the limit on both sides, and resume the invocation", r.name, n, m.maxSend)
		e.RelatedIndex, e.RelatedType, e.RelatedName = r.index, wire.RunCommandType, r.name
	}
	e.Pause = true
	m.Fail(e)
}

// Receive feeds one frame from the runtime. A frame that is illegal in
// the current state makes the machine emit ErrorMessage 571 (or 570) and
// close; the same error is returned. Frames arriving after the terminal
// message are rejected with a 571 error but emit nothing, because a stream
// carries exactly one terminal message.
func (m *Machine) Receive(h wire.Header, payload []byte) error {
	if m.phase == closed {
		return newError(CodeProtocolViolation, "received %s after the stream ended with %s", h.Type, m.terminal)
	}
	if !h.Type.Known() {
		return m.violation("unknown message type %#04x", uint16(h.Type))
	}
	switch m.phase {
	case waitingStart:
		if h.Type != wire.StartMessageType {
			return m.violation("expected StartMessage as the first message, got %s", h.Type)
		}
		if err := m.hold(h.Type, len(payload)); err != nil {
			return err
		}
		start, err := decodeStart(payload)
		if err != nil {
			return m.violation("malformed StartMessage: %v", err)
		}
		m.begin(start)
		return nil
	case replaying:
		if err := m.hold(h.Type, len(payload)); err != nil {
			return err
		}
		switch h.Type.Namespace() {
		case wire.Command, wire.Custom:
			if err := m.replayCommand(h, payload); err != nil {
				return err
			}
		case wire.Notification:
			if err := m.notification(h, payload); err != nil {
				return err
			}
		default:
			return m.violation("expected a journal entry while replaying (%d left), got %s", m.remaining, h.Type)
		}
		m.remaining--
		if m.remaining == 0 {
			m.phase = processing
		}
		return nil
	default: // processing
		switch {
		case h.Type.Namespace() == wire.Notification:
			if err := m.hold(h.Type, len(payload)); err != nil {
				return err
			}
			return m.notification(h, payload)
		case h.Type == wire.ProposeRunCompletionAckMessageType:
			return m.ack(payload)
		case h.Type == wire.CommandAckMessageType:
			return nil // an acknowledgement we never request carries no state
		case h.Type == wire.StartMessageType:
			return m.violation("received a second StartMessage")
		case h.Type.Namespace() == wire.Command || h.Type.Namespace() == wire.Custom:
			return m.violation("received command %s after the replayed journal ended", h.Type)
		default:
			return m.violation("unexpected %s from the runtime", h.Type)
		}
	}
}

// InputClosed records that the runtime will send nothing more on this
// stream (end of the request body). Waiting for a replay entry that can
// no longer arrive is a protocol violation; waiting for a completion then
// suspends (see Await).
func (m *Machine) InputClosed() {
	m.inputClosed = true
	switch m.phase {
	case waitingStart:
		m.violation("the request body ended before StartMessage")
	case replaying:
		m.violation("the request body ended with %d of %d known entries missing", m.remaining, m.start.GetKnownEntries())
	}
}

// IsInputClosed reports whether InputClosed was called.
func (m *Machine) IsInputClosed() bool { return m.inputClosed }

func (m *Machine) begin(start *servicev1.StartMessage) {
	m.start = start
	m.remaining = start.GetKnownEntries()
	m.partial = start.GetPartialState()
	if n := len(start.GetStateMap()); n > 0 {
		m.state = make(map[string]stateValue, n)
		for _, e := range start.GetStateMap() {
			m.state[string(e.GetKey())] = stateValue{value: e.GetValue(), present: true}
		}
	}
	if m.remaining == 0 {
		m.phase = processing
	} else {
		m.phase = replaying
	}
}

func (m *Machine) replayCommand(h wire.Header, payload []byte) error {
	var decoded any
	var err error
	switch h.Type {
	case wire.InputCommandType:
		decoded, err = decodeInput(payload)
	case wire.RunCommandType:
		decoded, err = decodeRun(payload)
	case wire.SleepCommandType:
		decoded, err = decodeSleep(payload)
	case wire.CallCommandType:
		decoded, err = decodeCall(payload)
	case wire.OneWayCallCommandType:
		decoded, err = decodeOneWayCall(payload)
	default:
		decoded, err = wire.Decode(h, payload)
	}
	if err != nil {
		return m.violation("malformed replayed command at index %d: %v", len(m.commands), err)
	}
	c := command{typ: h.Type, msg: decoded}
	if msg, ok := decoded.(proto.Message); ok {
		c.name = commandName(msg)
		ids, n := completionIDs(msg)
		for _, e := range ids[:n] {
			if err := m.addExpectation(e, len(m.commands), c); err != nil {
				return err
			}
		}
	}
	m.commands = append(m.commands, c)
	return nil
}

// addExpectation records the notification type a command's completion id
// must carry and checks it against a notification that arrived earlier.
func (m *Machine) addExpectation(e expectation, at int, c command) error {
	if find(m.expect, m.expectAt, e.id) >= 0 {
		return m.violation("completion id %d of command %d (%s) is already used by another command", e.id, at, c.typ)
	}
	m.expect = appendIndexed(m.expect, &m.expectAt, e)
	if n := m.findNotif(e.id); n != nil && n.typ != e.typ {
		return m.violation("completion id %d of command %d (%s) was completed by %s, expected %s", e.id, at, c.typ, n.typ, e.typ)
	}
	return nil
}

func (m *Machine) findNotif(id uint32) *notification {
	if i := find(m.notifs, m.notifAt, id); i >= 0 {
		return &m.notifs[i]
	}
	return nil
}

// findSignal is the received signal of index idx, nil if none arrived.
func (m *Machine) findSignal(idx uint32) *notification {
	if i := find(m.signals, m.signalAt, idx); i >= 0 {
		return &m.signals[i]
	}
	return nil
}

// findProposal is the run proposal of completion id, nil if none.
func (m *Machine) findProposal(id uint32) *proposal {
	if i := find(m.proposals, m.proposalAt, id); i >= 0 {
		return &m.proposals[i]
	}
	return nil
}

func (m *Machine) notification(h wire.Header, payload []byte) error {
	n, err := decodeNotification(payload)
	if err != nil {
		return m.violation("malformed %s: %v", h.Type, err)
	}
	m.seq++
	if h.Type == wire.SignalNotificationType {
		switch n.kind {
		case signalIdx:
			if n.id == cancelSignal {
				if m.cancelSeq == 0 {
					m.cancelSeq = m.seq
				}
				return nil
			}
			if n.variant == 0 {
				n.res, n.variant = Result{Void: true}, rVoid // a signal without a result is still delivered
			}
			if m.findSignal(n.id) == nil {
				m.signals = appendIndexed(m.signals, &m.signalAt, notification{id: n.id, typ: h.Type, res: n.res, seq: m.seq})
			}
			return nil
		case signalName:
			return nil // named signals: nothing in this SDK awaits them yet
		default:
			return m.violation("SignalNotification without signal id or name")
		}
	}
	if n.kind != completionID {
		return m.violation("%s without completion_id", h.Type)
	}
	allowed := allowedResults[h.Type]
	if n.variant == 0 && allowed == rVoid {
		n.res, n.variant = Result{Void: true}, rVoid // void-only: an unset Void is still void
	}
	if n.variant&allowed == 0 {
		return m.violation("%s for completion id %d carries a result variant that type does not allow", h.Type, n.id)
	}
	if i := find(m.expect, m.expectAt, n.id); i >= 0 && m.expect[i].typ != h.Type {
		return m.violation("completion id %d expects %s, got %s", n.id, m.expect[i].typ, h.Type)
	}
	if m.findNotif(n.id) != nil {
		return nil // a duplicate delivery carries nothing new; first one wins
	}
	m.notifs = appendIndexed(m.notifs, &m.notifAt, notification{id: n.id, typ: h.Type, res: n.res, seq: m.seq})
	return nil
}

func (m *Machine) ack(payload []byte) error {
	if !m.rules.runAck {
		return m.violation("ProposeRunCompletionAck is not part of protocol v%d", m.version)
	}
	ackID, err := decodeAck(payload)
	if err != nil {
		return m.violation("malformed ProposeRunCompletionAck: %v", err)
	}
	m.seq++
	if p := m.findProposal(ackID); p != nil {
		if p.ackSeq != 0 {
			return m.violation("duplicate ProposeRunCompletionAck for completion id %d", p.id)
		}
		p.ackSeq = m.seq
		return nil
	}
	return m.violation("ProposeRunCompletionAck for completion id %d, which has no pending proposal", ackID)
}

// violation emits ErrorMessage 571 and closes.
func (m *Machine) violation(format string, args ...any) *Error {
	e := newError(CodeProtocolViolation, format, args...)
	m.Fail(e)
	return e
}

// mismatch emits ErrorMessage 570 about command index i and closes.
func (m *Machine) mismatch(i int, format string, args ...any) *Error {
	e := newError(CodeJournalMismatch, format, args...)
	if i < len(m.commands) {
		e.related(i, m.commands[i].typ, m.commands[i].name)
	} else {
		e.RelatedIndex = i
	}
	m.Fail(e)
	return e
}
