package proc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// FrameHeaderSize is the size of a binary frame header: one kind byte and
// a 4-byte big-endian payload length.
const FrameHeaderSize = 5

// smallFrame is the payload size up to which header and payload go out in
// one write (one syscall, one wakeup of the reader).
const smallFrame = 64 << 10

// ErrFrameTooLarge is returned by [ReadFrame] for a frame whose declared
// length exceeds the reader's limit; the stream cannot be trusted after it.
var ErrFrameTooLarge = errors.New("frame exceeds the size limit")

// WriteFrame writes one frame of the given kind.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if uint64(len(payload)) > 0xFFFFFFFF {
		return fmt.Errorf("frame payload of %d bytes exceeds 4 GiB", len(payload))
	}
	if len(payload) <= smallFrame {
		buf := make([]byte, FrameHeaderSize+len(payload))
		putHeader(buf, kind, len(payload))
		copy(buf[FrameHeaderSize:], payload)
		_, err := w.Write(buf)
		return err
	}
	var hdr [FrameHeaderSize]byte
	putHeader(hdr[:], kind, len(payload))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func putHeader(b []byte, kind byte, n int) {
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:FrameHeaderSize], uint32(n))
}

// ReadFrame reads one frame whose payload is at most limit bytes. A clean
// end of stream before a header is io.EOF; an end inside a frame is
// io.ErrUnexpectedEOF.
func ReadFrame(r *bufio.Reader, limit int) (kind byte, payload []byte, err error) {
	var hdr [FrameHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if uint64(n) > uint64(limit) {
		return hdr[0], nil, fmt.Errorf("%w: kind %q declares %d bytes, limit %d", ErrFrameTooLarge, hdr[0], n, limit)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return hdr[0], nil, err
	}
	return hdr[0], payload, nil
}
