package restate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fnbridge/fnbridge/journal"
	"github.com/fnbridge/fnbridge/restate/wire"
)

const invocationContentTypePrefix = "application/vnd.restate.invocation.v"

// invocationContentTypes are the echoed content types, per version.
var invocationContentTypes = map[int][]string{}

func init() {
	for v := journal.MinVersion; v <= journal.MaxVersion; v++ {
		invocationContentTypes[v] = []string{invocationContentTypePrefix + strconv.Itoa(v)}
	}
}

// negotiateVersion reads the protocol version from the request content type.
func negotiateVersion(ct string) (int, bool) {
	ct = strings.TrimSpace(ct)
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = strings.TrimSpace(ct[:i])
	}
	if len(ct) <= len(invocationContentTypePrefix) || !strings.EqualFold(ct[:len(invocationContentTypePrefix)], invocationContentTypePrefix) {
		return 0, false
	}
	// Only the canonical decimal version (no sign, no leading zero): the
	// response echoes the content type with the version as it is written
	// here, and the protocol wants the same content type back.
	digits := ct[len(invocationContentTypePrefix):]
	if digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v < journal.MinVersion || v > journal.MaxVersion {
		return 0, false
	}
	return v, true
}

var retryAfterOne = []string{"1"}

// invocation is one attempt: one HTTP request/response stream.
type invocation struct {
	// failedRun is the run RunFail named: the attempt's ErrorMessage, once
	// the handler returns its *RetryableError, relates to it.
	failedRun *failedRun
	// cancelVerdict is EndsCancelled's settled answer: 0 none yet, 1
	// the failure ends cancelled, -1 it fails the attempt.
	cancelVerdict int8
	ep            *Endpoint
	h             *boundHandler
	w             http.ResponseWriter
	r             *http.Request
	fl            http.Flusher

	// mu guards m, which the body reader goroutine feeds concurrently
	// with the handler goroutine's operations (BIDI_STREAM only).
	mu sync.Mutex
	m  *journal.Machine
	// wake is signalled (without blocking) after every frame the reader
	// goroutine delivers, so the handler goroutine re-checks its await.
	wake chan struct{}

	ctx    context.Context
	cancel context.CancelCauseFunc
	// released is set (under wmu and mu) once the stream is done. A
	// durable operation still running on another goroutine (the bridge's
	// context endpoint answering a worker after the attempt ended) then
	// writes nothing and waits for nothing; see release.
	released bool

	// wmu serialises writes to the response: durable operations may run
	// on a goroutine other than the handler's.
	wmu      sync.Mutex
	frames   *wire.Reader
	spare    []byte // the idle half of the output double buffer
	writeErr error

	input   []byte
	headers map[string]string

	// watch bounds the wait for the StartMessage; kept across requests.
	watch *startWatch
	// freeSlot gives the stream's MaxConcurrentInvocations slot back.
	freeSlot func()
	// calls are the completion ids of the callee invocation ids of this
	// attempt's calls, in call order (under mu): a handler that takes its
	// cancellation cancels them (cancelCalls).
	calls []uint32
}

func newInvocation() *invocation { return &invocation{wake: make(chan struct{}, 1)} }

