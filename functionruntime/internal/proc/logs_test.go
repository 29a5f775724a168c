package proc

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// recorder is a zerolog sink keeping records.
type recorder struct {
	mu   sync.Mutex
	recs []map[string]any
}

func (r *recorder) Write(p []byte) (int, error) {
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		return 0, err
	}
	r.mu.Lock()
	r.recs = append(r.recs, m)
	r.mu.Unlock()
	return len(p), nil
}

func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.recs {
		out = append(out, m["message"].(string))
	}
	return out
}

// feedAll runs a capture over data delivered in chunks of the given size.
func feedAll(t *testing.T, data string, chunk, maxLine int, marker string) (*recorder, *logCapture) {
	t.Helper()
	rec := &recorder{}
	c := newLogCapture(nil, zerolog.New(rec), marker, maxLine)
	for i := 0; i < len(data); i += chunk {
		c.feed([]byte(data[i:min(i+chunk, len(data))]))
	}
	if c.pending {
		c.endLine()
	}
	return rec, c
}

// Rule: handler output is "captured into the logger ... line by line".
// Splitting must not depend on how the pipe delivers the bytes.
func TestLogLinesIndependentOfChunking(t *testing.T) {
	const marker = "\x1eMARK"
	data := "one\ntwo\n\nthree partial" + marker + "\nfour\nlast without newline"
	want := []string{"one", "two", "three partial", "four", "last without newline"}
	for chunk := 1; chunk <= len(data); chunk++ {
		rec, c := feedAll(t, data, chunk, 100, marker)
		if got := rec.messages(); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("chunk %d: lines %q, want %q", chunk, got, want)
		}
		if c.marks.Load() != 1 {
			t.Fatalf("chunk %d: %d markers seen, want 1", chunk, c.marks.Load())
		}
	}
}

// Rule: "long lines are split/truncated to a max, never unbounded memory".
func TestLongLineTruncatedWithBoundedMemory(t *testing.T) {
	const marker = "\x1eMARK"
	long := strings.Repeat("y", 1<<20)
	for _, chunk := range []int{7, 4096, 1 << 20} {
		rec, c := feedAll(t, long+"\nafter\n"+long+marker+"\n", chunk, 1000, marker)
		if cap(c.head) > 1000 || cap(c.tail) > 2*len(marker)+len(marker) {
			t.Fatalf("buffers grew to head=%d tail=%d", cap(c.head), cap(c.tail))
		}
		rec.mu.Lock()
		recs := rec.recs
		rec.mu.Unlock()
		if len(recs) != 3 {
			t.Fatalf("chunk %d: %d records, want 3", chunk, len(recs))
		}
		for _, i := range []int{0, 2} {
			if msg := recs[i]["message"].(string); len(msg) != 1000 || recs[i]["truncated_bytes"] != float64(1<<20-1000) {
				t.Fatalf("chunk %d: record %d = %d bytes, truncated %v", chunk, i, len(msg), recs[i]["truncated_bytes"])
			}
		}
		if c.marks.Load() != 1 {
			t.Fatalf("chunk %d: marker after a truncated line not seen", chunk)
		}
	}
}

func TestMarkerOnlyRecognisedAtLineEnd(t *testing.T) {
	const marker = "\x1eMARK"
	rec, c := feedAll(t, "a"+marker+"b\n"+marker+"\n", 3, 100, marker)
	if got := rec.messages(); len(got) != 1 || got[0] != "a"+marker+"b" {
		t.Fatalf("lines %q", got)
	}
	if c.marks.Load() != 1 {
		t.Fatalf("markers = %d, want 1", c.marks.Load())
	}
}

func TestLoggerSwitchAndRecentLines(t *testing.T) {
	base, inv := &recorder{}, &recorder{}
	c := newLogCapture(nil, zerolog.New(base), "\x1eM", 100)
	c.feed([]byte("before\n"))
	l := zerolog.New(inv)
	c.setLogger(&l)
	c.feed([]byte("during 1\nduring 2\n"))
	c.cur.Store(nil)
	c.feed([]byte("after\n"))
	if got := base.messages(); strings.Join(got, "|") != "before|after" {
		t.Fatalf("worker logger got %q", got)
	}
	if got := inv.messages(); strings.Join(got, "|") != "during 1|during 2" {
		t.Fatalf("invocation logger got %q", got)
	}
	if got := c.lastLines(2); strings.Join(got, "|") != "during 2|after" {
		t.Fatalf("lastLines = %q", got)
	}
}

// The capture drains a real pipe until EOF and wakes marker waiters.
func TestCaptureRunOverPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	marker := NewMarker()
	c := newLogCapture(r, zerolog.New(rec), marker, 100)
	go c.run()
	if _, err := w.Write([]byte("hello\npart" + marker + "\n")); err != nil {
		t.Fatal(err)
	}
	if !c.waitMarks(1, 10*time.Second) {
		t.Fatal("marker not seen")
	}
	if got := rec.messages(); strings.Join(got, "|") != "hello|part" {
		t.Fatalf("lines %q", got)
	}
	if c.waitMarks(2, 10*time.Millisecond) {
		t.Fatal("a second marker was reported")
	}
	_, _ = w.Write([]byte("tail"))
	_ = w.Close()
	<-c.done
	if got := rec.messages(); got[len(got)-1] != "tail" {
		t.Fatalf("unterminated last line not flushed at EOF: %q", got)
	}
	if bytes.Contains([]byte(strings.Join(rec.messages(), "")), []byte("fnbridge-log-sync")) {
		t.Fatal("marker leaked")
	}
}
