package wire

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"
)

// marshal appends without deterministic ordering: the protocol does not
// need it and it costs a sort per map.
var marshal = proto.MarshalOptions{}

// AppendFrame appends one frame (header and payload) for m to dst and
// returns the extended slice. With enough capacity in dst it allocates
// nothing. flags must be 0 unless t allows REQUESTED_ACK.
func AppendFrame(dst []byte, t MessageType, flags uint16, m proto.Message) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	dst, err = marshal.MarshalAppend(dst, m)
	if err != nil {
		return dst[:start], fmt.Errorf("encode %s: %w", t, err)
	}
	n := len(dst) - start - HeaderSize
	if n > math.MaxUint32 {
		return dst[:start], fmt.Errorf("encode %s: payload of %d bytes does not fit the 32-bit length", t, n)
	}
	PutHeader(dst[start:], Header{Type: t, Flags: flags, Length: uint32(n)})
	return dst, nil
}

// AppendMessage is AppendFrame with the type id taken from m.
func AppendMessage(dst []byte, flags uint16, m proto.Message) ([]byte, error) {
	t, ok := TypeOf(m)
	if !ok {
		return dst, fmt.Errorf("encode: %T is not a protocol frame", m)
	}
	return AppendFrame(dst, t, flags, m)
}

// Decode unmarshals a payload into the message the type table names for
// h.Type. Custom commands decode to *CustomEntry with a copy of the payload;
// unknown ids and malformed payloads are errors naming the type.
func Decode(h Header, payload []byte) (any, error) {
	if h.Type.Namespace() == Custom {
		return &CustomEntry{Type: h.Type, Payload: append([]byte(nil), payload...)}, nil
	}
	m := h.Type.New()
	if m == nil {
		return nil, fmt.Errorf("unknown message type %#04x", uint16(h.Type))
	}
	if err := proto.Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", h.Type, err)
	}
	return m, nil
}
