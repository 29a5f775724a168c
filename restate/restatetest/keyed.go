package restatetest

import (
	"slices"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"google.golang.org/protobuf/proto"
)

// StartKeyed builds the StartMessage of a keyed invocation: its key, the
// eager state (nil: none) and whether that state is partial.
func StartKeyed(id, key string, knownEntries uint32, state map[string]string, partial bool) *servicev1.StartMessage {
	s := Start(id, knownEntries)
	s.Key, s.PartialState = key, partial
	names := make([]string, 0, len(state))
	for k := range state {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		s.StateMap = append(s.StateMap, &servicev1.StartMessage_StateEntry{Key: []byte(k), Value: []byte(state[k])})
	}
	return s
}

// Signal builds the SignalNotification of signal index idx (an awakeable)
// carrying value.
func Signal(idx uint32, value []byte) *servicev1.SignalNotificationMessage {
	return &servicev1.SignalNotificationMessage{SignalId: &servicev1.SignalNotificationMessage_Idx{Idx: idx},
		Result: &servicev1.SignalNotificationMessage_Value{Value: &servicev1.Value{Content: value}}}
}

// SignalFailure builds the SignalNotification rejecting signal index idx.
func SignalFailure(idx uint32, code uint32, message string) *servicev1.SignalNotificationMessage {
	return &servicev1.SignalNotificationMessage{SignalId: &servicev1.SignalNotificationMessage_Idx{Idx: idx},
		Result: &servicev1.SignalNotificationMessage_Failure{Failure: &servicev1.Failure{Code: code, Message: message}}}
}

// Keyed answers the commands of keyed services the way restate-server
// does, against its own durable store: lazy state reads and listings from
// State, and workflow promises (a GetPromise is answered once the promise
// is completed, by this invocation or earlier; a second completion fails
// with 409). State writes are applied to State. Use its Complete as (part
// of) Play's inject.
type Keyed struct {
	// State is the object's durable state; writes apply to it.
	State map[string][]byte
	// Promises are the completed promises: value, or failure.
	Promises map[string]*servicev1.Failure
	values   map[string][]byte
	waiting  map[string][]uint32 // GetPromise completion ids per promise
}

// Resolve completes promise name with value, as another invocation would.
// The GetPromise answers it releases are returned.
func (k *Keyed) Resolve(name string, value []byte) []proto.Message {
	return k.complete(name, value, nil)
}

func (k *Keyed) complete(name string, value []byte, failure *servicev1.Failure) []proto.Message {
	if k.Promises == nil {
		k.Promises, k.values = map[string]*servicev1.Failure{}, map[string][]byte{}
	}
	k.Promises[name], k.values[name] = failure, value
	var out []proto.Message
	for _, id := range k.waiting[name] {
		out = append(out, k.getAnswer(id, name))
	}
	delete(k.waiting, name)
	return out
}

func (k *Keyed) done(name string) bool {
	_, ok := k.Promises[name]
	return ok
}

func (k *Keyed) getAnswer(id uint32, name string) proto.Message {
	n := &servicev1.GetPromiseCompletionNotificationMessage{CompletionId: id}
	if f := k.Promises[name]; f != nil {
		n.Result = &servicev1.GetPromiseCompletionNotificationMessage_Failure{Failure: f}
	} else {
		n.Result = &servicev1.GetPromiseCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: k.values[name]}}
	}
	return n
}

// Complete returns the notifications restate-server sends for f.
func (k *Keyed) Complete(f Frame) []proto.Message {
	if k.State == nil {
		k.State = map[string][]byte{}
	}
	switch m := f.Message.(type) {
	case *servicev1.SetStateCommandMessage:
		k.State[string(m.GetKey())] = m.GetValue().GetContent()
	case *servicev1.ClearStateCommandMessage:
		delete(k.State, string(m.GetKey()))
	case *servicev1.ClearAllStateCommandMessage:
		clear(k.State)
	case *servicev1.GetLazyStateCommandMessage:
		n := &servicev1.GetLazyStateCompletionNotificationMessage{CompletionId: m.GetResultCompletionId()}
		if v, ok := k.State[string(m.GetKey())]; ok {
			n.Result = &servicev1.GetLazyStateCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: v}}
		} else {
			n.Result = &servicev1.GetLazyStateCompletionNotificationMessage_Void{Void: &servicev1.Void{}}
		}
		return []proto.Message{n}
	case *servicev1.GetLazyStateKeysCommandMessage:
		keys := &servicev1.StateKeys{}
		for name := range k.State {
			keys.Keys = append(keys.Keys, []byte(name))
		}
		return []proto.Message{&servicev1.GetLazyStateKeysCompletionNotificationMessage{CompletionId: m.GetResultCompletionId(), StateKeys: keys}}
	case *servicev1.GetPromiseCommandMessage:
		if k.done(m.GetKey()) {
			return []proto.Message{k.getAnswer(m.GetResultCompletionId(), m.GetKey())}
		}
		if k.waiting == nil {
			k.waiting = map[string][]uint32{}
		}
		k.waiting[m.GetKey()] = append(k.waiting[m.GetKey()], m.GetResultCompletionId())
	case *servicev1.PeekPromiseCommandMessage:
		n := &servicev1.PeekPromiseCompletionNotificationMessage{CompletionId: m.GetResultCompletionId()}
		switch {
		case !k.done(m.GetKey()):
			n.Result = &servicev1.PeekPromiseCompletionNotificationMessage_Void{Void: &servicev1.Void{}}
		case k.Promises[m.GetKey()] != nil:
			n.Result = &servicev1.PeekPromiseCompletionNotificationMessage_Failure{Failure: k.Promises[m.GetKey()]}
		default:
			n.Result = &servicev1.PeekPromiseCompletionNotificationMessage_Value{Value: &servicev1.Value{Content: k.values[m.GetKey()]}}
		}
		return []proto.Message{n}
	case *servicev1.CompletePromiseCommandMessage:
		n := &servicev1.CompletePromiseCompletionNotificationMessage{CompletionId: m.GetResultCompletionId()}
		if k.done(m.GetKey()) {
			n.Result = &servicev1.CompletePromiseCompletionNotificationMessage_Failure{Failure: &servicev1.Failure{Code: 409, Message: "promise already completed"}}
			return []proto.Message{n}
		}
		n.Result = &servicev1.CompletePromiseCompletionNotificationMessage_Void{Void: &servicev1.Void{}}
		var released []proto.Message
		if f := m.GetCompletionFailure(); f != nil {
			released = k.complete(m.GetKey(), nil, f)
		} else {
			released = k.complete(m.GetKey(), m.GetCompletionValue().GetContent(), nil)
		}
		return append([]proto.Message{n}, released...)
	}
	return nil
}
