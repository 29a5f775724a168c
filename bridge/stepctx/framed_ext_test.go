package stepctx_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// framed speaks the framed protocol by hand, as the Python worker does.
type framed struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialFramed(t *testing.T, addr, token string) *framed {
	t.Helper()
	network, address, err := stepctx.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, stepctx.FramedPreface+token+"\n"); err != nil {
		t.Fatal(err)
	}
	return &framed{t: t, c: c, r: bufio.NewReader(c)}
}

// do sends one request frame and returns the answer's status and body.
func (f *framed) do(op, body string) (int, string) {
	f.t.Helper()
	f.send(op, body)
	return f.read(op)
}

// send writes request frames (operation, body, operation, body...) in one
// write, without reading their answers.
func (f *framed) send(opBodies ...string) {
	f.t.Helper()
	var b []byte
	for i := 0; i+1 < len(opBodies); i += 2 {
		b = binary.BigEndian.AppendUint32(b, uint32(len(opBodies[i])+1+len(opBodies[i+1])))
		b = append(append(append(b, opBodies[i]...), '\n'), opBodies[i+1]...)
	}
	if _, err := f.c.Write(b); err != nil {
		f.t.Fatal(err)
	}
}

// read reads the answer to the request op sent earliest of those not
// answered yet.
func (f *framed) read(op string) (int, string) {
	f.t.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		f.t.Fatalf("%s: reading the answer: %v", op, err)
	}
	answer := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(f.r, answer); err != nil {
		f.t.Fatal(err)
	}
	st, b, _ := strings.Cut(string(answer), "\n")
	status, err := strconv.Atoi(st)
	if err != nil {
		f.t.Fatalf("%s: answer %q has no status line", op, answer)
	}
	return status, b
}

func (f *framed) want(op, body string, status int, want string) {
	f.t.Helper()
	got, b := f.do(op, body)
	if got != status || !strings.Contains(b, want) {
		f.t.Errorf("%s %s\n got %d %s\nwant %d containing %s", op, body, got, b, status, want)
	}
}

func TestFramedProtocolOnTheWire(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			s, addr := serve(t, network, stepctx.Config{MaxBodyBytes: 1024})
			j := &stepctxtest.Journal{}
			a, _ := open(t, s, addr, j)
			f := dialFramed(t, addr, a.Token())

			run1 := handleOf("run-", "inv_fake", 1)
			f.want("run/start", `{"name":"fetch"}`, 200, `{"execute":"`+run1+`"}`)
			f.want("run/complete", `{"handle":"`+run1+`","value":{"n": 1}}`, 200, `{"result":{"value":{"n":1}}}`)
			f.want("v1/run/start", `{}`, 404, `no fnbridge context operation \"v1/run/start\"`)
			f.want("sleep", `{"milis":5}`, 400, `unknown field \"milis\"`)
			f.want("sleep", `{"name":"`+strings.Repeat("x", 2000)+`"}`, 413, `exceeds 1024 bytes`)
			// Each of those left the connection usable, in order.
			f.want("invocation-id", ``, 200, `{"invocation_id":"`)

			// HTTP shares the listener.
			if st, m := newRaw(t, addr, a.Token()).post(http.MethodPost, stepctx.RouteInvocationID, `{}`); st != 200 || m["invocation_id"] == "" {
				t.Errorf("HTTP on the framed listener: %d %v", st, m)
			}

			a.Close()
			f.want("uuid", `{}`, 403, `belongs to an attempt that has ended`)
			if e := j.Entries(); len(e) != 1 || e[0].Kind != "run" || e[0].Result == nil || string(e[0].Result.Value) != `{"n": 1}` {
				t.Errorf("journal %+v: want the one run, its value byte for byte", e)
			}

			dialFramed(t, addr, "").want("uuid", `{}`, 401, `missing token`)
			dialFramed(t, addr, stepctx.NewToken()).want("uuid", `{}`, 403, `not issued by this bridge`)
		})
	}
}

// wantRead is want for the answer read next.
func (f *framed) wantRead(op string, status int, want string) {
	f.t.Helper()
	got, b := f.read(op)
	if got != status || !strings.Contains(b, want) {
		f.t.Errorf("%s\n got %d %s\nwant %d containing %s", op, got, b, status, want)
	}
}

