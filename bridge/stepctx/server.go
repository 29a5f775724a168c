package stepctx

import (
	"bytes"
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// DefaultMaxBodyBytes bounds a request body; it leaves room for base64 of
// a value close to Restate's default 32 MiB message limit.
const DefaultMaxBodyBytes = 48 << 20

// MaxRunNameBytes bounds a step's name, which is journaled with the step
// and shown in Restate's UI: one bound whoever asks (Python, a Bash
// function's shell through its step agent, a child process), rather than
// whatever fits the request.
const MaxRunNameBytes = 16 << 10

// MaxBodyLimit is the largest MaxBodyBytes: a framed length over it is
// never a request, so a preface sent again on a framed connection ("FNBR"
// read as a length) cannot be taken for one.
const MaxBodyLimit = 1 << 30

// staleTokens is how many ended attempts' tokens the Server remembers to
// tell "ended" from "never issued"; older ones read as never issued.
const staleTokens = 4096

// minTokenLen is 128 bits of unpadded base64url.
const minTokenLen = 22

// Config configures a Server.
type Config struct {
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	// It is at most MaxBodyLimit.
	MaxBodyBytes int64
	// MaxConns bounds the connections served at once. 0 means a quarter
	// of the process's descriptor limit, at least 64 and at most 4096:
	// whoever can reach the listener cannot take the descriptors the
	// bridge needs for restate-server and its workers. At the bound, a new
	// connection takes the place of the oldest one that has not shown a
	// live attempt's token within a second of connecting; with none such
	// it is closed at once. So connections that merely connect (or send a
	// wrong token) do not keep the functions' own out for long; a flood of
	// new ones faster than the bound per second still can.
	MaxConns int
	// Logger gets a warning, a few at a time, when the bound refuses a
	// connection; the zero Logger logs nothing.
	Logger zerolog.Logger
}

// defaultMaxConns is Config.MaxConns' default.
func defaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return int(min(max(rl.Cur/4, 64), 4096))
}

// Server serves the context endpoint for any number of attempts, each
// identified by its token. It is an http.Handler (the HTTP protocol
// alone); Serve runs both protocols on a listener.
type Server struct {
	maxBody int64

	mu       sync.Mutex
	attempts map[[32]byte]*Attempt
	stale    map[[32]byte]struct{}
	order    [][32]byte // stale keys, oldest first
	srv      *http.Server

	closing   bool // Shutdown was called
	maxConns  int
	conns     atomic.Int64 // served now, at most maxConns; not under mu, which Shutdown holds while it closes connections
	listeners map[net.Listener]struct{}
	framed    map[*framedConn]struct{}

	// unproven are the served connections that have not yet shown a live
	// attempt's token, oldest first: the ones admit sheds at MaxConns.
	// Under pmu, not mu (a connection closes while mu is held).
	pmu      sync.Mutex
	unproven list.List // of *countedConn
	fullLog  zerolog.Logger
}

// NewServer returns a Server with no attempts.
func NewServer(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	cfg.MaxBodyBytes = min(cfg.MaxBodyBytes, MaxBodyLimit)
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultMaxConns()
	}
	s := &Server{
		maxBody:  cfg.MaxBodyBytes,
		maxConns: cfg.MaxConns,
		attempts: map[[32]byte]*Attempt{},
		stale:    map[[32]byte]struct{}{},

		listeners: map[net.Listener]struct{}{},
		framed:    map[*framedConn]struct{}{},
		fullLog:   cfg.Logger.Sample(&zerolog.BurstSampler{Burst: 3, Period: 10 * time.Second}),
	}
	// Made here, not in Serve, so that a Shutdown before Serve started
	// still makes that Serve return at once.
	// An idle keep-alive connection is closed after the idle time a
	// framed one gets once its attempt ended: no client keeps one open by
	// merely connecting.
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Duration(framedIdle.Load()),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}
	return s
}

// AttemptOption configures an Attempt at Open.
type AttemptOption func(*Attempt)

// WithSuspendAfter is the budget passed to every Journal.Await of the
// attempt (the handler's suspend_after).
func WithSuspendAfter(d time.Duration) AttemptOption {
	return func(a *Attempt) { a.suspendAfter = d }
}

// WithDeadline is the latest time a wait of the attempt may end on the
// open stream: the function's timeout counts its waits too, so a wait
// that cannot complete by then suspends the attempt (however short
// suspend_after is) rather than let the runtime kill the function after
// it, and a step under way with it. Resumption is a new attempt with its
// own timeout.
func WithDeadline(t time.Time) AttemptOption {
	return func(a *Attempt) { a.deadline = t }
}

// WithHandler tells the attempt which handler it runs, for the calls it
// refuses (see HandlerInfo); without it, a handler of a plain service.
func WithHandler(h HandlerInfo) AttemptOption {
	return func(a *Attempt) { a.handler = h }
}