func (e *Endpoint) serveInvoke(w http.ResponseWriter, r *http.Request, h *boundHandler) {
	// Admission first, so a refused stream costs no body read and no state.
	n, ok := e.admit(w) // refused while draining (health.go)
	if !ok {
		return
	}
	if n > int64(e.cfg.MaxConcurrentInvocations) {
		e.streamDone()
		e.cfg.Logger.Warn().Str("handler", h.service+"/"+h.name).Int("limit", e.cfg.MaxConcurrentInvocations).
			Msg("refused an invocation stream: too many concurrent invocation streams")
		e.refused(RefusedConcurrencyLimit)
		w.Header()["Retry-After"] = retryAfterOne
		httpError(w, http.StatusServiceUnavailable, "too many concurrent invocation streams: this endpoint serves at most %d at once; retry later", e.cfg.MaxConcurrentInvocations)
		return
	}
	// The slot is given back once the terminal message is written (or the
	// stream ends without one): the runtime may open its next stream as
	// soon as it has read End, before it ends this one's request body.
	var freed atomic.Bool
	freeSlot := func() {
		if freed.CompareAndSwap(false, true) {
			e.streamDone()
		}
	}
	defer freeSlot()
	version, ok := negotiateVersion(r.Header.Get("Content-Type"))
	if !ok {
		e.refused(RefusedBeforeStart)
		httpError(w, http.StatusUnsupportedMediaType, "unsupported content-type %q: this endpoint speaks %s%d to %s%d", r.Header.Get("Content-Type"), invocationContentTypePrefix, journal.MinVersion, invocationContentTypePrefix, journal.MaxVersion)
		return
	}
	bidi := e.cfg.ProtocolMode == BidiStream
	if bidi && r.ProtoMajor == 1 {
		// restate-server streams full duplex over HTTP/1.1 too: our
		// response starts before its request body ends.
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			httpError(w, http.StatusInternalServerError, "BIDI_STREAM over HTTP/1.1 needs full duplex, which this server cannot do: %v", err)
			return
		}
	}
	m, err := journal.New(version)
	if err != nil { // unreachable: negotiateVersion only admits supported versions
		httpError(w, http.StatusUnsupportedMediaType, "%v", err)
		return
	}
	m.LimitJournal(e.cfg.MaxJournalBytes)
	m.LimitMessages(sendLimit(e.cfg.MaxMessageSize))
	inv := newInvocation()
	inv.ep, inv.h, inv.w, inv.r, inv.m = e, h, w, r, m
	inv.freeSlot = freeSlot
	inv.fl, _ = w.(http.Flusher)
	inv.frames = wire.NewReader(r.Body, readLimit(e.cfg.MaxMessageSize))
	delete(w.Header(), "Connection") // the stream reads its body (see ServeHTTP)
	inv.serve(version, bidi)
	inv.release()
}

// release ends inv's use of the response. An invocation is never reused
// for another stream: a durable operation the handler left running on
// another goroutine (the bridge's context endpoint serving a worker's
// request as the attempt ends) may still hold it, and must find this
// attempt's own machine and context, never another invocation's. So it
// keeps its machine and its (cancelled) context, and released makes flush
// drop output and await answer Closed; the response writer is forgotten,
// since writing to it after the handler returned is not allowed.
func (inv *invocation) release() {
	inv.wmu.Lock()
	inv.mu.Lock()
	inv.released, inv.w, inv.fl = true, nil, nil
	inv.mu.Unlock()
	inv.wmu.Unlock()
	inv.frames.Reset(nil)
}