// Rule ("Pipelined steps"): a run/start and a run/complete without a
// handle sent back to back are answered in order, the completion meaning
// the run the start executed; without that run executing, a completion
// without a handle is refused (400) and nothing is journaled; a start
// refused (the invocation cancelled) refuses the completion sent after
// it too.
func TestFramedPipelinedStep(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{}
	a, _ := open(t, s, addr, j)
	if !a.Fresh() {
		t.Fatal("an attempt of an empty journal is not fresh")
	}
	f := dialFramed(t, addr, a.Token())
	f.send("run/start", `{"name":"fetch"}`, "run/complete", `{"value":{"n":1}}`)
	f.wantRead("run/start", 200, `{"execute":"`+handleOf("run-", "inv_fake", 1)+`"}`)
	f.wantRead("run/complete", 200, `{"result":{"value":{"n":1}}}`)
	f.want("run/complete", `{"value":2}`, 400, `completes the run executing, and none is`)
	if e := j.Entries(); len(e) != 1 || e[0].Name != "fetch" || string(e[0].Result.Value) != `{"n":1}` {
		t.Fatalf("journal %+v: want the one run", e)
	}

	// A completion without a handle never completes a run its
	// connection's latest start did not execute: another connection's
	// (a child process's `fnbridge run`), nor one started before a
	// refused start.
	child := dialFramed(t, addr, a.Token())
	child.want("run/start", `{"name":"child"}`, 200, `{"execute":"`)
	f.send("run/start", `{"name":"parent"}`, "run/complete", `{"value":"parent's"}`)
	f.wantRead("run/start", 409, `step \"child\"`)
	f.wantRead("run/complete", 400, `none was started by this connection's latest run/start`)
	child.want("run/complete", `{"value":"child's"}`, 200, `{"result":{"value":"child's"}}`)
	f.want("run/start", `{"name":"a"}`, 200, `{"execute":"`)
	f.send("run/start", `{"name":"b"}`, "run/complete", `{"value":"b's"}`)
	f.wantRead("run/start", 409, `step \"a\"`)
	f.wantRead("run/complete", 400, `none was started`)
	if e := j.Entries(); len(e) != 3 || string(e[1].Result.Value) != `"child's"` || e[2].Name != "a" || e[2].Result != nil {
		t.Fatalf("journal %+v: want fetch, child with its own value, and a open", e)
	}

	// A start refused before it is served (another client's call in
	// flight) ends it too: after a completion refused the same way, a
	// later step's completion does not complete the run left open.
	f.want("run/complete", `{"handle":"`+handleOf("run-", "inv_fake", 3)+`","value":"a's"}`, 200, `{"result":{"value":"a's"}}`)
	f.want("run/start", `{"name":"c"}`, 200, `{"execute":"`)
	release := a.HoldServing()
	f.want("run/complete", `{"value":"c's"}`, 409, `at the same time`)
	f.want("run/start", `{"name":"d"}`, 409, `at the same time`)
	release()
	f.want("run/complete", `{"value":"d's"}`, 400, `none was started`)
	if e := j.Entries(); len(e) != 4 || e[3].Name != "c" || e[3].Result != nil {
		t.Fatalf("journal %+v: want c open, with no value", e)
	}

	// An attempt that replays is not fresh; the first run/start that
	// executes once the replay is over says the rest of the attempt is
	// live, so its function may pipeline from there.
	j.Restart()
	replay, _ := open(t, s, addr, j)
	if replay.Fresh() {
		t.Fatal("an attempt with recorded steps is fresh")
	}
	f = dialFramed(t, addr, replay.Token())
	f.want("run/start", `{"name":"fetch"}`, 200, `{"recorded":{"value":{"n":1}}}`)
	f.want("run/start", `{"name":"child"}`, 200, `{"recorded":{"value":"child's"}}`)
	f.want("run/start", `{"name":"a"}`, 200, `{"recorded":{"value":"a's"}}`)
	// c was left open: it executes again, the replay's last command.
	f.want("run/start", `{"name":"c"}`, 200, `","live":true}`)
	f.want("run/complete", `{"value":"c's"}`, 200, `{"result":{"value":"c's"}}`)
	f.want("run/start", `{"name":"new"}`, 200, `","live":true}`)

	j2 := &stepctxtest.Journal{RunStartError: stepctx.Cancelled()}
	a2, _ := open(t, s, addr, j2)
	f = dialFramed(t, addr, a2.Token())
	f.send("run/start", `{"name":"fetch"}`, "run/complete", `{"value":1}`)
	f.wantRead("run/start", 200, `{"failure":{"code":409,"message":"cancelled"}}`)
	f.wantRead("run/complete", 400, `none is`)
	if e := j2.Entries(); len(e) != 0 {
		t.Fatalf("journal %+v: want nothing", e)
	}
}

