package proc

import (
	"encoding/json"
	"fmt"
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
func feedAll(t *testing.T, data string, chunk, maxLine int) (*recorder, *logCapture) {
	t.Helper()
	rec := &recorder{}
	c := newLogCapture(nil, zerolog.New(rec), maxLine)
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
	data := "one\ntwo\n\nthree\nlast without newline"
	want := []string{"one", "two", "three", "last without newline"}
	for chunk := 1; chunk <= len(data); chunk++ {
		rec, _ := feedAll(t, data, chunk, 100)
		if got := rec.messages(); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("chunk %d: lines %q, want %q", chunk, got, want)
		}
	}
}

// Rule: "long lines are split/truncated to a max, never unbounded memory".
func TestLongLineTruncatedWithBoundedMemory(t *testing.T) {
	long := strings.Repeat("y", 1<<20)
	for _, chunk := range []int{7, 4096, 1 << 20} {
		rec, c := feedAll(t, long+"\nafter\n"+long+"\n", chunk, 1000)
		if cap(c.head) > 1000 {
			t.Fatalf("line buffer grew to %d", cap(c.head))
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
	}
}

func TestLoggerSwitchAndRecentLines(t *testing.T) {
	base, inv := &recorder{}, &recorder{}
	c := newLogCapture(nil, zerolog.New(base), 100)
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

// The capture reads a real pipe until EOF and logs a last unterminated
// line at the end.
func TestCaptureRunOverPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	c := newLogCapture(r, zerolog.New(rec), 100)
	go c.run()
	if _, err := w.Write([]byte("hello\nworld\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.messages()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := rec.messages(); strings.Join(got, "|") != "hello|world" {
		t.Fatalf("lines %q", got)
	}
	_, _ = w.Write([]byte("tail"))
	_ = w.Close()
	<-c.done
	if got := rec.messages(); got[len(got)-1] != "tail" {
		t.Fatalf("unterminated last line not flushed at EOF: %q", got)
	}
}

// Rule: every line a worker printed before its answer is logged, with the
// invocation's logger, by the time Invoke returns. drain takes whatever
// the pipe holds, a partial line included, whether or not the capture
// goroutine got to it first, and every byte is logged exactly once.
func TestDrainLogsWhatThePipeHolds(t *testing.T) {
	for _, running := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		base, inv := &recorder{}, &recorder{}
		c := newLogCapture(r, zerolog.New(base), 100)
		if running {
			go c.run()
		}
		l := zerolog.New(inv)
		c.setLogger(&l)
		var want []string
		for i := range 200 {
			line := fmt.Sprintf("line %d", i)
			want = append(want, line)
			if _, err := w.Write([]byte(line + "\n")); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, "partial")
		if _, err := w.Write([]byte("partial")); err != nil {
			t.Fatal(err)
		}
		c.drain()
		c.cur.Store(nil)
		if got := inv.messages(); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("running capture %v: the invocation's logger got %d lines %q..., want %d", running, len(got), got[:min(len(got), 3)], len(want))
		}
		if _, err := w.Write([]byte("later\n")); err != nil {
			t.Fatal(err)
		}
		c.drain()
		if got := base.messages(); strings.Join(got, "|") != "later" {
			t.Fatalf("running capture %v: the worker's logger got %q, want the line after the invocation only", running, got)
		}
		_ = w.Close()
		if running {
			<-c.done
		}
		_ = r.Close()
	}
}

// A writer that never stops cannot hold a drain up: it reads only what
// the pipe held when it began.
func TestDrainIsBoundedByWhatIsThere(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := newLogCapture(r, zerolog.Nop(), 100)
	stop := make(chan struct{})
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for {
			select {
			case <-stop:
				_ = w.Close()
				return
			default:
			}
			if _, err := w.Write([]byte("spam\n")); err != nil {
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() {
		for range 100 {
			c.drain()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("drain did not return while a writer kept writing")
	}
	// The writer may be blocked on a full pipe: drain until it has seen
	// stop and closed its end.
	close(stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-wrote:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer did not stop")
		}
		c.drain()
	}
}
