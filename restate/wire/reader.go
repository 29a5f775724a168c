package wire

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// DefaultMaxMessageSize is the payload limit used when none is
// configured: restate-server's default message size limit (the endpoint
// reads a little more, restate.Config.MaxMessageSize says why).
const DefaultMaxMessageSize = 32 << 20

// ErrMessageTooLarge is wrapped by the error Reader.Next returns when a
// header announces a payload above the limit.
var ErrMessageTooLarge = errors.New("message too large")

// Reader reads frames from a stream, tolerating partial reads. It reuses one
// payload buffer, so a payload is valid only until the next call to Next.
// A Reader is not safe for concurrent use.
//
// Small frames are read through a read-ahead buffer: one Read of the
// source usually returns several frames, or a frame's header with its
// payload. Over HTTP/2 every Read of a request body that returns data
// wakes the connection's goroutine (flow control), so reading a header
// and its payload separately cost two hand-offs where one does.
type Reader struct {
	r   io.Reader
	max uint32
	hdr [HeaderSize]byte
	buf []byte

	// ra holds bytes read ahead of the frame being decoded, ra[rs:re];
	// taken from readAheadPool on the first read and given back by Reset.
	ra     *[]byte
	rs, re int
	// rerr is the error of the Read that also returned the buffered
	// bytes, reported once they are consumed.
	rerr error
}

// readAhead is the read-ahead buffer's size: a StartMessage with a short
// journal, an input and a completion of everyday sizes. Reads of at least
// this many bytes go to the source directly.
const readAhead = 4 << 10

var readAheadPool = sync.Pool{New: func() any { b := make([]byte, readAhead); return &b }}

// NewReader returns a Reader over r that rejects payloads larger than
// maxSize bytes (DefaultMaxMessageSize when maxSize <= 0).
func NewReader(r io.Reader, maxSize int) *Reader {
	if maxSize <= 0 || maxSize > int(^uint32(0)>>1) {
		maxSize = DefaultMaxMessageSize
	}
	return &Reader{r: r, max: uint32(maxSize)}
}

// Reset makes the Reader read from src, keeping its payload buffer. Bytes
// read ahead from the previous source are dropped, and the read-ahead
// buffer goes back to a pool shared by all Readers (Reset(nil) when a
// stream is done).
func (r *Reader) Reset(src io.Reader) {
	r.r = src
	if r.ra != nil {
		readAheadPool.Put(r.ra)
		r.ra = nil
	}
	r.rs, r.re, r.rerr = 0, 0, nil
}

// readFull is io.ReadFull through the read-ahead buffer.
func (r *Reader) readFull(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if r.rs < r.re {
			c := copy(p[n:], (*r.ra)[r.rs:r.re])
			r.rs += c
			n += c
			continue
		}
		if err := r.rerr; err != nil {
			r.rerr = nil
			return n, fullErr(n, err)
		}
		if len(p)-n >= readAhead {
			m, err := r.r.Read(p[n:])
			n += m
			if err != nil && n < len(p) {
				return n, fullErr(n, err)
			}
			continue
		}
		if r.ra == nil {
			r.ra = readAheadPool.Get().(*[]byte)
		}
		m, err := r.r.Read(*r.ra)
		r.rs, r.re = 0, m
		if err != nil {
			if m == 0 {
				return n, fullErr(n, err)
			}
			r.rerr = err
		}
	}
	return n, nil
}

// fullErr is what io.ReadFull reports for err after n bytes.
func fullErr(n int, err error) error {
	if n > 0 && err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Next returns the next frame. It returns io.EOF when the stream ends
// cleanly between frames, io.ErrUnexpectedEOF when it ends inside one, and
// an error wrapping ErrMessageTooLarge, before allocating the payload or
// reading more of it than what came with the header into the read-ahead
// buffer, when the header announces more than the limit.
func (r *Reader) Next() (Header, []byte, error) {
	if _, err := r.readFull(r.hdr[:]); err != nil {
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
		_, err := r.readFull(p)
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
		m, err := r.readFull(p[got:min(n, len(p))])
		got += m
		if err != nil {
			return nil, err
		}
	}
	return p[:n], nil
}