// Rule (Pipelined steps): a process started by a step's function, whose
// preface names the step's start sent ahead (after=k, from EnvAfter), is
// served only once that start is: its call, which reached the endpoint
// first, is refused as one beside the step executing (409) and never
// journaled ahead of the step, which a replay could not reproduce.
func TestFramedChildWaitsForItsParentsStart(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{}
	a, _ := open(t, s, addr, j)
	parent := dialFramed(t, addr, a.Token())
	// A numbered start's answer comes with the next request's (see
	// TestFramedNumberedStartAnsweredWithTheNext).
	parent.send("run/start", `{"name":"first","ahead":1}`, "run/complete", `{"value":1}`)
	parent.wantRead("run/start", 200, `{"execute":"`)
	parent.wantRead("run/complete", 200, `{"result":{"value":1}}`)
	// A child of the first step's function, started after it: the start it
	// names was served, so it waits for nothing.
	late := dialFramed(t, addr, a.Token()+" after=1")
	late.want("invocation-id", `{}`, 200, `inv_fake`)

	child := dialFramed(t, addr, a.Token()+" after=2")
	child.send("sleep", `{"millis":1}`)
	testtool.Eventually(t, 10*time.Second, "the child's request waiting for start 2", func() (bool, string) {
		n := a.AheadWaiters()
		return n == 1, fmt.Sprintf("%d waiting, journal %+v", n, j.Entries())
	})
	// The step's function waits for its child (its completion comes after).
	parent.send("run/start", `{"name":"second","ahead":2}`)
	child.wantRead("sleep", 409, `step \"second\"`)
	parent.send("run/complete", `{"value":2}`)
	parent.wantRead("run/start", 200, `{"execute":"`)
	parent.wantRead("run/complete", 200, `{"result":{"value":2}}`)
	if e := j.Entries(); len(e) != 2 || e[1].Name != "second" {
		t.Fatalf("journal %+v: want the two steps alone", e)
	}

	// The fnbridge command's Client takes the number from EnvAfter, set
	// by another process (pid 1 here).
	t.Setenv(stepctx.EnvAddr, addr)
	t.Setenv(stepctx.EnvToken, a.Token())
	t.Setenv(stepctx.EnvAfter, "1:3")
	c, err := stepctx.ClientFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan error, 1)
	go func() {
		_, err := c.Sleep(context.Background(), time.Millisecond)
		got <- err
	}()
	testtool.Eventually(t, 10*time.Second, "the Client's call waiting for start 3", func() (bool, string) {
		n := a.AheadWaiters()
		return n == 1, fmt.Sprintf("%d waiting", n)
	})
	parent.send("run/start", `{"name":"third","ahead":3}`)
	if err := <-got; err == nil || !strings.Contains(err.Error(), `step "third"`) {
		t.Fatalf("the Client's call: %v, want it refused beside step third", err)
	}
	parent.send("run/complete", `{"value":3}`)
	parent.wantRead("run/start", 200, `{"execute":"`)
	parent.wantRead("run/complete", 200, `{"result":{"value":3}}`)

	// A start that never comes (its sender's connection broke before the
	// endpoint read it): the child's call is refused, not journaled ahead
	// of a step a retry may yet send. A child's own numbered start
	// releases no one.
	defer stepctx.SetAheadWait(100 * time.Millisecond)()
	orphan := dialFramed(t, addr, a.Token()+" after=4")
	orphan.want("run/start", `{"name":"own","ahead":4}`, 409, `(start 4 of the attempt) did not reach the bridge within 100ms`)
	if e := j.Entries(); len(e) != 3 {
		t.Fatalf("journal %+v: want the three steps alone", e)
	}
	orphan.want("sleep", `{"millis":1}`, 409, `did not reach the bridge`)
}