func (inv *invocation) serve(version int, bidi bool) {
	growStack(version)
	log := inv.ep.cfg.Logger
	// Bootstrapping and replay: read until the machine holds StartMessage
	// and all known entries (or failed). In REQUEST_RESPONSE the runtime
	// sends everything first, so read to the end of the body.
	watch := inv.watchStart(inv.ep.cfg.StartTimeout)
	for !inv.m.Done() && (!bidi || !inv.m.Ready()) {
		h, p, err := inv.frames.Next()
		if err != nil {
			if watch.expired() {
				inv.failStartTimeout()
			}
			inv.readFailed(err)
			break
		}
		_ = inv.m.Receive(h, p)
	}
	if !inv.finishWatch(watch) {
		// Expired as the last frame arrived: the body's next read may
		// already be interrupted, so this attempt cannot go on.
		inv.failStartTimeout()
	}
	w := inv.w
	w.Header()["Content-Type"] = invocationContentTypes[version]
	w.WriteHeader(http.StatusOK)

	var readerDone chan struct{}
	base, cancel := context.WithCancelCause(attemptContext(inv.r))
	inv.mu.Lock()
	inv.ctx, inv.cancel = base, cancel
	inv.mu.Unlock()
	defer cancel(nil)
	started := false
	if !inv.m.Done() {
		in, err := inv.m.Input()
		if err == nil {
			started = true
			inv.input = in.GetValue().GetContent()
			if hs := in.GetHeaders(); len(hs) > 0 {
				inv.headers = make(map[string]string, len(hs))
				for _, h := range hs {
					inv.headers[h.GetKey()] = h.GetValue()
				}
			}
			if inv.m.Cancelled() && !inv.h.deliverCancel {
				cancel(ErrCancelled)
			}
			if bidi && !inv.m.IsInputClosed() {
				readerDone = make(chan struct{})
				go inv.readLoop(readerDone)
			}
			inv.runHandler()
		}
	}
	if !started && inv.m.Failure() != nil {
		inv.ep.refused(RefusedBeforeStart)
	}
	inv.flush()
	if readerDone != nil {
		inv.stopReader(readerDone)
	}
	if f := inv.m.Failure(); f != nil {
		log.Warn().Str("invocation", inv.m.InvocationID()).Str("handler", inv.h.service+"/"+inv.h.name).
			Uint16("code", uint16(f.Code)).Msg(f.Message)
	}
}

// readerGrace bounds how long a finished attempt waits for the runtime to
// end its request body (restate-server does so once it has the terminal
// message) before interrupting the body reader.
const readerGrace = 2 * time.Second

// stopReader waits for the body reader goroutine to finish: a handler must
// not read the body after ServeHTTP returns. Normally the runtime ends its
// side right after our terminal message and the reader sees EOF; otherwise
// an expired read deadline unblocks its pending Read (HTTP/1.1 and HTTP/2
// both support it), or, failing that, closing the body does.
func (inv *invocation) stopReader(done chan struct{}) {
	select {
	case <-done:
		return
	default:
	}
	// A request that is already done has no runtime left to end the body.
	if inv.r.Context().Err() == nil {
		t := time.NewTimer(readerGrace)
		defer t.Stop()
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
	interruptRead(inv.w, inv.r)
	<-done
}

// startWatch interrupts the body read of a request that does not deliver
// the StartMessage and its journal within the start timeout. The pooled
// invocation reuses its watch only when the timer was stopped before
// firing; a watch whose timer fired is dropped, so a late callback never
// touches the request the invocation serves next.
type startWatch struct {
	mu    sync.Mutex   // held by expire while it interrupts
	state atomic.Int32 // 0 watching, 1 finished in time, 2 expired
	t     *time.Timer
	w     http.ResponseWriter
	r     *http.Request
}

// watchStart arms inv's watch for its current request.
func (inv *invocation) watchStart(d time.Duration) *startWatch {
	sw := inv.watch
	if sw == nil {
		sw = &startWatch{}
		inv.watch = sw
		sw.w, sw.r = inv.w, inv.r
		sw.t = time.AfterFunc(d, sw.expire)
		return sw
	}
	sw.w, sw.r = inv.w, inv.r
	sw.state.Store(0)
	sw.t.Reset(d)
	return sw
}

func (sw *startWatch) expire() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.state.CompareAndSwap(0, 2) {
		interruptRead(sw.w, sw.r)
	}
}

func (sw *startWatch) expired() bool { return sw.state.Load() == 2 }

// finishWatch stops inv's watch; false means it expired, and then the
// interrupt is complete when it returns (the request must still exist
// while its read is interrupted).
func (inv *invocation) finishWatch(sw *startWatch) bool {
	if sw.t.Stop() {
		sw.w, sw.r = nil, nil
		return sw.state.CompareAndSwap(0, 1)
	}
	inv.watch = nil // the callback ran or runs: never reuse this watch
	if sw.state.CompareAndSwap(0, 1) {
		return true
	}
	sw.mu.Lock() // expire holds it until its interrupt is done
	expired := sw.expired()
	sw.mu.Unlock()
	return !expired
}