// NewToken returns a fresh token: 256 bits from crypto/rand, unpadded
// base64url.
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it aborts the process instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Open registers an attempt served through j. An empty token generates
// one (NewToken); a given token must be at least 22 characters of
// base64url (128 bits) and not in use or used before. The token is
// accepted until the Attempt is closed.
func (s *Server) Open(token string, j Journal, opts ...AttemptOption) (*Attempt, error) {
	if j == nil {
		return nil, errors.New("stepctx: Open needs a Journal")
	}
	if token == "" {
		token = NewToken()
	} else if err := checkToken(token); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Attempt{
		s:       s,
		key:     sha256.Sum256([]byte(token)),
		token:   token,
		j:       j,
		fresh:   !j.Replaying(),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		handles: map[string]*handle{},
	}
	for _, o := range opts {
		o(a)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.attempts[a.key]; ok {
		cancel()
		return nil, errors.New("stepctx: token is already in use by an open attempt")
	}
	if _, ok := s.stale[a.key]; ok {
		cancel()
		return nil, errors.New("stepctx: token belongs to an attempt that has ended; tokens are never reused")
	}
	s.attempts[a.key] = a
	return a, nil
}

func checkToken(t string) error {
	if len(t) < minTokenLen {
		return fmt.Errorf("stepctx: token is %d characters; at least %d (128 bits of base64url) are required", len(t), minTokenLen)
	}
	for _, c := range t {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("stepctx: token has %q; only base64url characters (A-Z a-z 0-9 - _) are allowed", c)
		}
	}
	return nil
}

// retire moves a's token from the open attempts to the stale ones.
func (s *Server) retire(a *Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempts[a.key] != a {
		return
	}
	delete(s.attempts, a.key)
	s.stale[a.key] = struct{}{}
	s.order = append(s.order, a.key)
	if len(s.order) > staleTokens {
		delete(s.stale, s.order[0])
		s.order = s.order[1:]
	}
}

// lookup finds the attempt of a request's bearer token, or the error
// status and message to answer with.
func (s *Server) lookup(r *http.Request) (*Attempt, int, string) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if h == "" {
		return nil, http.StatusUnauthorized, "missing Authorization header: every fnbridge context request needs \"Authorization: Bearer <token>\" with the token from " + EnvToken
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, http.StatusUnauthorized, "malformed Authorization header: want \"Bearer <token>\""
	}
	return s.lookupKey(sha256.Sum256([]byte(token)))
}

// lookupKey finds the attempt of a token's hash, or the error status and
// message to answer with.
func (s *Server) lookupKey(key [32]byte) (*Attempt, int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.attempts[key]; ok {
		return a, 0, ""
	}
	if _, ok := s.stale[key]; ok {
		return nil, http.StatusForbidden, "this fnbridge context token belongs to an attempt that has ended; a process that outlives its attempt cannot make context calls"
	}
	return nil, http.StatusForbidden, "this fnbridge context token was not issued by this bridge (or belongs to an attempt that ended long ago)"
}

// Attempt is one registered attempt: its token, Journal and the state of
// its requests.
type Attempt struct {
	s            *Server
	key          [32]byte
	token        string
	j            Journal
	fresh        bool // !j.Replaying() at Open
	suspendAfter time.Duration
	deadline     time.Time // WithDeadline; zero: none
	handler      HandlerInfo
	ctx          context.Context // cancelled by Close: cuts in-flight Journal calls
	cancel       context.CancelFunc

	// serving is the request being served (nil when none is), guarded
	// by servingMu: see acquire.
	servingMu sync.Mutex
	serving   *served
	// openBy is the framed connection that started the open run, if one
	// did: read without running, so a closed connection that started none
	// need not wait for an operation in flight.
	openBy atomic.Pointer[framedConn]
	// running is held while an operation runs, so that Close returns
	// only once none does: nothing is journaled after it. It guards
	// handles, next, tag, openRun, caller and rng, and changes of openBy.
	running sync.Mutex
	handles map[string]*handle
	next    int
	tag     string      // of the invocation's handles (handleTag)
	openRun string      // handle of the run whose closure is executing
	caller  *framedConn // the framed connection of the request served; nil over HTTP
	rng     *randSource // created at the first random or uuid request

	mu   sync.Mutex
	err  error // why the attempt ended; nil while it runs
	done chan struct{}

	// aheadSeen is the highest "ahead" of a run/start served (pipelined
	// starts, EnvAfter); aheadNext is closed when it grows (guarded by
	// aheadMu).
	aheadMu   sync.Mutex
	aheadSeen uint64
	aheadNext chan struct{}
	aheadWait int // requests waiting in waitAhead, for tests
}

// aheadWait bounds how long a child's request waits for the start of the
// step it was started in (see EnvAfter): the start was sent before the
// child existed, so it is a frame the endpoint has yet to read, unless
// its sender's connection broke; then the request is refused (409).
var aheadWait = 10 * time.Second // a variable for tests

// noteAhead records that the run/start numbered k was served.
func (a *Attempt) noteAhead(k uint64) {
	a.aheadMu.Lock()
	defer a.aheadMu.Unlock()
	if k > a.aheadSeen {
		a.aheadSeen = k
		if a.aheadNext != nil {
			close(a.aheadNext)
			a.aheadNext = nil
		}
	}
}