// Rule ("Pipelined steps"): a client that numbers a run/start reads its
// answer only after sending its next request, so the endpoint writes the
// two answers together: the worker wakes once for them, not twice. An
// answer held so is still written when the client ends the connection
// first, and a start without a number (a client that may wait for it) is
// answered at once.
func TestFramedNumberedStartAnsweredWithTheNext(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{}
	a, _ := open(t, s, addr, j)
	f := dialFramed(t, addr, a.Token())
	served := func(steps int) {
		t.Helper()
		testtool.Eventually(t, 10*time.Second, "the start served", func() (bool, string) {
			e := j.Entries()
			return len(e) == steps && s.FramedBusy() == 0, fmt.Sprintf("journal %+v, %d busy", e, s.FramedBusy())
		})
	}
	nothingToRead := func(why string) {
		// What the socket holds now: a write the endpoint made before it
		// went back to reading (FramedBusy 0) is there on a unix socket.
		t.Helper()
		rc, err := f.c.(*net.UnixConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var n int
		var rerr error
		if err := rc.Control(func(fd uintptr) {
			n, _, rerr = syscall.Recvfrom(int(fd), make([]byte, 1), syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		}); err != nil {
			t.Fatal(err)
		}
		if f.r.Buffered() > 0 || !errors.Is(rerr, syscall.EAGAIN) {
			t.Fatalf("%s: %d bytes buffered, recv %d, %v; want nothing to read yet", why, f.r.Buffered(), n, rerr)
		}
	}
	f.send("run/start", `{"name":"first","ahead":1}`)
	served(1)
	nothingToRead("a numbered start, served")
	f.send("run/complete", `{"value":1}`)
	f.wantRead("run/start", 200, `{"execute":"`)
	f.wantRead("run/complete", 200, `{"result":{"value":1}}`)

	// Unnumbered: answered at once (a held answer would time out here).
	_ = f.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f.want("run/start", `{"name":"second"}`, 200, `{"execute":"`)
	_ = f.c.SetReadDeadline(time.Time{})
	f.want("run/complete", `{"value":2}`, 200, `{"result":{"value":2}}`)

	// A step whose completion came with its start (one write here): its
	// closure has run, so the journal need not send the command on its
	// own first (stepctx.DoneRunStarter); one that came later, it must.
	f.send("run/start", `{"name":"quick","ahead":2}`, "run/complete", `{"value":3}`)
	f.wantRead("run/start", 200, `{"execute":"`)
	f.wantRead("run/complete", 200, `{"result":{"value":3}}`)
	if e := j.Entries(); len(e) != 3 || !e[2].StartedDone || e[0].StartedDone || e[1].StartedDone {
		t.Fatalf("journal %+v: want only step quick started done", e)
	}

	// The step's function asks for the invocation id: the held answer
	// comes first, then that request's.
	f.send("run/start", `{"name":"asks","ahead":3}`)
	served(4)
	f.send("invocation-id", `{}`)
	f.wantRead("run/start", 200, `{"execute":"`)
	f.wantRead("invocation-id", 200, `inv_fake`)
	f.want("run/complete", `{"value":4}`, 200, `{"result":{"value":4}}`)

	// The client closes its side after a numbered start: the answer still
	// comes.
	f.send("run/start", `{"name":"third","ahead":4}`)
	served(5)
	if err := f.c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	f.wantRead("run/start", 200, `{"execute":"`)
}

// EnvAfter's value names the process that set it: that process itself
// (a kept connection's new preface, a retry) waits for nothing.
func TestAfterOfSkipsItsOwnProcess(t *testing.T) {
	for v, want := range map[string]uint64{"41:3": 3, "42:3": 0, "": 0, "41:x": 0, "3": 0} {
		if got := stepctx.AfterOf(v, 42); got != want {
			t.Errorf("afterOf(%q, 42) = %d, want %d", v, got, want)
		}
	}
}

// holdingAwait is a Journal whose first wait lasts until its context
// ends; later ones its Journal answers (HoldSleeps: suspended at once).
type holdingAwait struct {
	*stepctxtest.Journal
	cut  chan struct{}
	held *atomic.Bool
}

func (j holdingAwait) Await(ctx context.Context, fs []stepctx.Future, mode stepctx.AwaitMode, budget time.Duration) ([]*stepctx.Result, error) {
	if j.held.Swap(true) {
		return j.Journal.Await(ctx, fs, mode, budget)
	}
	<-ctx.Done()
	close(j.cut)
	return nil, ctx.Err()
}

// A framed client that hangs up during a wait (`timeout 2 fnbridge sleep
// 60`) ends the wait, as an HTTP client does, and the attempt: the
// function goes on as if the wait were incomplete, which no replay could
// reproduce once it completes. Incomplete, the attempt suspends on it;
// complete meanwhile, it ends and is retried. A call made meanwhile waits
// for that (never refused as concurrent, 409) and finds the attempt ended.
func TestFramedHangUpEndsTheWaitAndTheAttempt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		complete bool
		want     func(error) bool
	}{
		{"an incomplete wait suspends the attempt", false, func(err error) bool { return errors.Is(err, stepctx.ErrSuspended) }},
		{"a wait complete meanwhile fails the attempt", true, func(err error) bool {
			var wa *stepctx.WaitAbandonedError
			return errors.As(err, &wa)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, addr := serve(t, "unix", stepctx.Config{})
			j := holdingAwait{Journal: &stepctxtest.Journal{HoldSleeps: !tc.complete}, cut: make(chan struct{}), held: new(atomic.Bool)}
			a, _ := open(t, s, addr, j)
			f := dialFramed(t, addr, a.Token())
			frame := binary.BigEndian.AppendUint32(nil, uint32(len("sleep\n{}")))
			if _, err := f.c.Write(append(frame, "sleep\n{}"...)); err != nil {
				t.Fatal(err)
			}
			f.c.Close()
			select {
			case <-j.cut:
			case <-time.After(10 * time.Second):
				t.Fatal("the wait went on after its client hung up")
			}
			f = dialFramed(t, addr, a.Token())
			if status, body := f.do("invocation-id", `{}`); status != 410 {
				t.Fatalf("invocation-id after the hang-up: %d %s, want 410: the attempt ended", status, body)
			}
			if err := a.Err(); !tc.want(err) {
				t.Fatalf("the attempt ended with %v", err)
			}
		})
	}
}

