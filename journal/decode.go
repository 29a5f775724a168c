package journal

import (
	"errors"
	"fmt"
	"unicode/utf8"

	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// Hand-written decoders for the messages every invocation receives
// (StartMessage, InputCommand, RunCommand, notifications, acks). They
// follow proto3 decoding rules (unknown fields skipped, last scalar wins,
// strings must be UTF-8) but skip the reflective generated-code path,
// which dominated the endpoint's per-invocation CPU. Payload bytes are
// copied: the frame reader reuses its buffer.

var errUTF8 = errors.New("string field is not valid UTF-8")

// fieldIter walks the fields of one message.
type fieldIter struct {
	b   []byte
	num protowire.Number
	typ protowire.Type
	err error
}

func (it *fieldIter) next() bool {
	if it.err != nil || len(it.b) == 0 {
		return false
	}
	num, typ, n := protowire.ConsumeTag(it.b)
	if n < 0 {
		it.err = protowire.ParseError(n)
		return false
	}
	it.b, it.num, it.typ = it.b[n:], num, typ
	return true
}

func (it *fieldIter) fail(err error) {
	if it.err == nil {
		it.err = err
	}
}

func (it *fieldIter) skip() {
	n := protowire.ConsumeFieldValue(it.num, it.typ, it.b)
	if n < 0 {
		it.fail(protowire.ParseError(n))
		return
	}
	it.b = it.b[n:]
}

func (it *fieldIter) varint() uint64 {
	if it.typ != protowire.VarintType {
		it.fail(fmt.Errorf("field %d: wire type %d, want varint", it.num, it.typ))
		return 0
	}
	v, n := protowire.ConsumeVarint(it.b)
	if n < 0 {
		it.fail(protowire.ParseError(n))
		return 0
	}
	it.b = it.b[n:]
	return v
}

// bytes returns the raw length-delimited value, aliasing the input.
func (it *fieldIter) bytes() []byte {
	if it.typ != protowire.BytesType {
		it.fail(fmt.Errorf("field %d: wire type %d, want length-delimited", it.num, it.typ))
		return nil
	}
	v, n := protowire.ConsumeBytes(it.b)
	if n < 0 {
		it.fail(protowire.ParseError(n))
		return nil
	}
	it.b = it.b[n:]
	return v
}

func (it *fieldIter) copyBytes() []byte {
	v := it.bytes()
	if v == nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}

func (it *fieldIter) string() string {
	v := it.bytes()
	if !utf8.Valid(v) {
		it.fail(fmt.Errorf("field %d: %w", it.num, errUTF8))
		return ""
	}
	return string(v)
}

// decodeValue decodes a Value message, returning a copy of its content
// (never nil: a present Value is a value, even when empty).
func decodeValue(b []byte) ([]byte, error) {
	it := fieldIter{b: b}
	content := []byte{}
	for it.next() {
		if it.num == 1 {
			content = it.copyBytes()
			if content == nil {
				content = []byte{}
			}
		} else {
			it.skip()
		}
	}
	return content, it.err
}

func decodeFailure(b []byte) (*Failure, error) {
	it := fieldIter{b: b}
	var code uint64
	var msg string
	for it.next() {
		switch it.num {
		case 1:
			code = it.varint()
		case 2:
			msg = it.string()
		default:
			it.skip() // metadata (v6+) is not surfaced
		}
	}
	if code > 0xFFFF {
		code = uint64(CodeInternal)
	}
	return &Failure{Code: Code(code), Message: msg}, it.err
}

func decodeStart(b []byte) (*servicev1.StartMessage, error) {
	it := fieldIter{b: b}
	s := &servicev1.StartMessage{}
	for it.next() {
		switch it.num {
		case 1:
			s.Id = it.copyBytes()
		case 2:
			s.DebugId = it.string()
		case 3:
			s.KnownEntries = uint32(it.varint())
		case 4:
			e, err := decodeStateEntry(it.bytes())
			it.fail(err)
			s.StateMap = append(s.StateMap, e)
		case 5:
			s.PartialState = it.varint() != 0
		case 6:
			s.Key = it.string()
		case 7:
			s.RetryCountSinceLastStoredEntry = uint32(it.varint())
		case 8:
			s.DurationSinceLastStoredEntry = it.varint()
		case 9:
			s.RandomSeed = it.varint()
		case 10:
			v := it.string()
			s.Scope = &v
		case 11:
			v := it.string()
			s.LimitKey = &v
		case 12:
			v := it.string()
			s.IdempotencyKey = &v
		default:
			it.skip()
		}
	}
	return s, it.err
}

func decodeStateEntry(b []byte) (*servicev1.StartMessage_StateEntry, error) {
	it := fieldIter{b: b}
	e := &servicev1.StartMessage_StateEntry{}
	for it.next() {
		switch it.num {
		case 1:
			e.Key = it.copyBytes()
		case 2:
			e.Value = it.copyBytes()
		default:
			it.skip()
		}
	}
	return e, it.err
}

func decodeInput(b []byte) (*servicev1.InputCommandMessage, error) {
	it := fieldIter{b: b}
	in := &servicev1.InputCommandMessage{}
	for it.next() {
		switch it.num {
		case 1:
			h, err := decodeHeader(it.bytes())
			it.fail(err)
			in.Headers = append(in.Headers, h)
		case 12:
			in.Name = it.string()
		case 14:
			v, err := decodeValue(it.bytes())
			it.fail(err)
			in.Value = &servicev1.Value{Content: v}
		default:
			it.skip()
		}
	}
	return in, it.err
}

func decodeHeader(b []byte) (*servicev1.Header, error) {
	it := fieldIter{b: b}
	h := &servicev1.Header{}
	for it.next() {
		switch it.num {
		case 1:
			h.Key = it.string()
		case 2:
			h.Value = it.string()
		default:
			it.skip()
		}
	}
	return h, it.err
}

func decodeRun(b []byte) (*servicev1.RunCommandMessage, error) {
	it := fieldIter{b: b}
	r := &servicev1.RunCommandMessage{}
	for it.next() {
		switch it.num {
		case 11:
			r.ResultCompletionId = uint32(it.varint())
		case 12:
			r.Name = it.string()
		default:
			it.skip()
		}
	}
	return r, it.err
}

// notificationIDKind says which id a notification carries.
type notificationIDKind uint8

const (
	noID notificationIDKind = iota
	completionID
	signalIdx
	signalName
)

// decodedNotification is a notification parsed through the shared
// NotificationTemplate shape.
type decodedNotification struct {
	kind    notificationIDKind
	id      uint32
	name    string
	res     Result
	variant uint8 // one of the r* bits; 0 when no result is set
}

func decodeNotification(b []byte) (decodedNotification, error) {
	it := fieldIter{b: b}
	var n decodedNotification
	for it.next() {
		switch it.num {
		case 1:
			n.kind, n.id = completionID, uint32(it.varint())
		case 2:
			n.kind, n.id = signalIdx, uint32(it.varint())
		case 3:
			n.kind, n.name = signalName, it.string()
		case 4:
			it.bytes()
			n.res, n.variant = Result{Void: true}, rVoid
		case 5:
			v, err := decodeValue(it.bytes())
			it.fail(err)
			n.res, n.variant = Result{Value: v}, rValue
		case 6:
			f, err := decodeFailure(it.bytes())
			it.fail(err)
			n.res, n.variant = Result{Failure: f}, rFailure
		case 16:
			n.res, n.variant = Result{InvocationID: it.string()}, rInvocationID
		case 17:
			keys, err := decodeStateKeys(it.bytes())
			it.fail(err)
			n.res, n.variant = Result{StateKeys: keys}, rStateKeys
		default:
			it.skip()
		}
	}
	return n, it.err
}

func decodeStateKeys(b []byte) ([][]byte, error) {
	it := fieldIter{b: b}
	keys := [][]byte{}
	for it.next() {
		if it.num == 1 {
			k := it.copyBytes()
			if k == nil {
				k = []byte{}
			}
			keys = append(keys, k)
		} else {
			it.skip()
		}
	}
	return keys, it.err
}

func decodeAck(b []byte) (uint32, error) {
	it := fieldIter{b: b}
	var id uint32
	for it.next() {
		if it.num == 1 {
			id = uint32(it.varint())
		} else {
			it.skip()
		}
	}
	return id, it.err
}