func (inv *invocation) failStartTimeout() {
	inv.m.Fail(&journal.Error{Code: journal.CodeProtocolViolation, RelatedIndex: -1,
		Message: fmt.Sprintf("timed out after %v waiting for the StartMessage and the journal it announces (restate-server sends them at once; the endpoint's start timeout ended this stream)", inv.ep.cfg.StartTimeout)})
}

// interruptRead makes a pending or future read of r's body fail: an
// expired read deadline (HTTP/1.1 and HTTP/2 both support it) or, failing
// that, closing the body.
func interruptRead(w http.ResponseWriter, r *http.Request) {
	if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		_ = r.Body.Close()
	}
}

// readFailed maps the end of the request body onto the machine.
func (inv *invocation) readFailed(err error) {
	switch {
	case errors.Is(err, wire.ErrMessageTooLarge):
		// Every retry would bring the same frame: pause.
		inv.m.Fail(&journal.Error{Code: journal.CodeProtocolViolation, Message: err.Error(), RelatedIndex: -1, Pause: true})
	case err == io.EOF:
		inv.m.InputClosed()
	case errors.Is(err, io.ErrUnexpectedEOF) && !inv.m.Done():
		// A frame cut short is a broken peer at any point, as it is
		// during replay: never taken for the end of its input.
		inv.m.Fail(&journal.Error{Code: journal.CodeProtocolViolation, Message: fmt.Sprintf("reading the request body: %v", err), RelatedIndex: -1})
		inv.m.InputClosed()
	default:
		// A broken or timed-out body: nothing more can arrive.
		if !inv.m.Done() && !inv.m.Ready() {
			inv.m.Fail(&journal.Error{Code: journal.CodeProtocolViolation, Message: fmt.Sprintf("reading the request body: %v", err), RelatedIndex: -1})
		}
		inv.m.InputClosed()
	}
}

// readLoop delivers frames that arrive while the handler runs (BIDI).
func (inv *invocation) readLoop(done chan struct{}) {
	defer close(done)
	for {
		h, p, err := inv.frames.Next()
		inv.mu.Lock()
		if err != nil {
			inv.readFailed(err)
		} else {
			_ = inv.m.Receive(h, p)
		}
		cancelled, ended := inv.m.Cancelled(), inv.m.Done()
		suspended := ended && inv.m.Terminal() == wire.SuspensionMessageType
		inv.mu.Unlock()
		switch {
		case cancelled && !inv.h.deliverCancel:
			inv.cancel(ErrCancelled)
		case suspended:
			// The handler's context says why it ended, so a handler
			// still waiting on something else (the bridge waiting for a
			// steps-mode function) can tell a suspension from a failure.
			inv.cancel(ErrSuspended)
		case ended:
			inv.cancel(ErrAttemptEnded)
		}
		select {
		case inv.wake <- struct{}{}:
		default:
		}
		if err != nil || ended {
			return
		}
	}
}

// streamEnder is a response that can end while its request body is still
// read: the endpoint's HTTP/2 server (restate/internal/h2).
type streamEnder interface{ EndStream() error }

// flush writes the machine's pending output and flushes it to the wire.
func (inv *invocation) flush() {
	inv.wmu.Lock()
	defer inv.wmu.Unlock()
	inv.mu.Lock()
	if inv.released || !inv.m.Pending() {
		inv.mu.Unlock()
		return
	}
	out := inv.m.TakeOutput(inv.spare)
	last := inv.m.Done() // the terminal message is in out
	inv.mu.Unlock()
	if last {
		inv.freeSlot() // before the runtime can read it
	}
	if inv.writeErr == nil {
		if _, err := inv.w.Write(out); err != nil {
			inv.writeErr = err
		} else if e, ok := inv.w.(streamEnder); ok && last {
			// Over HTTP/2 the response ends with its terminal message,
			// in one frame, while the body is still read to its end.
			if err := e.EndStream(); err != nil {
				inv.writeErr = err
			}
		} else if inv.fl != nil {
			inv.fl.Flush()
		}
	}
	inv.spare = out[:0]
}