// Every journaled value keeps its bytes although a connection reads each
// frame into the same buffer, and a client may send its preface and
// first request in one write (the Python worker does).
func TestFramedValuesSurviveTheNextFrame(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{}
	a, _ := open(t, s, addr, j)
	network, address, _ := stepctx.ParseAddr(addr)
	c, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	first := "run/start\n" + `{"name":"s1"}`
	frame := binary.BigEndian.AppendUint32([]byte(stepctx.FramedPreface+a.Token()+"\n"), uint32(len(first)))
	if _, err := c.Write(append(frame, first...)); err != nil {
		t.Fatal(err)
	}
	f := &framed{t: t, c: c, r: bufio.NewReader(c)}
	if _, err := io.ReadFull(f.r, make([]byte, 4+len(`200`+"\n"+`{"execute":"`+handleOf("run-", "inv_fake", 1)+`"}`))); err != nil {
		t.Fatal(err)
	}
	values := []string{`{"v":"` + strings.Repeat("a", 300) + `"}`, `{"v":"` + strings.Repeat("b", 200) + `"}`, `"` + strings.Repeat("c", 100<<10) + `"`, `[1, 2]`}
	f.want("run/complete", `{"handle":"`+handleOf("run-", "inv_fake", 1)+`","value":`+values[0]+`}`, 200, `"result"`)
	for i, v := range values[1:] {
		h := handleOf("run-", "inv_fake", i+2)
		f.want("run/start", `{"name":"s`+strconv.Itoa(i+2)+`"}`, 200, `{"execute":"`+h+`"}`)
		f.want("run/complete", `{"handle":"`+h+`","value":`+v+`}`, 200, `"result"`)
	}
	e := j.Entries()
	if len(e) != len(values) {
		t.Fatalf("journal has %d entries, want %d", len(e), len(values))
	}
	for i, v := range values {
		if e[i].Name != "s"+strconv.Itoa(i+1) || e[i].Result == nil || string(e[i].Result.Value) != v {
			t.Errorf("entry %d: %q %.60q, want s%d %.60q", i, e[i].Name, e[i].Result.Value, i+1, v)
		}
	}
}

// A framed connection may move to the client's next attempt: a preface
// sent again between requests switches its token, so one connection can
// serve a worker's attempts one after another. Each request is served
// for the token in force, an ended attempt's token is refused as on a
// fresh connection, and a new preface may share a write with the request.
func TestFramedPrefaceAgainSwitchesAttempt(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j1, j2 := &stepctxtest.Journal{ID: "inv_one"}, &stepctxtest.Journal{ID: "inv_two"}
	a1, _ := open(t, s, addr, j1)
	a2, _ := open(t, s, addr, j2)
	f := dialFramed(t, addr, a1.Token())
	f.want("invocation-id", `{}`, 200, `"inv_one"`)
	a1.Close()
	if _, err := io.WriteString(f.c, stepctx.FramedPreface+a2.Token()+"\n"); err != nil {
		t.Fatal(err)
	}
	f.want("invocation-id", `{}`, 200, `"inv_two"`)
	run1 := handleOf("run-", "inv_two", 1)
	f.want("run/start", `{"name":"s"}`, 200, `{"execute":"`+run1+`"}`)
	f.want("run/complete", `{"handle":"`+run1+`","value":1}`, 200, `"result"`)
	if _, err := io.WriteString(f.c, stepctx.FramedPreface+a1.Token()+"\n"); err != nil {
		t.Fatal(err)
	}
	f.want("invocation-id", `{}`, 403, `belongs to an attempt that has ended`)
	if _, err := io.WriteString(f.c, stepctx.FramedPreface+"\n"); err != nil {
		t.Fatal(err)
	}
	f.want("invocation-id", `{}`, 401, `missing token`)
	if e := j2.Entries(); len(e) != 1 || e[0].Name != "s" {
		t.Errorf("second attempt's journal = %+v, want its one run", e)
	}
	if e := j1.Entries(); len(e) != 0 {
		t.Errorf("first attempt's journal = %+v, want nothing", e)
	}
}