// waitAhead returns once the run/start numbered k was served or the
// attempt ended (true), or aheadWait passed (false).
func (a *Attempt) waitAhead(k uint64) bool {
	var timeout <-chan time.Time
	for {
		a.aheadMu.Lock()
		if a.aheadSeen >= k {
			a.aheadMu.Unlock()
			return true
		}
		if a.aheadNext == nil {
			a.aheadNext = make(chan struct{})
		}
		next := a.aheadNext
		a.aheadWait++
		a.aheadMu.Unlock()
		if timeout == nil {
			t := time.NewTimer(aheadWait)
			defer t.Stop()
			timeout = t.C
		}
		ok, over := true, false
		select {
		case <-next:
		case <-a.done:
			over = true // serveOp says it ended
		case <-timeout:
			ok, over = false, true
		}
		a.aheadMu.Lock()
		a.aheadWait--
		a.aheadMu.Unlock()
		if over {
			return ok
		}
	}
}

type handle struct {
	f        Future
	run      bool
	name     string // of a run
	finished bool   // a run that was completed
}

// ErrClosed is Attempt.Err after Close when nothing else ended it.
var ErrClosed = errors.New("the attempt was closed")

// StepFailedError is Attempt.Err after a run's closure failed retryably,
// or was abandoned: the framed connection that started the run closed
// before the run was completed (the process running it was killed, say).
type StepFailedError struct {
	Name    string
	Message string
	// Abandoned: no outcome was reported; Message says why.
	Abandoned bool
}

func (e *StepFailedError) Error() string {
	if e.Abandoned {
		return fmt.Sprintf("step %q was abandoned: %s; the attempt is retried", e.Name, e.Message)
	}
	return fmt.Sprintf("step %q failed and will be retried: %s", e.Name, e.Message)
}

// WaitAbandonedError is Attempt.Err after a client gave up a wait whose
// futures completed before the attempt could suspend on them. A function
// that gives up a wait (`timeout 2 fnbridge sleep 60`, a signal) goes on
// as if it were incomplete, and a replay, which finds it complete, would
// take another path and journal other steps: so the attempt journals
// nothing more. It suspends on the wait's futures when they are still
// incomplete (the replay after they complete finds the wait complete); when
// they completed meanwhile it ends with this error, and is retried.
type WaitAbandonedError struct{}

func (*WaitAbandonedError) Error() string {
	return "the function gave up a durable wait (a timeout or a signal around fnbridge sleep, call or await) after it completed: " +
		"a replay would find it complete and take another path, so the attempt is retried; " +
		"for a deadline, await a sleep with the other futures (fnbridge await --any, fnbridge.wait_any)"
}

// StepTooLargeError is Attempt.Err after a run's completion was larger
// than the endpoint takes (MaxBodyBytes). The step stays open in the
// journal; a retry would run it to the same size again, so the caller
// should pause the invocation rather than retry it.
type StepTooLargeError struct {
	Name  string
	Size  int64 // the request's body, its value encoded in it
	Limit int64
}

func (e *StepTooLargeError) Error() string {
	// Size and Limit are the request's, its value encoded in it: named as
	// such, beside the bound a user can act on (the README's).
	return fmt.Sprintf("step %q: its value is too large: a step's value may have about 31 MiB at most (restate-server's 32 MiB message size, less room it needs), and the request carrying this one is %d bytes, over the %d the context endpoint takes; make the value smaller (journal a file's path, say, rather than its contents)", e.Name, e.Size, e.Limit)
}

// Token is the attempt's bearer token.
func (a *Attempt) Token() string { return a.token }

// Fresh reports that the Journal was not replaying when the attempt was
// opened: the attempt replays nothing, so its function may pipeline its
// steps (see "Pipelined steps" in the package doc); the runtime is told
// so with the token.
func (a *Attempt) Fresh() bool { return a.fresh }

// Done is closed when the attempt stops accepting context calls: it
// suspended, its Journal failed, a step failed retryably, or it was
// closed.
func (a *Attempt) Done() <-chan struct{} { return a.done }

// Err is nil while the attempt runs, then why it ended: an error wrapping
// ErrSuspended, a *StepFailedError, the Journal's error, or ErrClosed.
func (a *Attempt) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Close makes the token stale: later requests get 403, an in-flight
// Journal call has its context cancelled, and Close returns once it has
// returned, so the Journal sees no call of the attempt after Close.
// Close is idempotent.
func (a *Attempt) Close() {
	a.s.retire(a)
	a.cancel()
	a.end(ErrClosed)
	a.running.Lock()
	//lint:ignore SA2001 an empty critical section: waiting for the operation in flight is the point
	a.running.Unlock()
}

// end records the first reason the attempt ended.
func (a *Attempt) end(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
		close(a.done)
	}
}

// apiError is an answer other than 200, or a 200 whose call failed
// terminally (failure set): refused, or interrupted by cancellation.
type apiError struct {
	status    int
	msg       string
	suspended bool
	failure   *wireFailure
}

