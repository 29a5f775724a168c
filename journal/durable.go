package journal

import (
	"bytes"
	"fmt"
	"slices"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// CallTarget is the callee and request of a Call or OneWayCall.
type CallTarget struct {
	Service, Handler string
	// Key addresses a virtual object or workflow; empty for services.
	Key string
	// IdempotencyKey, when set, deduplicates the call at the runtime.
	IdempotencyKey string
	Headers        map[string]string
	Parameter      []byte
}

func (c CallTarget) String() string {
	s := c.Service + "/" + c.Handler
	if c.Key != "" {
		s += " (key " + fmt.Sprintf("%q", c.Key) + ")"
	}
	return s
}

// headers encodes c.Headers sorted by name, so the command is the same
// bytes on every attempt.
func (c CallTarget) headers() []*servicev1.Header {
	if len(c.Headers) == 0 {
		return nil
	}
	keys := make([]string, 0, len(c.Headers))
	for k := range c.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	hs := make([]*servicev1.Header, len(keys))
	for i, k := range keys {
		hs[i] = &servicev1.Header{Key: k, Value: c.Headers[k]}
	}
	return hs
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// describe names a replayed command for mismatch errors.
func describe(c *command) string {
	switch msg := c.msg.(type) {
	case *servicev1.CallCommandMessage:
		return fmt.Sprintf("%s to %s", c.typ, CallTarget{Service: msg.GetServiceName(), Handler: msg.GetHandlerName(), Key: msg.GetKey()})
	case *servicev1.OneWayCallCommandMessage:
		return fmt.Sprintf("%s to %s", c.typ, CallTarget{Service: msg.GetServiceName(), Handler: msg.GetHandlerName(), Key: msg.GetKey()})
	case *servicev1.GetPromiseCommandMessage:
		return fmt.Sprintf("%s of promise %q", c.typ, msg.GetKey())
	case *servicev1.PeekPromiseCommandMessage:
		return fmt.Sprintf("%s of promise %q", c.typ, msg.GetKey())
	case *servicev1.CompletePromiseCommandMessage:
		return fmt.Sprintf("%s of promise %q", c.typ, msg.GetKey())
	case *servicev1.CompleteAwakeableCommandMessage:
		return fmt.Sprintf("%s of awakeable %q", c.typ, msg.GetAwakeableId())
	case *servicev1.SendSignalCommandMessage:
		return fmt.Sprintf("%s to %s", c.typ, msg.GetTargetInvocationId())
	case *servicev1.SetStateCommandMessage:
		return fmt.Sprintf("%s of state key %q", c.typ, msg.GetKey())
	case *servicev1.ClearStateCommandMessage:
		return fmt.Sprintf("%s of state key %q", c.typ, msg.GetKey())
	case *servicev1.GetEagerStateCommandMessage:
		return fmt.Sprintf("%s of state key %q", c.typ, msg.GetKey())
	case *servicev1.GetLazyStateCommandMessage:
		return fmt.Sprintf("%s of state key %q", c.typ, msg.GetKey())
	}
	if c.name != "" {
		return fmt.Sprintf("%s %q", c.typ, c.name)
	}
	return c.typ.String()
}

// mismatchIssued fails with 570: the journal's command i is not what the
// handler issued (issued describes the latter).
func (m *Machine) mismatchIssued(i int, c *command, issued string) error {
	return m.mismatch(i, "journal mismatch at command index %d: the journal has %s, the handler issued %s", i, describe(c), issued)
}

// sameCall reports whether a replayed call matches the one issued. Headers
// and the invoke time are not compared: they may legitimately differ
// between attempts (tracing headers, now + delay).
func sameCall(service, handler, key, idem string, param []byte, t CallTarget) bool {
	return service == t.Service && handler == t.Handler && key == t.Key && idem == t.IdempotencyKey && bytes.Equal(param, t.Parameter)
}

// callDiff says how a replayed call to the same callee differs from the
// one issued, for the mismatch error, whose two sides would otherwise read
// the same; "" when the callee differs (the sides name it).
func callDiff(service, handler, key, idem string, param []byte, t CallTarget) string {
	switch {
	case service != t.Service || handler != t.Handler || key != t.Key:
		return ""
	case idem != t.IdempotencyKey:
		return fmt.Sprintf(" with another idempotency key (the journal's %q, the handler's %q)", idem, t.IdempotencyKey)
	}
	return " with another input (" + valueDiff(param, t.Parameter) + ")"
}

// Sleep issues a SleepCommand waking at wakeUpMs (milliseconds since the
// Unix epoch; the caller owns the clock) and returns its completion id,
// which SleepCompletionNotification completes. A replayed sleep keeps its
// recorded wake-up time.
func (m *Machine) Sleep(wakeUpMs uint64) (uint32, error) {
	i, c, err := m.nextCommand()
	if err != nil {
		return 0, err
	}
	if c != nil {
		msg, ok := c.msg.(*servicev1.SleepCommandMessage)
		if !ok {
			return 0, m.mismatchIssued(i, c, wire.SleepCommandType.String())
		}
		m.bump(msg.GetResultCompletionId())
		return msg.GetResultCompletionId(), nil
	}
	id, err := m.newCompletion(i, wire.SleepCommandType, wire.SleepCompletionNotificationType)
	if err != nil {
		return 0, err
	}
	m.emit(wire.SleepCommandType, 0, &servicev1.SleepCommandMessage{WakeUpTime: wakeUpMs, ResultCompletionId: id})
	return id, nil
}

// Call issues a CallCommand and returns its two completion ids: the
// callee's invocation id (CallInvocationIdCompletionNotification) and its
// result (CallCompletionNotification). A replayed call must have the same
// target, key, idempotency key and parameter.
func (m *Machine) Call(t CallTarget) (invocationID, result uint32, err error) {
	i, c, err := m.nextCommand()
	if err != nil {
		return 0, 0, err
	}
	issued := fmt.Sprintf("%s to %s", wire.CallCommandType, t)
	if c != nil {
		msg, ok := c.msg.(*servicev1.CallCommandMessage)
		if !ok || !sameCall(msg.GetServiceName(), msg.GetHandlerName(), msg.GetKey(), msg.GetIdempotencyKey(), msg.GetParameter(), t) {
			if ok {
				issued += callDiff(msg.GetServiceName(), msg.GetHandlerName(), msg.GetKey(), msg.GetIdempotencyKey(), msg.GetParameter(), t)
			}
			return 0, 0, m.mismatchIssued(i, c, issued)
		}
		m.bump(msg.GetInvocationIdNotificationIdx())
		m.bump(msg.GetResultCompletionId())
		return msg.GetInvocationIdNotificationIdx(), msg.GetResultCompletionId(), nil
	}
	if invocationID, err = m.newCompletion(i, wire.CallCommandType, wire.CallInvocationIdCompletionNotificationType); err != nil {
		return 0, 0, err
	}
	if result, err = m.newCompletion(i, wire.CallCommandType, wire.CallCompletionNotificationType); err != nil {
		return 0, 0, err
	}
	m.emit(wire.CallCommandType, 0, &servicev1.CallCommandMessage{ServiceName: t.Service, HandlerName: t.Handler,
		Parameter: t.Parameter, Headers: t.headers(), Key: t.Key, IdempotencyKey: optional(t.IdempotencyKey),
		InvocationIdNotificationIdx: invocationID, ResultCompletionId: result})
	return invocationID, result, nil
}

// OneWayCall issues a OneWayCallCommand run at invokeTimeMs (milliseconds
// since the Unix epoch; 0 means now) and returns the completion id of the
// callee's invocation id. A replayed one-way call must match like Call's.
func (m *Machine) OneWayCall(t CallTarget, invokeTimeMs uint64) (invocationID uint32, err error) {
	i, c, err := m.nextCommand()
	if err != nil {
		return 0, err
	}
	issued := fmt.Sprintf("%s to %s", wire.OneWayCallCommandType, t)
	if c != nil {
		msg, ok := c.msg.(*servicev1.OneWayCallCommandMessage)
		if !ok || !sameCall(msg.GetServiceName(), msg.GetHandlerName(), msg.GetKey(), msg.GetIdempotencyKey(), msg.GetParameter(), t) {
			if ok {
				issued += callDiff(msg.GetServiceName(), msg.GetHandlerName(), msg.GetKey(), msg.GetIdempotencyKey(), msg.GetParameter(), t)
			}
			return 0, m.mismatchIssued(i, c, issued)
		}
		m.bump(msg.GetInvocationIdNotificationIdx())
		return msg.GetInvocationIdNotificationIdx(), nil
	}
	if invocationID, err = m.newCompletion(i, wire.OneWayCallCommandType, wire.CallInvocationIdCompletionNotificationType); err != nil {
		return 0, err
	}
	m.emit(wire.OneWayCallCommandType, 0, &servicev1.OneWayCallCommandMessage{ServiceName: t.Service, HandlerName: t.Handler,
		Parameter: t.Parameter, InvokeTime: invokeTimeMs, Headers: t.headers(), Key: t.Key,
		IdempotencyKey: optional(t.IdempotencyKey), InvocationIdNotificationIdx: invocationID})
	return invocationID, nil
}
