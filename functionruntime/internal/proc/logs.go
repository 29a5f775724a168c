package proc

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

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

// logCapture reads the worker's log pipe and turns it into log records. It
// always drains the pipe (a handler never blocks on a full pipe because of
// us) and holds at most maxLine bytes of any line.
//
// Two goroutines read the pipe: the capture goroutine (run) whenever bytes
// arrive, and the invocation's own goroutine once the worker answered
// (drain), which takes what the worker wrote before its answer. Every
// read happens with mu held and the bytes read are split into lines
// before mu is released, so whoever holds mu next sees them logged.
type logCapture struct {
	r       *os.File
	rc      syscall.RawConn // r's; nil in tests that feed bytes directly
	base    zerolog.Logger
	cur     atomic.Pointer[zerolog.Logger] // the invocation's logger, nil between invocations
	maxLine int
	done    chan struct{} // closed when the pipe is finished

	mu     sync.Mutex
	buf    []byte   // read buffer
	recent []string // ring of the last recentLines lines since the last reset

	// line assembly state, guarded by mu
	head    []byte // first maxLine bytes of the current line
	total   int    // length of the current line so far
	pending bool   // a partial line is buffered
}

func newLogCapture(r *os.File, base zerolog.Logger, maxLine int) *logCapture {
	if maxLine <= 0 {
		maxLine = DefaultMaxLogLine
	}
	c := &logCapture{
		r:       r,
		base:    base,
		maxLine: maxLine,
		done:    make(chan struct{}),
		buf:     make([]byte, 64<<10),
		head:    make([]byte, 0, min(maxLine, 4096)),
	}
	if r != nil {
		c.rc, _ = r.SyscallConn()
	}
	return c
}

// readBudget bounds the reads of one pass of run, so a writer that never
// lets the pipe run empty cannot keep the read deadline from being
// checked (Terminate relies on it to end the capture).
const readBudget = 16

// run drains the pipe until EOF or a read deadline, then flushes any
// partial line and closes done.
func (c *logCapture) run() {
	defer close(c.done)
	var rerr error
	eof := false
	for !eof && rerr == nil {
		err := c.rc.Read(func(fd uintptr) bool {
			for range readBudget {
				c.mu.Lock()
				n, err := syscall.Read(int(fd), c.buf)
				if n > 0 {
					c.feed(c.buf[:n])
				}
				c.mu.Unlock()
				switch {
				case n > 0, err == syscall.EINTR:
				case err == syscall.EAGAIN:
					return false // wait until the pipe is readable again
				case err == nil:
					eof = true
					return true
				default:
					rerr = err
					return true
				}
			}
			return true
		})
		if err != nil {
			rerr = err
		}
	}
	c.mu.Lock()
	if c.pending {
		c.endLine()
	}
	c.mu.Unlock()
	if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) && !errors.Is(rerr, os.ErrClosed) {
		c.base.Warn().Err(rerr).Msg("reading worker logs failed")
	}
}

// drain logs every byte the pipe holds now, and a partial line the
// handler left unterminated, with the logger in place. Called once the
// worker answered, it logs everything the worker and the children it
// waited for wrote before the answer: those bytes are in the pipe, or the
// capture goroutine has already logged them.
func (c *logCapture) drain() {
	if c.rc == nil {
		return
	}
	_ = c.rc.Control(func(fd uintptr) {
		c.mu.Lock()
		defer c.mu.Unlock()
		// Only what is there now: a process still writing (a background
		// job of the handler) cannot hold the invocation up.
		left, err := pendingBytes(int(fd))
		for err == nil && left > 0 {
			n, rerr := syscall.Read(int(fd), c.buf[:min(left, len(c.buf))])
			if n > 0 {
				c.feed(c.buf[:n])
				left -= n
			} else if rerr != syscall.EINTR {
				break
			}
		}
		if c.pending {
			c.endLine()
		}
	})
}

// feed splits p into lines. c.mu is held.
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
}

// endLine emits the buffered line. c.mu is held.
func (c *logCapture) endLine() {
	if c.total > 0 { // blank lines carry nothing worth a record
		c.emit(c.head, c.total-len(c.head))
	}
	c.head, c.total, c.pending = c.head[:0], 0, false
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
		// At a character boundary: the line may become a failure's
		// message (Bash's exit 100), which must stay valid UTF-8.
		n := recentLineMax
		for n > recentLineMax-utf8.UTFMax && n > 0 && !utf8.RuneStart(line[n]) {
			n--
		}
		line = line[:n]
	}
	if len(c.recent) == recentLines {
		copy(c.recent, c.recent[1:])
		c.recent = c.recent[:recentLines-1]
	}
	c.recent = append(c.recent, string(line))
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