// A framed connection whose attempt ended is closed after an idle time;
// one that a new preface moved to another attempt is not, and while its
// attempt is open a connection stays, however long the client is silent
// (a step's closure may run for minutes).
func TestFramedIdleAfterItsAttempt(t *testing.T) {
	defer stepctx.SetFramedIdle(50 * time.Millisecond)()
	s, addr := serve(t, "unix", stepctx.Config{})
	a1, _ := open(t, s, addr, &stepctxtest.Journal{})
	a2, _ := open(t, s, addr, &stepctxtest.Journal{ID: "inv_two"})
	kept := dialFramed(t, addr, a1.Token())
	dropped := dialFramed(t, addr, a1.Token())
	run1 := handleOf("run-", "inv_fake", 1)
	kept.want("run/start", `{"name":"s"}`, 200, `{"execute":"`+run1+`"}`)
	// Four idle times with the attempt open: the connection must stay.
	time.Sleep(200 * time.Millisecond)
	kept.want("run/complete", `{"handle":"`+run1+`","value":1}`, 200, `"result"`)
	if _, err := io.WriteString(kept.c, stepctx.FramedPreface+a2.Token()+"\n"); err != nil {
		t.Fatal(err)
	}
	kept.want("invocation-id", `{}`, 200, `"inv_two"`)
	a1.Close()
	_ = dropped.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := dropped.r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the connection of the ended attempt: read %d, %v; want it closed (EOF)", n, err)
	}
	// The same end armed nothing on the connection that moved on.
	kept.want("invocation-id", `{}`, 200, `"inv_two"`)
}

// A frame on a connection whose token no open attempt has is answered
// without buffering its body: a client without a live token cannot make
// the server hold up to the body limit per connection (it used to read
// the whole frame into memory before looking at the token).
func TestFramedBodyOfAnUnknownTokenIsNotHeld(t *testing.T) {
	// Such a connection lives one idle time (5 s), which 40 MiB through
	// the race detector on a loaded host can outlast: that bound is
	// TestFramedRequestsDoNotExtendAnEndedConnection's, not this test's.
	defer stepctx.SetFramedIdle(time.Minute)()
	_, addr := serve(t, "unix", stepctx.Config{})
	for _, token := range []string{stepctx.NewToken(), ""} {
		f := dialFramed(t, addr, token)
		const n = 40 << 20
		frame := binary.BigEndian.AppendUint32(nil, uint32(n))
		frame = append(frame, "run/start\n"...)
		frame = append(frame, make([]byte, n-len("run/start\n"))...)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		go func() { _, _ = f.c.Write(frame) }()
		var hdr [4]byte
		if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
			t.Fatal(err)
		}
		answer := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(f.r, answer); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if !strings.HasPrefix(string(answer), "403\n") && !strings.HasPrefix(string(answer), "401\n") {
			t.Errorf("token %q: answer %.80q, want 401 or 403", token, answer)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > n/4 {
			t.Errorf("token %q: a %d-byte frame made the server allocate %d bytes", token, n, got)
		}
		// The connection stays usable, as after any answer.
		f.want("uuid", `{}`, map[bool]int{true: 401, false: 403}[token == ""], "")
	}
}

// A connection without a live token lives one idle time, however often it
// sends requests: each answer used to start the idle time again, so a
// client with a made-up token could hold a connection for good.
func TestFramedRequestsDoNotExtendAnEndedConnection(t *testing.T) {
	defer stepctx.SetFramedIdle(200 * time.Millisecond)()
	_, addr := serve(t, "unix", stepctx.Config{})
	f := dialFramed(t, addr, stepctx.NewToken())
	start := time.Now()
	frame := binary.BigEndian.AppendUint32(nil, uint32(len("uuid\n{}")))
	frame = append(frame, "uuid\n{}"...)
	// closed is where the server's close is seen, on whichever call: it
	// must come about one idle time after the start, not later.
	closed := func() {
		if time.Since(start) > 2*time.Second {
			t.Fatalf("closed after %v, want about one idle time (200ms)", time.Since(start))
		}
	}
	for time.Since(start) < 5*time.Second {
		_ = f.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := f.c.Write(frame); err != nil {
			closed()
			return
		}
		var hdr [4]byte
		if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
			closed()
			return
		}
		if _, err := f.r.Discard(int(binary.BigEndian.Uint32(hdr[:]))); err != nil {
			closed()
			return
		}
		time.Sleep(50 * time.Millisecond) // a request every quarter idle time
	}
	t.Fatal("a connection with a foreign token was still served after 5s of requests")
}

// A client that sends requests and never reads the answers cannot hold
// the server's goroutine: the answer's write is cut with the idle time,
// so Shutdown finds no connection left to wait for.
func TestFramedUnreadAnswersAreCut(t *testing.T) {
	defer stepctx.SetFramedIdle(200 * time.Millisecond)()
	s, addr := serve(t, "unix", stepctx.Config{})
	f := dialFramed(t, addr, stepctx.NewToken())
	frame := binary.BigEndian.AppendUint32(nil, uint32(len("uuid\n{}")))
	frame = append(frame, "uuid\n{}"...)
	burst := bytes.Repeat(frame, 200000) // answers far beyond the socket's buffer
	_ = f.c.SetWriteDeadline(time.Now().Add(3 * time.Second))
	_, _ = f.c.Write(burst) // ends when the server stops reading or closes
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v; the connection that never reads was still served", err)
	}
}