// failedRun is a run whose closure failed retryably (see RunFail).
type failedRun struct {
	index int
	name  string
}

// runHandler calls the HandlerFunc and turns its return into the output or
// the attempt failure.
func (inv *invocation) runHandler() {
	c := invocationContext{inv}
	out, err := inv.call(c)
	var te *TerminalError
	if err != nil && inv.h.deliverCancel && !errors.Is(err, ErrCancelled) && !errors.As(err, &te) {
		inv.mu.Lock()
		endsCancelled := !inv.m.Done() && inv.cancelEndsLocked()
		inv.mu.Unlock()
		if endsCancelled {
			// It ends cancelled below without a wait having taken the
			// CANCEL, and the invocations it called are cancelled then
			// too, as a wait would (and the SDKs) do. A wait in there
			// that suspends or ends the attempt leaves the machine done.
			_ = inv.cancelCalls()
		}
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.m.Done() {
		return
	}
	var re *RetryableError
	switch {
	case inv.m.Cancelled() && !inv.h.deliverCancel:
		_ = inv.m.Output(journal.Result{Failure: &journal.Failure{Code: CodeCancelled, Message: cancelledMessage}})
	case inv.interruptedLocked(-1, ""):
	case errors.Is(err, ErrCancelled) && inv.m.Cancelled():
		// DeliverCancel: the handler ended with the cancellation it saw.
		_ = inv.m.Output(journal.Result{Failure: &journal.Failure{Code: CodeCancelled, Message: cancelledMessage}})
	case errors.Is(err, ErrCancelled):
		inv.m.Fail(&journal.Error{Code: CodeUnavailable, Message: "the handler reported cancellation, but Restate did not cancel the invocation: " + err.Error(), RelatedIndex: -1})
	case err == nil:
		_ = inv.m.Output(journal.Result{Value: out})
	case errors.As(err, &te):
		_ = inv.m.Output(journal.Result{Failure: &journal.Failure{Code: orInternal(te.Code), Message: te.Message}})
	case inv.cancelEndsLocked():
		// DeliverCancel, but the handler failed before any wait saw the
		// CANCEL: a retry would only run it again, so it ends cancelled,
		// as it would have without DeliverCancel.
		_ = inv.m.Output(journal.Result{Failure: &journal.Failure{Code: CodeCancelled, Message: cancelledMessage}})
	case errors.As(err, &re):
		if f := inv.failedRun; f != nil {
			inv.m.Fail(retryableToJournal(re, f.index, wire.RunCommandType, f.name))
		} else {
			inv.m.Fail(retryableToJournal(re, -1, 0, ""))
		}
	default:
		inv.m.Fail(&journal.Error{Code: CodeInternal, Message: err.Error(), RelatedIndex: -1})
	}
}

// cancelEndsLocked is whether a DeliverCancel handler's retryable failure
// ends the invocation cancelled: the CANCEL arrived and no wait took it,
// or EndsCancelled settled it so. Callers hold inv.mu.
func (inv *invocation) cancelEndsLocked() bool {
	if inv.cancelVerdict != 0 {
		return inv.cancelVerdict > 0
	}
	return inv.m.Cancelled() && !inv.m.CancelTaken()
}

// call runs the handler, turning a panic into an attempt failure.
func (inv *invocation) call(c invocationContext) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &RetryableError{Code: CodeInternal, Message: fmt.Sprintf("handler panicked: %v\n%s", p, debug.Stack())}
		}
	}()
	return inv.h.fn(c, inv.input)
}