// callFailed is the answer of a CallFailedError.
func callFailed(e *CallFailedError) *apiError {
	return &apiError{status: http.StatusOK, msg: e.Failure.Message,
		failure: &wireFailure{Code: int(orInternal(e.Failure.Code)), Message: e.Failure.Message}}
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// endedError is the 410 answer of an attempt that ended with err.
func endedError(err error) *apiError {
	if errors.Is(err, ErrSuspended) {
		return &apiError{status: http.StatusGone, suspended: true, msg: "the invocation suspended: this attempt must stop now; Restate resumes the invocation in a new attempt"}
	}
	return &apiError{status: http.StatusGone, msg: "this attempt has ended (" + err.Error() + "): it must stop now"}
}

const errConcurrent = "the fnbridge context is being used by another thread/process at the same time; context calls must be made one at a time"

var routes = map[string]opFunc{
	RouteRunStart:     (*Attempt).runStart,
	RouteRunComplete:  (*Attempt).runComplete,
	RouteSleep:        (*Attempt).sleep,
	RouteCall:         (*Attempt).call,
	RouteSend:         (*Attempt).send,
	RouteAwait:        (*Attempt).await,
	RouteInvocationID: (*Attempt).invocationID,
	RouteRandom:       (*Attempt).random,
	RouteUUID:         (*Attempt).uuid,

	RouteStateGet:         (*Attempt).stateGet,
	RouteStateKeys:        (*Attempt).stateKeys,
	RouteStateSet:         (*Attempt).stateSet,
	RouteStateClear:       (*Attempt).stateClear,
	RouteStateClearAll:    (*Attempt).stateClearAll,
	RouteAwakeable:        (*Attempt).awakeable,
	RouteAwakeableResolve: (*Attempt).awakeableResolve,
	RouteAwakeableReject:  (*Attempt).awakeableReject,
	RoutePromiseGet:       (*Attempt).promiseGet,
	RoutePromisePeek:      (*Attempt).promisePeek,
	RoutePromiseResolve:   (*Attempt).promiseResolve,
	RoutePromiseReject:    (*Attempt).promiseReject,
	RouteCancel:           (*Attempt).cancelInvocation,
}

// ServeHTTP serves one context request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, ok := routes[r.URL.Path]
	if !ok {
		writeError(w, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no fnbridge context operation %q (this bridge speaks protocol v1)", r.URL.Path)})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, msg: r.Method + " is not allowed: context operations are POST"})
		return
	}
	a, status, msg := s.lookup(r)
	if a == nil {
		writeError(w, &apiError{status: status, msg: msg})
		return
	}
	if err := a.Err(); err != nil {
		writeError(w, endedError(err))
		return
	}
	if sc, ok := r.Context().Value(connKey{}).(*sniffedConn); ok {
		s.prove(sc.Conn)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, a.tooLarge(r.ContentLength, mb.Limit))
			return
		}
		writeError(w, badRequest("reading the request body: %v", err))
		return
	}
	status, resp := a.serveOp(r.Context(), op, body, nil)
	writeJSON(w, status, resp)
}

// opFunc is one operation of the protocol.
type opFunc = func(a *Attempt, ctx context.Context, body []byte) (any, *apiError)

// serveOp runs one operation of a, whichever transport carried it, and
// gives the status and the answer to encode. ctx ends when the client went
// away; fc is the framed connection that carried it (nil over HTTP).
func (a *Attempt) serveOp(ctx context.Context, op opFunc, body []byte, fc *framedConn) (int, any) {
	// Refuse rather than queue: the order of two concurrent calls would be
	// the scheduler's, and a replay could not reproduce it.
	if !a.acquire(ctx) {
		return errorAnswer(&apiError{status: http.StatusConflict, msg: errConcurrent})
	}
	defer a.release()
	a.running.Lock()
	defer a.running.Unlock()
	// It may have ended while the body was read (Close sets the end
	// before it waits for running, so one of the two sees the other).
	if err := a.Err(); err != nil {
		return errorAnswer(endedError(err))
	}
	a.caller = fc
	defer func() { a.caller = nil }()
	resp, aerr := op(a, ctx, body)
	if aerr != nil {
		return errorAnswer(aerr)
	}
	return http.StatusOK, resp
}

// served is one request being served.
type served struct {
	gone <-chan struct{} // closed once its client hung up
	over chan struct{}   // closed once it has been served
}

// abandonedWait bounds how long a call waits for a request in flight
// whose client hung up to finish.
const abandonedWait = 5 * time.Second

// acquire makes the request whose client is ctx the one served, and
// reports whether it could. A request in flight refuses it, unless that
// request's client hung up (`timeout 2 fnbridge sleep 60`, then the
// next call): it is ending (its wait ends the attempt, see
// waitAbandoned) and the caller has moved on, so the call waits for it,
// at most abandonedWait, rather than being refused as concurrent; it then
// finds the attempt ended.
func (a *Attempt) acquire(ctx context.Context) bool {
	var bound <-chan time.Time
	for {
		a.servingMu.Lock()
		cur := a.serving
		if cur == nil {
			a.serving = &served{gone: ctx.Done(), over: make(chan struct{})}
			a.servingMu.Unlock()
			return true
		}
		a.servingMu.Unlock()
		select {
		case <-cur.gone:
		default:
			return false
		}
		if bound == nil {
			t := time.NewTimer(abandonedWait)
			defer t.Stop()
			bound = t.C
		}
		select {
		case <-cur.over:
		case <-ctx.Done():
			return false
		case <-bound:
			return false
		}
	}
}