// An HTTP keep-alive connection is closed once idle, like a framed one
// whose attempt ended; it used to stay open for good.
func TestHTTPKeepAliveIsClosedWhenIdle(t *testing.T) {
	defer stepctx.SetFramedIdle(200 * time.Millisecond)()
	_, addr := serve(t, "tcp", stepctx.Config{})
	network, address, _ := stepctx.ParseAddr(addr)
	c, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/uuid HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: %v, want it closed (EOF)", err)
	}
}

// A malformed preface is answered with what is wrong before the
// connection closes; it used to be closed without a word (or, for a token
// with a stray "\r", answered as a token never issued).
func TestFramedMalformedPrefaceIsExplained(t *testing.T) {
	_, addr := serve(t, "unix", stepctx.Config{})
	for _, tc := range []struct{ token, want string }{
		{strings.Repeat("a", 600), "longer than 512 bytes"},
		{stepctx.NewToken() + "\r", `token has '\r'`},
	} {
		f := dialFramed(t, addr, tc.token)
		var hdr [4]byte
		if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
			t.Fatalf("%q: no answer: %v", tc.want, err)
		}
		answer := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(f.r, answer); err != nil {
			t.Fatal(err)
		}
		st, body, _ := strings.Cut(string(answer), "\n")
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || st != "400" || !strings.Contains(e.Error, tc.want) || !strings.Contains(e.Error, "FNBRIDGE_CONTEXT_TOKEN") {
			t.Errorf("answer %q, want 400 naming %q", answer, tc.want)
		}
		if _, err := f.r.ReadByte(); err != io.EOF {
			t.Errorf("%q: then %v, want the connection closed", tc.want, err)
		}
	}
}

// forgetfulRuns journals runs without keeping their values, so what
// memory stays is the server's.
type forgetfulRuns struct{ *stepctxtest.Journal }

func (forgetfulRuns) RunStart(context.Context, string) (*stepctx.Result, stepctx.Future, error) {
	return nil, "run", nil
}

func (forgetfulRuns) RunComplete(context.Context, stepctx.Future, stepctx.RunOutcome) error {
	return nil
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A connection does not keep its largest answer's buffer: a worker keeps
// its connection across attempts, and each held as much memory as the
// largest value it was ever answered (up to the 48 MiB body limit).
func TestFramedLargeAnswerIsNotKept(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	a, _ := open(t, s, addr, forgetfulRuns{&stepctxtest.Journal{}})
	f := dialFramed(t, addr, a.Token())
	base := heapInUse()
	run1 := handleOf("run-", "inv_fake", 1)
	f.want("run/start", `{"name":"x"}`, 200, run1)
	big := base64.StdEncoding.EncodeToString(make([]byte, 24<<20))
	f.want("run/complete", `{"handle":"`+run1+`","bytes":"`+big+`"}`, 200, `"result"`)
	big = ""
	f.want("invocation-id", `{}`, 200, `inv`) // a small answer after it
	if grown := int64(heapInUse()) - int64(base); grown > 8<<20 {
		t.Fatalf("the idle connection holds %d MiB after a 32 MiB answer", grown>>20)
	}
}

// Connections are bounded: one over MaxConns is closed at once, and a
// slot is free again once a connection closes. Without the bound,
// whoever reached the listener could take every descriptor the bridge has.
func TestConnectionsAreBounded(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{MaxConns: 2})
	a, _ := open(t, s, addr, &stepctxtest.Journal{})
	first, second := dialFramed(t, addr, a.Token()), dialFramed(t, addr, a.Token())
	first.want("invocation-id", `{}`, 200, `inv_fake`)
	second.want("invocation-id", `{}`, 200, `inv_fake`)
	network, address, _ := stepctx.ParseAddr(addr)
	// served dials and asks once; a connection over the bound is closed
	// at once, whatever its client managed to write.
	served := func() bool {
		c, err := net.Dial(network, address)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := []byte(stepctx.FramedPreface + a.Token() + "\n")
		req = binary.BigEndian.AppendUint32(req, uint32(len("invocation-id\n{}")))
		_, _ = c.Write(append(req, "invocation-id\n{}"...))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var hdr [4]byte
		_, err = io.ReadFull(c, hdr[:])
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("a connection over the bound: %v, want it served or closed", err)
		}
		return err == nil
	}
	if served() {
		t.Fatal("a third connection was served with MaxConns 2")
	}
	first.c.Close()
	// The slot frees once the server has seen the close: retry until then.
	for deadline := time.Now().Add(10 * time.Second); !served(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no connection was served after one of the two closed")
		}
	}
}

