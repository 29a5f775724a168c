package journal

import (
	"bytes"
	"fmt"
	"slices"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// GetState reads key. When the StartMessage state is complete (not
// partial) or holds the key, the read is served locally and recorded as
// GetEagerStateCommand: found reports presence and lazyID is 0. Otherwise a
// GetLazyStateCommand is issued and the caller awaits lazyID (a Void result
// means not found). On replay the recorded command decides.
func (m *Machine) GetState(key string) (value []byte, found bool, lazyID uint32, err error) {
	i, c, err := m.nextCommand()
	if err != nil {
		return nil, false, 0, err
	}
	if c != nil {
		switch msg := c.msg.(type) {
		case *servicev1.GetEagerStateCommandMessage:
			if string(msg.GetKey()) == key && c.name == "" {
				if v, ok := msg.GetResult().(*servicev1.GetEagerStateCommandMessage_Value); ok {
					return v.Value.GetContent(), true, 0, nil
				}
				return nil, false, 0, nil
			}
		case *servicev1.GetLazyStateCommandMessage:
			if string(msg.GetKey()) == key && c.name == "" {
				m.bump(msg.GetResultCompletionId())
				return nil, false, msg.GetResultCompletionId(), nil
			}
		}
		return nil, false, 0, m.mismatchIssued(i, c, fmt.Sprintf("a read of state key %q", key))
	}
	sv, known := m.state[key]
	v, ok := sv.value, sv.present
	if known || !m.partial {
		msg := &servicev1.GetEagerStateCommandMessage{Key: []byte(key)}
		if ok {
			msg.Result = &servicev1.GetEagerStateCommandMessage_Value{Value: &servicev1.Value{Content: v}}
		} else {
			msg.Result = &servicev1.GetEagerStateCommandMessage_Void{Void: &servicev1.Void{}}
		}
		m.emit(wire.GetEagerStateCommandType, 0, msg)
		return v, ok, 0, nil
	}
	id, err := m.newCompletion(i, wire.GetLazyStateCommandType, wire.GetLazyStateCompletionNotificationType)
	if err != nil {
		return nil, false, 0, err
	}
	m.emit(wire.GetLazyStateCommandType, 0, &servicev1.GetLazyStateCommandMessage{Key: []byte(key), ResultCompletionId: id})
	return nil, false, id, nil
}

// GetStateKeys lists the state keys, sorted, eagerly when the local view is
// complete; otherwise it issues GetLazyStateKeysCommand and the caller
// awaits lazyID (the Result's StateKeys).
func (m *Machine) GetStateKeys() (keys [][]byte, lazyID uint32, err error) {
	i, c, err := m.nextCommand()
	if err != nil {
		return nil, 0, err
	}
	if c != nil {
		switch msg := c.msg.(type) {
		case *servicev1.GetEagerStateKeysCommandMessage:
			if c.name == "" {
				return msg.GetValue().GetKeys(), 0, nil
			}
		case *servicev1.GetLazyStateKeysCommandMessage:
			if c.name == "" {
				m.bump(msg.GetResultCompletionId())
				return nil, msg.GetResultCompletionId(), nil
			}
		}
		return nil, 0, m.mismatchIssued(i, c, "a listing of the state keys")
	}
	if !m.partial {
		keys = make([][]byte, 0, len(m.state))
		for k, sv := range m.state {
			if sv.present {
				keys = append(keys, []byte(k))
			}
		}
		slices.SortFunc(keys, bytes.Compare)
		m.emit(wire.GetEagerStateKeysCommandType, 0, &servicev1.GetEagerStateKeysCommandMessage{Value: &servicev1.StateKeys{Keys: keys}})
		return keys, 0, nil
	}
	id, err := m.newCompletion(i, wire.GetLazyStateKeysCommandType, wire.GetLazyStateKeysCompletionNotificationType)
	if err != nil {
		return nil, 0, err
	}
	m.emit(wire.GetLazyStateKeysCommandType, 0, &servicev1.GetLazyStateKeysCommandMessage{ResultCompletionId: id})
	return nil, id, nil
}

// SetState sets key to value and updates the local view so later reads in
// this invocation see it. A replayed one must write the same value, as the
// SDKs check: later reads see what Restate stored.
func (m *Machine) SetState(key string, value []byte) error {
	i, c, err := m.nextCommand()
	if err != nil {
		return err
	}
	if c != nil {
		msg, ok := c.msg.(*servicev1.SetStateCommandMessage)
		if !ok || string(msg.GetKey()) != key || c.name != "" {
			return m.mismatchIssued(i, c, fmt.Sprintf("%s of state key %q", wire.SetStateCommandType, key))
		}
		if !bytes.Equal(msg.GetValue().GetContent(), value) {
			return m.mismatchIssued(i, c, fmt.Sprintf("%s of state key %q with another value (%s)", wire.SetStateCommandType, key, valueDiff(msg.GetValue().GetContent(), value)))
		}
	} else {
		m.emit(wire.SetStateCommandType, 0, &servicev1.SetStateCommandMessage{Key: []byte(key), Value: &servicev1.Value{Content: value}})
	}
	m.remember(key, stateValue{value: value, present: true})
	return nil
}

// ClearState removes key, locally too.
func (m *Machine) ClearState(key string) error {
	i, c, err := m.nextCommand()
	if err != nil {
		return err
	}
	if c != nil {
		msg, ok := c.msg.(*servicev1.ClearStateCommandMessage)
		if !ok || string(msg.GetKey()) != key || c.name != "" {
			return m.mismatchIssued(i, c, fmt.Sprintf("%s of state key %q", wire.ClearStateCommandType, key))
		}
	} else {
		m.emit(wire.ClearStateCommandType, 0, &servicev1.ClearStateCommandMessage{Key: []byte(key)})
	}
	m.remember(key, stateValue{})
	return nil
}

// ClearAllState removes every key; afterwards the local view is complete
// (empty), so reads no longer need the runtime.
func (m *Machine) ClearAllState() error {
	i, c, err := m.nextCommand()
	if err != nil {
		return err
	}
	if c != nil {
		if err := m.expectCommand(i, c, wire.ClearAllStateCommandType, ""); err != nil {
			return err
		}
	} else {
		m.emit(wire.ClearAllStateCommandType, 0, &servicev1.ClearAllStateCommandMessage{})
	}
	clear(m.state)
	m.partial = false
	return nil
}

func (m *Machine) remember(key string, v stateValue) {
	if m.state == nil {
		m.state = make(map[string]stateValue)
	}
	m.state[key] = v
}
