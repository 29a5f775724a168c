package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/fnbridge/fnbridge/restate/wire"
)

// h2traceCmd is `fnbench h2trace`: a TCP proxy to put between
// restate-server and a deployment (register the proxy's address) that
// counts what crosses it, HTTP/2 frames by type and the Restate messages
// inside DATA frames, each way. On SIGINT or SIGTERM it prints the
// counts per invocation and exits, dropping the connections restate-server
// still holds open (it keeps them between invocations): how the
// bench/NOTES.md comparison of the bridge's conversation with sdk-go's is
// made again.
func h2traceCmd(args []string) error {
	fs := flag.NewFlagSet("h2trace", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to accept restate-server's connections on")
	target := fs.String("target", "", "the deployment's address host:port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" {
		return errors.New("--target is required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "h2trace: listening on %s, forwarding to %s\n", ln.Addr(), *target)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tr := newH2Tracer()
	go func() { <-ctx.Done(); _ = ln.Close() }()
	tr.serve(ln, *target)
	fmt.Print(tr.summary())
	return nil
}

// h2Tracer counts frames and messages over every proxied connection.
type h2Tracer struct {
	mu sync.Mutex
	// frames counts HTTP/2 frames by direction and type; frameBytes
	// their payload bytes.
	frames, frameBytes map[string]int
	// msgs counts Restate messages by direction and type, msgBytes their
	// encoded size (header included).
	msgs, msgBytes map[string]int
	// invocations counts request streams (HEADERS from restate-server
	// that open a stream).
	invocations int
	conns       sync.WaitGroup
}

func newH2Tracer() *h2Tracer {
	return &h2Tracer{frames: map[string]int{}, frameBytes: map[string]int{}, msgs: map[string]int{}, msgBytes: map[string]int{}}
}

// serve accepts until ln is closed.
func (t *h2Tracer) serve(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		t.conns.Add(2)
		go t.pump("restate>deployment", c, s, true)
		go t.pump("deployment>restate", s, c, false)
	}
}

// wait returns once every proxied connection has ended.
func (t *h2Tracer) wait() { t.conns.Wait() }

// h2FrameNames are the HTTP/2 frame types (RFC 9113, 6).
var h2FrameNames = []string{"DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING", "GOAWAY", "WINDOW_UPDATE", "CONTINUATION"}

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// pump copies from → to, parsing what passes. Restate messages are
// reassembled per stream, since one may span DATA frames.
func (t *h2Tracer) pump(dir string, from, to net.Conn, client bool) {
	defer t.conns.Done()
	defer func() { _ = to.Close(); _ = from.Close() }()
	r := bufio.NewReader(io.TeeReader(from, to))
	if client {
		pre := make([]byte, len(h2Preface))
		if _, err := io.ReadFull(r, pre); err != nil || string(pre) != h2Preface {
			_, _ = io.Copy(io.Discard, r) // not h2c with prior knowledge: pass it through
			return
		}
	}
	pending := map[uint32][]byte{}
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		sid := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return
		}
		name := fmt.Sprintf("type %#x", typ)
		if int(typ) < len(h2FrameNames) {
			name = h2FrameNames[typ]
		}
		if typ == 0 && flags&0x1 != 0 {
			name += "+END_STREAM"
		}
		t.mu.Lock()
		t.frames[dir+" "+name]++
		t.frameBytes[dir+" "+name] += n
		if client && typ == 1 {
			t.invocations++
		}
		if typ == 0 {
			t.messagesLocked(dir, append(pending[sid], dataPayload(p, flags)...), sid, pending)
		}
		t.mu.Unlock()
	}
}

// dataPayload strips a padded DATA frame's padding.
func dataPayload(p []byte, flags byte) []byte {
	if flags&0x8 == 0 || len(p) == 0 {
		return p
	}
	pad := int(p[0])
	if 1+pad > len(p) {
		return nil
	}
	return p[1 : len(p)-pad]
}

// messagesLocked counts the whole Restate messages at the start of b and
// keeps the rest for the stream's next DATA frame.
func (t *h2Tracer) messagesLocked(dir string, b []byte, sid uint32, pending map[uint32][]byte) {
	for len(b) >= wire.HeaderSize {
		h := wire.ParseHeader(b)
		size := wire.HeaderSize + int(h.Length)
		if len(b) < size {
			break
		}
		t.msgs[dir+" "+h.Type.String()]++
		t.msgBytes[dir+" "+h.Type.String()] += size
		b = b[size:]
	}
	if len(b) == 0 {
		delete(pending, sid)
		return
	}
	pending[sid] = append([]byte(nil), b...)
}

// summary is the counts, per invocation when there were any.
func (t *h2Tracer) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	inv := t.invocations
	fmt.Fprintf(&b, "streams opened by restate-server: %d\n", inv)
	per := func(v int) string {
		if inv == 0 {
			return fmt.Sprint(v)
		}
		return fmt.Sprintf("%.2f", float64(v)/float64(inv))
	}
	write := func(title string, counts, bytes map[string]int) {
		fmt.Fprintf(&b, "%s (count per stream, mean bytes):\n", title)
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-50s %8s  %6.1f B\n", k, per(counts[k]), float64(bytes[k])/float64(counts[k]))
		}
	}
	write("HTTP/2 frames", t.frames, t.frameBytes)
	write("Restate messages", t.msgs, t.msgBytes)
	return b.String()
}