func retryableToJournal(re *RetryableError, index int, t wire.MessageType, name string) *journal.Error {
	return &journal.Error{Code: orInternal(re.Code), Message: re.Message, RetryAfter: re.RetryAfter, Pause: re.Pause,
		RelatedIndex: index, RelatedType: t, RelatedName: name}
}

// interruptedLocked reports whether the handler's context ended without
// a CANCEL signal (the request is done: the stream closed or the server is
// shutting down), and if so fails the attempt with an ErrorMessage, so
// nothing of what the handler does afterwards is journaled. Callers hold
// inv.mu and have checked m.Cancelled.
func (inv *invocation) interruptedLocked(index int, name string) bool {
	if inv.ctx.Err() == nil {
		return false
	}
	e := &journal.Error{Code: CodeUnavailable, Message: fmt.Sprintf("attempt interrupted without a CANCEL signal: %v", context.Cause(inv.ctx)), RelatedIndex: -1}
	if index >= 0 {
		e.RelatedIndex, e.RelatedType, e.RelatedName = index, wire.RunCommandType, name
	}
	inv.m.Fail(e)
	return true
}

// await blocks until completion id is ready, cancelled, or this attempt
// ended, flushing pending output before it sleeps. It also wakes when the
// handler's context ends, so a request that is gone without the body
// reader noticing does not leave the handler waiting forever.
func (inv *invocation) await(id uint32) (journal.Result, journal.Status) {
	return inv.awaitContext(context.Background(), id)
}

// awaitContext is await that returns journal.Pending when ctx ends first.
func (inv *invocation) awaitContext(ctx context.Context, id uint32) (journal.Result, journal.Status) {
	return inv.awaitWith(ctx, id, true)
}

// awaitSent is await for the invocation id of a one-way call, which a
// CANCEL does not preempt in a handler that takes cancellation as a
// failure of its next wait (journal.Machine.AwaitUncancelled). Any other
// handler's context ends with the CANCEL, so its send ends cancelled too.
func (inv *invocation) awaitSent(id uint32) (journal.Result, journal.Status) {
	return inv.awaitWith(context.Background(), id, !inv.h.deliverCancel)
}

// awaitWith is awaitContext; a CANCEL ends the wait only when
// cancellable.
func (inv *invocation) awaitWith(ctx context.Context, id uint32, cancellable bool) (journal.Result, journal.Status) {
	for {
		inv.mu.Lock()
		if inv.released {
			inv.mu.Unlock()
			return journal.Result{}, journal.Closed
		}
		var res journal.Result
		var st journal.Status
		if cancellable {
			res, st = inv.m.Await(id)
		} else {
			res, st = inv.m.AwaitUncancelled(id)
		}
		if st == journal.Pending && inv.ctx.Err() != nil && inv.interruptedLocked(-1, "") {
			st = journal.Closed
		}
		inv.mu.Unlock()
		if st != journal.Pending {
			return res, st
		}
		inv.flush()
		select {
		case <-inv.wake:
		case <-inv.ctx.Done():
		case <-ctx.Done():
			return journal.Result{}, journal.Pending
		}
	}
}

// readLimit is the largest payload the endpoint reads under the runtime's
// message size limit max: max plus a 32nd (1 MiB of restate-server's
// 32 MiB). restate-server 1.7.12 gathers eager state of up to its limit
// plus 256 KiB into a StartMessage, framing aside, and passes on call
// results and state values up to that size too.
func readLimit(max int) int {
	if max <= 0 {
		return max
	}
	return min(max+max/32, math.MaxInt32) // wire.Reader's own bound
}

// sendLimit is the largest payload the endpoint sends under the runtime's
// message size limit max: max less a 32nd (1 MiB of restate-server's
// 32 MiB). restate-server 1.7.12 refuses a run proposal that comes within
// some kilobytes of its limit without failing the attempt (it logs a
// warning and never acknowledges it, so the invocation hangs); one over
// this bound fails at once, naming the step, instead.
func sendLimit(max int) int {
	if max <= 0 {
		return max
	}
	return max - max/32
}
