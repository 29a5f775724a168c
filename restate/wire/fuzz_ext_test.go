package wire_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/fnbridge/fnbridge/restate/wire"
)

// FuzzFrameReader: arbitrary bytes never panic the reader or the decoder,
// and no payload above the limit is ever returned.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0}, uint16(64))
	f.Add([]byte{0x04, 0x11, 0x80, 0x00, 0xFF, 0xFF, 0xFF, 0xFF}, uint16(64))
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		max := int(limit) + 1
		r := wire.NewReader(bytes.NewReader(data), max)
		for {
			h, p, err := r.Next()
			if err != nil {
				if errors.Is(err, wire.ErrMessageTooLarge) && int(h.Length) <= max {
					t.Fatalf("rejected %d bytes under the limit %d", h.Length, max)
				}
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, wire.ErrMessageTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(p) > max || len(p) != int(h.Length) {
				t.Fatalf("payload of %d bytes (header %d, limit %d)", len(p), h.Length, max)
			}
			_, _ = wire.Decode(h, p)
		}
	})
}
