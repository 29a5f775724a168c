package proc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// DefaultMaxLogLine is the longest handler log line kept, in bytes; the
// rest of a longer line is dropped and counted in the truncated_bytes field.
const DefaultMaxLogLine = 16 << 10

// recentLines is how many recent log lines a process remembers for error
// messages (a failed import's traceback, a bash handler's last stderr line).
const recentLines = 16

// recentLineMax bounds each remembered line.
const recentLineMax = 1024

// NewMarker returns a fresh log-synchronisation marker: a byte sequence no
// handler can produce by accident. A worker writes it followed by a newline
// to fd 2 to say "everything I printed so far is on the pipe".
func NewMarker() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("proc: crypto/rand failed: " + err.Error())
	}
	return "\x1efnbridge-log-sync-" + hex.EncodeToString(b[:])
}

// logCapture reads the worker's log pipe and turns it into log records. It
// always drains the pipe (a handler never blocks on a full pipe because of
// us) and holds at most maxLine+len(marker) bytes of any line.
type logCapture struct {
	r       *os.File
	base    zerolog.Logger
	cur     atomic.Pointer[zerolog.Logger] // the invocation's logger, nil between invocations
	marker  []byte
	maxLine int

	marks  atomic.Uint64 // markers seen so far
	markCh chan struct{} // poked (non-blocking) after each marker
	done   chan struct{} // closed when the pipe is finished

	mu     sync.Mutex
	recent []string // ring of the last recentLines lines since the last reset

	// line assembly state, owned by the capture goroutine
	head    []byte // first maxLine bytes of the current line
	tail    []byte // last len(marker) bytes of the current line
	total   int    // length of the current line so far
	pending bool   // a partial line is buffered
}

func newLogCapture(r *os.File, base zerolog.Logger, marker string, maxLine int) *logCapture {
	if maxLine <= 0 {
		maxLine = DefaultMaxLogLine
	}
	return &logCapture{
		r:       r,
		base:    base,
		marker:  []byte(marker),
		maxLine: maxLine,
		markCh:  make(chan struct{}, 1),
		done:    make(chan struct{}),
		head:    make([]byte, 0, min(maxLine, 4096)),
		tail:    make([]byte, 0, 2*len(marker)),
	}
}

// run drains the pipe until EOF or a read deadline, then flushes any
// partial line and closes done.
func (c *logCapture) run() {
	defer close(c.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.r.Read(buf)
		if n > 0 {
			c.feed(buf[:n])
		}
		if err != nil {
			if c.pending {
				c.endLine()
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, os.ErrClosed) {
				c.base.Warn().Err(err).Msg("reading worker logs failed")
			}
			return
		}
	}
}

// feed splits p into lines.
func (c *logCapture) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.appendSeg(p)
			return
		}
		c.appendSeg(p[:i])
		c.endLine()
		p = p[i+1:]
	}
}

func (c *logCapture) appendSeg(seg []byte) {
	c.pending = true
	c.total += len(seg)
	if room := c.maxLine - len(c.head); room > 0 {
		c.head = append(c.head, seg[:min(room, len(seg))]...)
	}
	k := len(c.marker)
	if len(seg) >= k {
		c.tail = append(c.tail[:0], seg[len(seg)-k:]...)
	} else {
		c.tail = append(c.tail, seg...)
		if len(c.tail) > k {
			c.tail = append(c.tail[:0], c.tail[len(c.tail)-k:]...)
		}
	}
}

// endLine emits the buffered line. A line ending in the marker is a
// barrier: the text before the marker (a partial line the handler left
// unterminated) is emitted on its own, then waiters are woken.
func (c *logCapture) endLine() {
	text, dropped := c.head, 0
	marked := len(c.marker) > 0 && c.total >= len(c.marker) && bytes.Equal(c.tail, c.marker)
	length := c.total
	if marked {
		length -= len(c.marker)
	}
	if length < len(text) {
		text = text[:length]
	}
	dropped = length - len(text)
	if length > 0 { // blank lines carry nothing worth a record
		c.emit(text, dropped)
	}
	c.head, c.tail, c.total, c.pending = c.head[:0], c.tail[:0], 0, false
	if marked {
		c.marks.Add(1)
		select {
		case c.markCh <- struct{}{}:
		default:
		}
	}
}

func (c *logCapture) emit(text []byte, dropped int) {
	l := c.cur.Load()
	if l == nil {
		l = &c.base
	}
	hl := parseHandlerLine(text)
	ev := l.WithLevel(hl.level).Str("source", "handler")
	if hl.fields != nil {
		ev = ev.RawJSON("fields", hl.fields)
	}
	if dropped > 0 {
		ev = ev.Int("truncated_bytes", dropped)
	}
	ev.Msg(hl.message)

	line := text
	if len(line) > recentLineMax {
		line = line[:recentLineMax]
	}
	c.mu.Lock()
	if len(c.recent) == recentLines {
		copy(c.recent, c.recent[1:])
		c.recent = c.recent[:recentLines-1]
	}
	c.recent = append(c.recent, string(line))
	c.mu.Unlock()
}

// setLogger routes lines to l from now on (nil: the worker's logger) and
// forgets the remembered recent lines.
func (c *logCapture) setLogger(l *zerolog.Logger) {
	c.cur.Store(l)
	c.mu.Lock()
	c.recent = c.recent[:0]
	c.mu.Unlock()
}

// lastLines returns up to n of the most recent lines.
func (c *logCapture) lastLines(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > len(c.recent) {
		n = len(c.recent)
	}
	return append([]string(nil), c.recent[len(c.recent)-n:]...)
}

// waitMarks waits until at least want markers were seen, the pipe is
// finished, or timeout elapses. It reports whether the marker arrived.
func (c *logCapture) waitMarks(want uint64, timeout time.Duration) bool {
	var timer *time.Timer
	for {
		if c.marks.Load() >= want {
			return true
		}
		if timer == nil {
			timer = time.NewTimer(timeout)
			defer timer.Stop()
		}
		select {
		case <-c.markCh:
		case <-c.done:
			return c.marks.Load() >= want
		case <-timer.C:
			return false
		}
	}
}