// release ends the request acquire made the one served.
func (a *Attempt) release() {
	a.servingMu.Lock()
	close(a.serving.over)
	a.serving = nil
	a.servingMu.Unlock()
}

// tooLarge answers a request body over limit bytes (size, when known,
// is its length; -1 or 0 when not). While a run executes it can only be
// the run's completion, which can never be taken: the attempt ends with
// a StepTooLargeError instead of leaving the run open, which would refuse
// every later call as made inside it. Otherwise the request alone is
// refused.
func (a *Attempt) tooLarge(size, limit int64) *apiError {
	refused := &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body exceeds %d bytes", limit)}
	if !a.acquire(context.Background()) {
		return refused
	}
	defer a.release()
	a.running.Lock()
	defer a.running.Unlock()
	if err := a.Err(); err != nil {
		return endedError(err)
	}
	if a.openRun == "" {
		return refused
	}
	h := a.handles[a.openRun]
	a.closeRun(h)
	if size < limit {
		size = limit + 1 // "more than limit" is all that is known
	}
	a.end(&StepTooLargeError{Name: h.name, Size: size, Limit: limit})
	return endedError(a.Err())
}

// errorAnswer is the status and body of e.
func errorAnswer(e *apiError) (int, any) {
	if e.failure != nil {
		return e.status, failedResponse{Failure: e.failure}
	}
	return e.status, errorResponse{Error: e.msg, Suspended: e.suspended}
}

