package wire

import "encoding/binary"

// HeaderSize is the size in bytes of the fixed frame header.
const HeaderSize = 8

// FlagRequestedAck is the REQUESTED_ACK bit: the most significant bit of the
// 16-bit flag block. Only ProposeRunCompletionMessage may set it.
const FlagRequestedAck uint16 = 0x8000

// Header is a decoded frame header: 16-bit type, 16 bits of flags (the
// REQUESTED_ACK bit and 15 reserved bits), 32-bit payload length.
type Header struct {
	Type   MessageType
	Flags  uint16
	Length uint32
}

// RequestedAck reports the REQUESTED_ACK flag.
func (h Header) RequestedAck() bool { return h.Flags&FlagRequestedAck != 0 }

// PutHeader writes h into b[:8] in network byte order. It never allocates.
func PutHeader(b []byte, h Header) {
	_ = b[7]
	binary.BigEndian.PutUint16(b[0:2], uint16(h.Type))
	binary.BigEndian.PutUint16(b[2:4], h.Flags)
	binary.BigEndian.PutUint32(b[4:8], h.Length)
}

// ParseHeader decodes b[:8]. It never allocates; b must hold 8 bytes.
func ParseHeader(b []byte) Header {
	_ = b[7]
	return Header{
		Type:   MessageType(binary.BigEndian.Uint16(b[0:2])),
		Flags:  binary.BigEndian.Uint16(b[2:4]),
		Length: binary.BigEndian.Uint32(b[4:8]),
	}
}
