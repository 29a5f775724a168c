package journal

import (
	"errors"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// Status is the state of an awaited completion.
type Status uint8

const (
	// Pending: not there yet; wait for more input and Await again.
	Pending Status = iota
	// Ready: the Result is valid.
	Ready
	// Cancelled: the CANCEL signal arrived before the completion.
	Cancelled
	// Suspended: the completion cannot arrive on this stream; the machine
	// emitted SuspensionMessage and closed.
	Suspended
	// Closed: the machine had already ended (e.g. a protocol violation).
	Closed
)

func (s Status) String() string {
	return [...]string{"pending", "ready", "cancelled", "suspended", "closed"}[s]
}

// errNotReady is a caller bug: handler operations before Ready.
var errNotReady = errors.New("journal: handler operation before the replayed journal was received")

// errAfterLastRun is a caller bug: a command after ProposeLastRun, whose
// result the handler was handed before it was durable.
var errAfterLastRun = errors.New("journal: a command after the run proposed as the handler's last (ProposeLastRun); only the Output may follow it")

// nextCommand advances the handler's command index and returns the
// replayed command at that index, or nil when the handler is producing new
// commands.
func (m *Machine) nextCommand() (int, *command, error) {
	switch m.phase {
	case closed:
		return 0, nil, ErrClosed
	case processing:
	default:
		return 0, nil, errNotReady
	}
	if m.outputNext {
		// The run's result went to the handler before it was durable:
		// nothing else may be journaled on it.
		m.Fail(newError(CodeInternal, "%v", errAfterLastRun))
		return 0, nil, errAfterLastRun
	}
	i := m.cmdIndex
	m.cmdIndex++
	if i < len(m.commands) {
		return i, &m.commands[i], nil
	}
	return i, nil, nil
}

// expectCommand checks a replayed command against what the handler issues.
func (m *Machine) expectCommand(i int, c *command, t wire.MessageType, name string) error {
	if c.typ != t || c.name != name {
		return m.mismatch(i, "journal mismatch at command index %d: the journal has %s %q, the handler issued %s %q", i, c.typ, c.name, t, name)
	}
	return nil
}

// bump keeps newly allocated completion ids above every replayed one.
func (m *Machine) bump(id uint32) {
	if id >= m.nextCompletion {
		m.nextCompletion = id + 1
	}
}

// newCompletion allocates a completion id for a new command at index i.
func (m *Machine) newCompletion(i int, t, notif wire.MessageType) (uint32, error) {
	id := m.nextCompletion
	m.nextCompletion++
	if err := m.addExpectation(expectation{id, notif}, i, command{typ: t}); err != nil {
		return 0, err
	}
	return id, nil
}

// Input consumes the journal's first command, the InputCommand carrying
// the invocation's headers and payload.
func (m *Machine) Input() (*servicev1.InputCommandMessage, error) {
	switch m.phase {
	case closed:
		return nil, ErrClosed
	case processing:
	default:
		return nil, errNotReady
	}
	if m.cmdIndex != 0 {
		return nil, errors.New("journal: Input called twice")
	}
	if len(m.commands) == 0 {
		return nil, m.violation("the journal has no InputCommand (StartMessage.known_entries = %d)", m.start.GetKnownEntries())
	}
	in, ok := m.commands[0].msg.(*servicev1.InputCommandMessage)
	if !ok {
		return nil, m.violation("the journal starts with %s, expected InputCommand", m.commands[0].typ)
	}
	m.cmdIndex = 1
	return in, nil
}

// RunStart issues the run command named name and returns its completion id.
// execute reports that the caller must run the closure now and propose its
// result with ProposeRun: the run is new, or it was journaled without a
// completion by an earlier attempt. When execute is false the run's
// recorded result is available through Await; the closure must not run.
func (m *Machine) RunStart(name string) (id uint32, execute bool, err error) {
	i, c, err := m.nextCommand()
	if err != nil {
		return 0, false, err
	}
	if c != nil {
		if err := m.expectCommand(i, c, wire.RunCommandType, name); err != nil {
			return 0, false, err
		}
		id = c.msg.(*servicev1.RunCommandMessage).GetResultCompletionId()
		m.bump(id)
		if m.findNotif(id) != nil {
			return id, false, nil
		}
		if i+1 < len(m.commands) {
			return 0, false, m.mismatch(i, "run %q (completion id %d) has no recorded completion, yet the journal continues with %s after it", name, id, m.commands[i+1].typ)
		}
		return id, true, nil
	}
	id, err = m.newCompletion(i, wire.RunCommandType, wire.RunCompletionNotificationType)
	if err != nil {
		return 0, false, err
	}
	m.emitRunCommand(id, name)
	return id, true, nil
}

// ProposeRun proposes the result of the run with completion id id. On v7 the
// proposal requests an ack (the result becomes durable when
// ProposeRunCompletionAck arrives); on v5 and v6 the runtime answers with
// RunCompletionNotification. Either way, Await(id) reports the outcome.
func (m *Machine) ProposeRun(id uint32, res Result) error {
	return m.ProposeRunOf(id, res, -1, "")
}

// ProposeRunOf is ProposeRun for the run at command index index named
// name (the RunCommand RunStart wrote or replayed): a proposal over the
// message limit fails the attempt naming that step, as the user wrote it.
func (m *Machine) ProposeRunOf(id uint32, res Result, index int, name string) error {
	m.proposing = runRef{index: index, name: name}
	defer func() { m.proposing = runRef{index: -1} }()
	if m.phase == closed {
		return ErrClosed
	}
	if m.findNotif(id) != nil {
		return errors.New("journal: ProposeRun for a run that already has a completion")
	}
	var flags uint16
	if m.rules.runAck {
		flags = wire.FlagRequestedAck
		m.proposals = appendIndexed(m.proposals, &m.proposalAt, proposal{id: id, res: res})
	}
	if res.Failure != nil {
		msg := &servicev1.ProposeRunCompletionMessage{ResultCompletionId: id,
			Result: &servicev1.ProposeRunCompletionMessage_Failure{Failure: failureTo(res.Failure)}}
		m.emit(wire.ProposeRunCompletionMessageType, flags, msg)
	} else {
		// An empty value is still a value, never "unset".
		m.emitProposeValue(id, flags, res.Value)
	}
	return nil
}

// ProposeLastRun is ProposeRun for a run whose result the handler's
// Output follows at once, before the proposal is durable: the runtime
// journals what a stream carries in order, so the Output is never
// journaled without the run's completion before it, and a retry after a
// failure in between replays the recorded run. Any command other than
// the Output after it is refused (the caller handed out a result that
// was not durable yet).
func (m *Machine) ProposeLastRun(id uint32, res Result) error {
	return m.ProposeLastRunOf(id, res, -1, "")
}

// ProposeLastRunOf is ProposeLastRun naming the run as ProposeRunOf does.
func (m *Machine) ProposeLastRunOf(id uint32, res Result, index int, name string) error {
	if err := m.ProposeRunOf(id, res, index, name); err != nil {
		return err
	}
	m.outputNext = true
	return nil
}

// Await reports the state of completion id: AwaitMany over one id, with
// its result when Ready.
func (m *Machine) Await(id uint32) (Result, Status) {
	ids := [1]uint32{id}
	st := m.AwaitMany(ids[:], AllCompleted)
	if st != Ready {
		return Result{}, st
	}
	res, _ := m.Completed(id)
	return res, st
}

// Output records the invocation's result (value or terminal failure) and
// ends the stream with EndMessage. A replayed OutputCommand is not sent
// again. Journal entries the handler did not reproduce are a mismatch.
func (m *Machine) Output(res Result) error {
	m.outputNext = false
	i, c, err := m.nextCommand()
	if err != nil {
		return err
	}
	if c != nil {
		if err := m.expectCommand(i, c, wire.OutputCommandType, ""); err != nil {
			return err
		}
	} else {
		if res.Failure != nil {
			m.emit(wire.OutputCommandType, 0, &servicev1.OutputCommandMessage{
				Result: &servicev1.OutputCommandMessage_Failure{Failure: failureTo(res.Failure)}})
		} else {
			m.emitOutputValue(res.Value)
		}
		if m.phase == closed { // too large to send (see LimitMessages)
			return ErrClosed
		}
	}
	if m.cmdIndex < len(m.commands) {
		return m.mismatch(m.cmdIndex, "the handler finished after %d commands but the journal has %d", m.cmdIndex, len(m.commands))
	}
	m.emitEnd()
	m.end(wire.EndMessageType)
	return nil
}

// Fail ends the attempt with ErrorMessage e; the runtime retries it per
// its policy (or pauses it when e.Pause). Fields the negotiated version
// lacks are mapped: Pause becomes a long next_retry_delay before v7.
func (m *Machine) Fail(e *Error) {
	if m.phase == closed {
		return
	}
	msg := &servicev1.ErrorMessage{Code: uint32(e.Code), Message: e.Message, Stacktrace: e.Stacktrace}
	if e.RelatedIndex >= 0 {
		idx := uint32(e.RelatedIndex)
		msg.RelatedCommandIndex = &idx
		if e.RelatedName != "" {
			msg.RelatedCommandName = &e.RelatedName
		}
		if e.RelatedType != 0 {
			t := uint32(e.RelatedType)
			msg.RelatedCommandType = &t
		}
	}
	delay := e.RetryAfter
	if e.Pause {
		if m.rules.errorBehavior {
			msg.Behavior = servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE
		} else if delay <= 0 {
			// The caller named no delay: wait long rather than hot-loop.
			delay = PauseFallbackDelay
		}
	}
	if delay > 0 && !(e.Pause && m.rules.errorBehavior) {
		ms := uint64(delay.Milliseconds())
		msg.NextRetryDelay = &ms
	}
	m.failure = e
	m.emit(wire.ErrorMessageType, 0, msg)
	m.end(wire.ErrorMessageType)
}

func (m *Machine) end(t wire.MessageType) {
	m.phase = closed
	m.terminal = t
}

// CommandIndex is the index the handler's next command will get; Fail
// callers use it to locate failures.
func (m *Machine) CommandIndex() int { return m.cmdIndex }

// emitRunCommandProto is RunCommand through the generated encoder, which
// rejects a name that is not valid UTF-8 (failing the attempt).
func (m *Machine) emitRunCommandProto(id uint32, name string) {
	m.emit(wire.RunCommandType, 0, &servicev1.RunCommandMessage{ResultCompletionId: id, Name: name})
}