// Connections that only connect, or show a token of no live attempt,
// cannot keep a function out: at the bound, a new connection takes the
// place of the oldest of them, and a function's framed or HTTP call is
// served. Connections that showed a live token are never shed.
func TestIdleConnectionsCannotFillTheBound(t *testing.T) {
	t.Cleanup(stepctx.SetUnprovenGrace(0)) // shed at once: no waiting out the grace below
	s, addr := serve(t, "tcp", stepctx.Config{MaxConns: 3})
	a, _ := open(t, s, addr, &stepctxtest.Journal{})
	network, address, _ := stepctx.ParseAddr(addr)
	proven := dialFramed(t, addr, a.Token())
	proven.want("invocation-id", `{}`, 200, `inv_fake`)
	var squatters []net.Conn
	for i := range 10 {
		c, err := net.Dial(network, address)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if i%2 == 1 {
			_, _ = io.WriteString(c, stepctx.FramedPreface+strings.Repeat("x", 43)+"\n") // no live attempt's
		}
		squatters = append(squatters, c)
	}
	dialFramed(t, addr, a.Token()).want("invocation-id", `{}`, 200, `inv_fake`)
	if st, m := newRaw(t, addr, a.Token()).post(http.MethodPost, "/v1/invocation-id", `{}`); st != 200 {
		t.Fatalf("an HTTP call at the bound: %d %v, want 200", st, m)
	}
	proven.want("invocation-id", `{}`, 200, `inv_fake`)
	// The oldest squatters were closed to make room (well before the
	// 10 s a connection has to show its protocol).
	_ = squatters[0].SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := squatters[0].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the oldest idle connection: read %v, want it closed by the server", err)
	}
}

// A new connection is safe from shedding for a grace period, so that a
// burst of connections cannot shed a function's before it sent its token:
// at the bound with only young unproven connections, the newcomer is the
// one refused.
func TestNewConnectionsAreNotShedAtOnce(t *testing.T) {
	t.Cleanup(stepctx.SetUnprovenGrace(time.Hour))
	s, addr := serve(t, "tcp", stepctx.Config{MaxConns: 2})
	a, _ := open(t, s, addr, &stepctxtest.Journal{})
	network, address, _ := stepctx.ParseAddr(addr)
	young, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer young.Close()
	proven := dialFramed(t, addr, a.Token())
	proven.want("invocation-id", `{}`, 200, `inv_fake`)
	over, err := net.Dial(network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection over the bound: read %v, want it closed", err)
	}
	// young, within its grace, is still served: it shows its token now.
	if _, err := io.WriteString(young, stepctx.FramedPreface+a.Token()+"\n"); err != nil {
		t.Fatal(err)
	}
	req := binary.BigEndian.AppendUint32(nil, uint32(len("invocation-id\n{}")))
	if _, err := young.Write(append(req, "invocation-id\n{}"...)); err != nil {
		t.Fatal(err)
	}
	_ = young.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(young, hdr[:]); err != nil {
		t.Fatalf("the young connection was shed: %v", err)
	}
}

// A run's completion over the body limit can never be taken: the attempt
// ends with a StepTooLargeError naming the step, so no later call is
// refused as made inside a run that stays open. Without an open run a
// request over the limit is refused alone.
func TestStepValueOverTheLimitEndsTheAttempt(t *testing.T) {
	run1 := handleOf("run-", "inv_fake", 1)
	big := `{"handle":"` + run1 + `","value":"` + strings.Repeat("x", 2000) + `"}`
	for _, transport := range []string{"framed", "http"} {
		t.Run(transport, func(t *testing.T) {
			s, addr := serve(t, "unix", stepctx.Config{MaxBodyBytes: 1024})
			j := &stepctxtest.Journal{}
			a, _ := open(t, s, addr, j)
			want := func(op, body string, status int, want string) {
				t.Helper()
				if transport == "framed" {
					dialFramed(t, addr, a.Token()).want(op, body, status, want)
					return
				}
				st, m := newRaw(t, addr, a.Token()).post(http.MethodPost, "/v1/"+op, body)
				if b, _ := json.Marshal(m); st != status || !strings.Contains(string(b), want) {
					t.Errorf("%s %.40s: got %d %s, want %d containing %s", op, body, st, b, status, want)
				}
			}
			want("sleep", `{"name":"`+strings.Repeat("x", 2000)+`"}`, 413, `exceeds 1024 bytes`)
			want("run/start", `{"name":"fetch"}`, 200, `{"execute":"`+run1+`"}`)
			want("run/complete", big, 410, `step \"fetch\": its value is too large: a step's value may have about 31 MiB at most`)
			var tl *stepctx.StepTooLargeError
			if err := a.Err(); !errors.As(err, &tl) || tl.Name != "fetch" || tl.Limit != 1024 || tl.Size <= 1024 {
				t.Fatalf("attempt ended with %v, want a StepTooLargeError of fetch", err)
			}
			want("random", `{}`, 410, `this attempt has ended`)
			if e := j.Entries(); len(e) != 1 || e[0].Result != nil {
				t.Errorf("journal %+v: want the run open, nothing completed", e)
			}
		})
	}
}