func writeError(w http.ResponseWriter, e *apiError) {
	status, v := errorAnswer(e)
	writeJSON(w, status, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorResponse{Error: "encoding the response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decode parses a request body strictly: unknown fields are refused so a
// misspelt field is an error rather than silently ignored.
func decode(body []byte, v any) *apiError {
	if len(body) == 0 {
		body = []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return badRequest("request body: %v", err)
	}
	if d.More() {
		return badRequest("request body: more than one JSON value")
	}
	return nil
}

// journalFailed ends the attempt on a Journal error and gives the answer;
// a CallFailedError fails the call alone.
func (a *Attempt) journalFailed(err error) *apiError {
	var cf *CallFailedError
	if errors.As(err, &cf) && a.ctx.Err() == nil {
		return callFailed(cf)
	}
	if a.ctx.Err() != nil {
		// Closed meanwhile: the Journal saw its context cancelled.
		a.end(ErrClosed)
	} else if errors.Is(err, ErrSuspended) {
		a.end(err)
	} else {
		a.end(fmt.Errorf("journal: %w", err))
	}
	return endedError(a.Err())
}

// notInRun refuses a journal operation while a run's closure executes:
// it would be journaled inside the step, and not reproduced by a replay
// that skips the closure.
func (a *Attempt) notInRun() *apiError {
	if a.openRun == "" {
		return nil
	}
	h := a.handles[a.openRun]
	return &apiError{status: http.StatusConflict, msg: fmt.Sprintf("step %q (%s) is executing: no context call can be made until it completes, neither inside a run step nor beside it (a parallel job or thread): calls are journaled one at a time", h.name, a.openRun)}
}

// handleTagLen is the length of a handle's tag: 32 bits of hex.
const handleTagLen = 8

// handleTag is the tag of the invocation's handles ("fut-<tag>-<n>"):
// the start of the SHA-256 of its id, so a handle from another
// invocation is told from one of this, and every attempt of the
// invocation (which replays) mints the same handles.
func (a *Attempt) handleTag() string {
	if a.tag == "" {
		sum := sha256.Sum256([]byte(a.j.InvocationID()))
		a.tag = hex.EncodeToString(sum[:handleTagLen/2])
	}
	return a.tag
}

func (a *Attempt) newHandle(prefix string, h *handle) string {
	a.next++
	id := prefix + a.handleTag() + "-" + strconv.Itoa(a.next)
	a.handles[id] = h
	return id
}

// handleTagOf is the tag of a handle newHandle could have minted, in any
// invocation; ok is false for anything else.
func handleTagOf(id string) (tag string, ok bool) {
	rest, ok := strings.CutPrefix(id, "fut-")
	if !ok {
		rest, ok = strings.CutPrefix(id, "run-")
	}
	if !ok {
		return "", false
	}
	tag, n, ok := strings.Cut(rest, "-")
	if !ok || len(tag) != handleTagLen || n == "" || strings.Trim(tag, "0123456789abcdef") != "" || strings.Trim(n, "0123456789") != "" {
		return "", false
	}
	return tag, true
}

// unknownHandle refuses a handle this attempt did not issue; issuers
// names the operations that issue the kind expected.
func (a *Attempt) unknownHandle(id, issuers string) *apiError {
	if tag, ok := handleTagOf(id); ok && tag != a.handleTag() {
		return badRequest("handle %q was issued to another invocation: a handle is valid only in the invocation that created it", id)
	}
	return badRequest("unknown handle %q: not issued by %s in this attempt", id, issuers)
}

func (a *Attempt) runStart(_ context.Context, body []byte) (any, *apiError) {
	var req runStartRequest
	if e := decodeRunStart(body, &req); e != nil {
		return nil, e
	}
	if req.Name == "" {
		return nil, badRequest("run needs a non-empty \"name\"")
	}
	if len(req.Name) > MaxRunNameBytes {
		return nil, badRequest("run's \"name\" is %d bytes; a step name may have at most %d", len(req.Name), MaxRunNameBytes)
	}
	if a.caller != nil {
		a.caller.lastStart = ""
	}
	if e := a.notInRun(); e != nil {
		return nil, e
	}
	var recorded *Result
	var f Future
	var err error
	if ds, ok := a.j.(DoneRunStarter); ok && a.caller != nil && a.caller.completeNext {
		recorded, f, err = ds.RunStartDone(a.ctx, req.Name)
	} else {
		recorded, f, err = a.j.RunStart(a.ctx, req.Name)
	}
	if err != nil {
		return nil, a.journalFailed(err)
	}
	if recorded != nil {
		// The number the run had when it executed, so that later handles
		// are those of the attempts before.
		a.next++
		return runStartResponse{Recorded: encodeResult(*recorded, req.AsBytes)}, nil
	}
	id := a.newHandle("run-", &handle{f: f, run: true, name: req.Name})
	a.openRun = id
	if a.caller != nil {
		a.openBy.Store(a.caller)
		a.caller.started(a)
		a.caller.lastStart = id
	}
	// Live: from here on every run/start executes, so the function may
	// pipeline (a fresh attempt's function knows it from the start).
	return runStartResponse{Execute: id, Live: !a.fresh && !a.j.Replaying()}, nil
}

func (a *Attempt) runComplete(_ context.Context, body []byte) (any, *apiError) {
	var req runCompleteRequest
	if e := decodeRunComplete(body, &req); e != nil {
		return nil, e
	}
	if req.Handle == "" {
		// A client that pipelines its steps sends run/complete before it
		// has read run/start's answer, so without the handle: it means the
		// run its own latest run/start executed, if that run is the one
		// executing. Never another's (a child process's run, a run started
		// before a refused start): its value would be journaled under the
		// wrong step.
		if a.caller == nil || a.openRun == "" || a.caller.lastStart != a.openRun || a.openBy.Load() != a.caller {
			return nil, badRequest("run/complete without a \"handle\" completes the run executing, and none is: " +
				"none was started by this connection's latest run/start (a framed connection's; over HTTP, give the handle)")
		}
		req.Handle = a.openRun
	}
	h := a.handles[req.Handle]
	switch {
	case h == nil:
		return nil, a.unknownHandle(req.Handle, "run/start")
	case !h.run:
		return nil, badRequest("handle %q is not a run: futures are awaited, not completed", req.Handle)
	case h.finished:
		return nil, badRequest("run %q (%s) was already completed", h.name, req.Handle)
	}
	given := 0
	for _, set := range []bool{len(req.Value) > 0, req.Bytes != nil, req.Failure != nil, req.Retryable != nil} {
		if set {
			given++
		}
	}
	if given != 1 {
		return nil, badRequest("run/complete needs exactly one of \"value\", \"bytes\", \"failure\" or \"retryable\"")
	}
	var out RunOutcome
	switch {
	case req.Retryable != nil:
		msg := req.Retryable.Message
		if msg == "" {
			msg = "the step failed"
		}
		if e := a.failStep(h, &StepFailedError{Name: h.name, Message: msg}); e != nil {
			return nil, e
		}
		return runCompleteResponse{AttemptFailed: true}, nil
	case req.Failure != nil:
		code, err := failureCode(req.Failure.Code)
		if err != nil {
			return nil, badRequest("%v", err)
		}
		out.Result.Failure = &Failure{Code: code, Message: req.Failure.Message}
	default:
		v, err := decodePayload("value", req.Value, "bytes", req.Bytes)
		if err != nil {
			return nil, badRequest("%v", err)
		}
		out.Result.Value = v
	}
	a.closeRun(h)
	if err := a.j.RunComplete(a.ctx, h.f, out); err != nil {
		return nil, a.journalFailed(err)
	}
	return runCompleteResponse{Result: encodeResult(out.Result, req.AsBytes)}, nil
}

// failStep ends the attempt with the retryable failure sf of run h: the
// Journal records it (nothing is journaled) and Restate retries the
// attempt.
func (a *Attempt) failStep(h *handle, sf *StepFailedError) *apiError {
	a.closeRun(h)
	if err := a.j.RunComplete(a.ctx, h.f, RunOutcome{Retryable: &RetryableFailure{Step: h.name, Message: sf.Message}}); err != nil {
		return a.journalFailed(err)
	}
	a.end(sf)
	return nil
}

// closeRun marks run h, the open one, finished.
func (a *Attempt) closeRun(h *handle) {
	h.finished = true
	a.openRun = ""
	a.openBy.Store(nil)
}

// abandon fails the open run of the attempt if fc started it: fc closed,
// so its outcome can never be reported, and the open run would refuse
// every later call of the attempt as made inside it.
func (a *Attempt) abandon(fc *framedConn) {
	if a.openBy.Load() != fc {
		return
	}
	// running alone (not busy): a request arriving meanwhile waits for
	// this, then finds the attempt ended.
	a.running.Lock()
	defer a.running.Unlock()
	if a.Err() != nil || a.openRun == "" || a.openBy.Load() != fc {
		return
	}
	h := a.handles[a.openRun]
	_ = a.failStep(h, &StepFailedError{Name: h.name, Abandoned: true,
		Message: "the process running it went away before reporting its outcome"})
}

func (a *Attempt) sleep(ctx context.Context, body []byte) (any, *apiError) {
	var req sleepRequest
	if e := decode(body, &req); e != nil {
		return nil, e
	}
	if req.Millis < 0 || req.Millis > maxMillis {
		return nil, badRequest("sleep \"millis\" is %d; want 0 to %d (about 292 years)", req.Millis, maxMillis)
	}
	if e := a.notInRun(); e != nil {
		return nil, e
	}
	f, err := a.j.Sleep(a.ctx, time.Duration(req.Millis)*time.Millisecond)
	if err != nil {
		return nil, a.journalFailed(err)
	}
	return a.future(ctx, f, req.Async, req.AsBytes)
}

// future answers a new future: its handle when async, else its result.
func (a *Attempt) future(rctx context.Context, f Future, async, asBytes bool) (any, *apiError) {
	if async {
		return futureResponse{Handle: a.newHandle("fut-", &handle{f: f})}, nil
	}
	res, e := a.awaitFutures(rctx, []Future{f}, AwaitAll)
	if e != nil {
		return nil, e
	}
	return futureResponse{Result: encodeResult(*res[0], asBytes)}, nil
}

// waitBudget is how long a wait may take before the attempt suspends:
// suspend_after, or what is left until the deadline when that is less (at
// once when nothing is).
func (a *Attempt) waitBudget() time.Duration {
	b := a.suspendAfter
	if a.deadline.IsZero() || b <= 0 {
		return b
	}
	if left := time.Until(a.deadline); left < b {
		b = max(left, time.Nanosecond) // zero would mean the Journal's default
	}
	return b
}

// waitAbandoned ends the attempt whose client gave up a wait on fs: the
// function goes on as if the wait were incomplete, which a replay cannot
// reproduce once it is complete (see WaitAbandonedError). It suspends on
// fs at once; if they completed meanwhile, or the Journal cannot suspend
// (Bridge.Invoke's, which would wait on: bounded well inside the
// abandonedWait of a call made meanwhile), the attempt ends with
// WaitAbandonedError.
func (a *Attempt) waitAbandoned(fs []Future, mode AwaitMode) *apiError {
	ctx, cancel := context.WithTimeout(a.ctx, abandonedWait/5)
	defer cancel()
	_, err := a.j.Await(ctx, fs, mode, time.Nanosecond)
	var cf *CallFailedError
	if err == nil || errors.As(err, &cf) || ctx.Err() != nil && a.ctx.Err() == nil {
		a.end(&WaitAbandonedError{})
		return endedError(a.Err())
	}
	return a.journalFailed(err) // suspended, closed, or the journal failed
}

func (a *Attempt) awaitFutures(rctx context.Context, fs []Future, mode AwaitMode) ([]*Result, *apiError) {
	// A client that hangs up gives the wait up; the request context ends
	// it then, and the attempt with it (waitAbandoned).
	ctx, stop := context.WithCancel(a.ctx)
	defer stop()
	defer context.AfterFunc(rctx, stop)()
	res, err := a.j.Await(ctx, fs, mode, a.waitBudget())
	if err != nil {
		if rctx.Err() != nil && a.ctx.Err() == nil && !errors.Is(err, ErrSuspended) {
			return nil, a.waitAbandoned(fs, mode)
		}
		return nil, a.journalFailed(err)
	}
	bad := len(res) != len(fs)
	some := false
	for _, x := range res {
		if x != nil {
			some = true
		} else if mode == AwaitAll {
			bad = true
		}
	}
	if bad || !some {
		return nil, a.journalFailed(fmt.Errorf("Await(%s) of %d futures returned %d results, not all complete as promised", mode, len(fs), len(res)))
	}
	return res, nil
}

func (a *Attempt) call(ctx context.Context, body []byte) (any, *apiError) {
	var req callRequest
	if e := decode(body, &req); e != nil {
		return nil, e
	}
	cr, e := callRequestOf(req.Service, req.Handler, req.Key, req.IdempotencyKey, req.Headers, req.Input, req.InputBytes)
	if e != nil {
		return nil, e
	}
	if e := a.notInRun(); e != nil {
		return nil, e
	}
	if e := a.calleeKey("call", cr); e != nil {
		return nil, e
	}
	f, err := a.j.Call(a.ctx, cr)
	if err != nil {
		return nil, a.journalFailed(err)
	}
	return a.future(ctx, f, req.Async, req.AsBytes)
}

func callRequestOf(service, handler, key, idem string, headers map[string]string, input json.RawMessage, inputBytes *string) (CallRequest, *apiError) {
	if service == "" || handler == "" {
		return CallRequest{}, badRequest("a call needs a non-empty \"service\" and \"handler\"")
	}
	in, err := decodePayload("input", input, "input_bytes", inputBytes)
	if err != nil {
		return CallRequest{}, badRequest("%v", err)
	}
	return CallRequest{Service: service, Handler: handler, Key: key, IdempotencyKey: idem, Headers: headers, Input: in}, nil
}

func (a *Attempt) send(_ context.Context, body []byte) (any, *apiError) {
	var req sendRequest
	if e := decode(body, &req); e != nil {
		return nil, e
	}
	cr, e := callRequestOf(req.Service, req.Handler, req.Key, req.IdempotencyKey, req.Headers, req.Input, req.InputBytes)
	if e != nil {
		return nil, e
	}
	if req.DelayMillis < 0 || req.DelayMillis > maxMillis {
		return nil, badRequest("send \"delay_millis\" is %d; want 0 to %d (about 292 years)", req.DelayMillis, maxMillis)
	}
	if e := a.notInRun(); e != nil {
		return nil, e
	}
	if e := a.calleeKey("send", cr); e != nil {
		return nil, e
	}
	id, err := a.j.Send(a.ctx, SendRequest{CallRequest: cr, Delay: time.Duration(req.DelayMillis) * time.Millisecond})
	if err != nil {
		return nil, a.journalFailed(err)
	}
	return sendResponse{InvocationID: id}, nil
}

// maxMillis is the longest sleep or delay: the largest time.Duration, in
// milliseconds. A longer one would overflow into a negative duration, a
// wait that ends at once.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

func (a *Attempt) await(ctx context.Context, body []byte) (any, *apiError) {
	var req awaitRequest
	if e := decode(body, &req); e != nil {
		return nil, e
	}
	var mode AwaitMode
	switch req.Mode {
	case "", "all":
		mode = AwaitAll
	case "any":
		mode = AwaitAny
	default:
		return nil, badRequest("await \"mode\" %q: want \"all\" or \"any\"", req.Mode)
	}
	if len(req.Handles) == 0 {
		return nil, badRequest("await needs at least one handle")
	}
	if e := a.notInRun(); e != nil {
		return nil, e
	}
	fs := make([]Future, len(req.Handles))
	for i, id := range req.Handles {
		h := a.handles[id]
		switch {
		case h == nil:
			return nil, a.unknownHandle(id, "sleep, call, awakeable or promise/get")
		case h.run:
			return nil, badRequest("handle %q is a run: runs are completed with %s, not awaited", id, RouteRunComplete)
		}
		fs[i] = h.f
	}
	res, e := a.awaitFutures(ctx, fs, mode)
	if e != nil {
		return nil, e
	}
	if mode == AwaitAll {
		out := awaitResponse{Results: make([]*wireResult, len(res))}
		for i, x := range res {
			out.Results[i] = encodeResult(*x, req.AsBytes)
		}
		return out, nil
	}
	for i, x := range res {
		if x != nil {
			return awaitResponse{Index: &i, Handle: req.Handles[i], Result: encodeResult(*x, req.AsBytes)}, nil
		}
	}
	panic("unreachable: awaitFutures checked that one result is set")
}

func (a *Attempt) invocationID(_ context.Context, body []byte) (any, *apiError) {
	if e := decode(body, &emptyRequest{}); e != nil {
		return nil, e
	}
	return invocationIDResponse{InvocationID: a.j.InvocationID()}, nil
}

func (a *Attempt) source() (*randSource, *apiError) {
	if e := a.notInRun(); e != nil {
		return nil, e
	}
	if a.rng == nil {
		a.rng = newRandSource(a.j.RandomSeed())
	}
	return a.rng, nil
}

func (a *Attempt) random(_ context.Context, body []byte) (any, *apiError) {
	if e := decode(body, &emptyRequest{}); e != nil {
		return nil, e
	}
	src, e := a.source()
	if e != nil {
		return nil, e
	}
	n := src.next() >> 11 // 53 bits: exact as a float64 and as a JSON number
	return randomResponse{Float: float64(n) / (1 << 53), Int: n}, nil
}

func (a *Attempt) uuid(_ context.Context, body []byte) (any, *apiError) {
	if e := decode(body, &emptyRequest{}); e != nil {
		return nil, e
	}
	src, e := a.source()
	if e != nil {
		return nil, e
	}
	return uuidResponse{UUID: src.uuid4()}, nil
}
