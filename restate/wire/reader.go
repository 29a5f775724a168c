package wire

import (
	"errors"
	"fmt"
	"io"
)

// DefaultMaxMessageSize is the payload limit used when none is configured;
// it matches restate-server's default message size limit.
const DefaultMaxMessageSize = 32 << 20

// ErrMessageTooLarge is wrapped by the error Reader.Next returns when a
// header announces a payload above the limit.
var ErrMessageTooLarge = errors.New("message too large")

// Reader reads frames from a stream, tolerating partial reads. It reuses one
// payload buffer, so a payload is valid only until the next call to Next.
// A Reader is not safe for concurrent use.
type Reader struct {
	r   io.Reader
	max uint32
	hdr [HeaderSize]byte
	buf []byte
}

// NewReader returns a Reader over r that rejects payloads larger than
// maxSize bytes (DefaultMaxMessageSize when maxSize <= 0).
func NewReader(r io.Reader, maxSize int) *Reader {
	if maxSize <= 0 || maxSize > int(^uint32(0)>>1) {
		maxSize = DefaultMaxMessageSize
	}
	return &Reader{r: r, max: uint32(maxSize)}
}

// Reset makes the Reader read from r, keeping its buffer.
func (r *Reader) Reset(src io.Reader) { r.r = src }

// Next returns the next frame. It returns io.EOF when the stream ends
// cleanly between frames, io.ErrUnexpectedEOF when it ends inside one, and
// an error wrapping ErrMessageTooLarge, before reading or allocating the
// payload, when the header announces more than the limit.
func (r *Reader) Next() (Header, []byte, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return Header{}, nil, err
	}
	h := ParseHeader(r.hdr[:])
	if h.Length > r.max {
		return h, nil, fmt.Errorf("%w: %s frame of %d bytes exceeds the limit of %d bytes", ErrMessageTooLarge, h.Type, h.Length, r.max)
	}
	p, err := r.payload(int(h.Length))
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, err
	}
	return h, p, nil
}

// eagerPayload is the payload size up to which the buffer is sized from the
// header at once; a larger one grows as its bytes arrive.
const eagerPayload = 64 << 10

// payload reads the n payload bytes into the reused buffer. The header's
// length is only a claim: a peer that announces 32 MiB and sends ten bytes
// must not cost 32 MiB, so beyond eagerPayload the buffer at most doubles
// per read, and memory follows the bytes received, not the bytes promised.
func (r *Reader) payload(n int) ([]byte, error) {
	if cap(r.buf) >= n || n <= eagerPayload {
		if cap(r.buf) < n {
			r.buf = make([]byte, n)
		}
		p := r.buf[:n]
		_, err := io.ReadFull(r.r, p)
		return p, err
	}
	p := r.buf[:cap(r.buf)]
	got := 0
	for got < n {
		if got == len(p) {
			grown := make([]byte, min(n, max(2*len(p), eagerPayload)))
			copy(grown, p[:got])
			p = grown
			r.buf = grown
		}
		m, err := io.ReadFull(r.r, p[got:min(n, len(p))])
		got += m
		if err != nil {
			return nil, err
		}
	}
	return p[:n], nil
}
