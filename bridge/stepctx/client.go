package stepctx

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
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Client makes context calls for one attempt, on one framed connection
// (FramedPreface) dialed at the first call. It asks for values as bytes
// (as_bytes), so every Result carries the journaled bytes exactly. A
// Client is safe for use by one goroutine at a time: the protocol refuses
// concurrent calls anyway.
type Client struct {
	network, address string
	token            string
	after            uint64 // the parent's pipelined start to wait for (EnvAfter); 0: none
	conn             net.Conn
	r                *bufio.Reader
	buf              []byte
}

// ClientErrorPrefix starts the message of every error of the Client.
const ClientErrorPrefix = "fnbridge context: "

// Error is a context call answered with a status other than 200.
type Error struct {
	// Status is the HTTP status: 400 a malformed request, 401/403 a
	// missing, stale or foreign token, 409 concurrent use, 410 the attempt
	// ended (suspended or failed) and the process must stop.
	Status int
	// Message is the server's "error".
	Message string
	// Suspended is set on a 410 caused by suspension.
	Suspended bool
}

func (e *Error) Error() string {
	return fmt.Sprintf(ClientErrorPrefix+"%s (HTTP %d)", e.Message, e.Status)
}

// Is makes errors.Is(err, ErrSuspended) true for a suspension.
func (e *Error) Is(target error) bool { return target == ErrSuspended && e.Suspended }

// Ended reports whether the attempt is over (410): no later call can
// succeed and the process must stop.
func (e *Error) Ended() bool { return e.Status == http.StatusGone }

// NewClient returns a Client for the endpoint addr (ParseAddr) and token.
func NewClient(addr, token string) (*Client, error) {
	network, address, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errors.New(ClientErrorPrefix + "empty token")
	}
	return &Client{network: network, address: address, token: token}, nil
}

// ClientFromEnv is NewClient with EnvAddr and EnvToken.
func ClientFromEnv() (*Client, error) {
	addr, token := os.Getenv(EnvAddr), os.Getenv(EnvToken)
	if addr == "" || token == "" {
		return nil, fmt.Errorf("%s and %s are not set: context calls work only inside a function that fnbridge runs with durable steps (durability: steps), and in the processes it starts with its environment (not under env -i or a scrubbed environment)", EnvAddr, EnvToken)
	}
	c, err := NewClient(addr, token)
	if err == nil {
		c.after = afterOf(os.Getenv(EnvAfter), os.Getpid())
	}
	return c, err
}

// afterOf is the start an EnvAfter value ("<pid>:<k>") asks a process
// with pid self to wait for: k when another process (its parent) set it,
// else 0, as for a value that is not one.
func afterOf(v string, self int) uint64 {
	pid, k, ok := strings.Cut(v, ":")
	if !ok || pid == strconv.Itoa(self) {
		return 0
	}
	n, err := strconv.ParseUint(k, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Close closes the connection.
func (c *Client) Close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.r = nil, nil
	}
}

// exchange sends one request frame and reads its answer: the status and
// the JSON body. A broken exchange closes the connection: whether the
// request reached the journal is unknown.
func (c *Client) exchange(ctx context.Context, op string, body []byte) (int, []byte, error) {
	if c.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, c.network, c.address)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.r = conn, bufio.NewReader(conn)
		c.buf = append(append(c.buf[:0], FramedPreface...), c.token...)
		if c.after > 0 {
			c.buf = strconv.AppendUint(append(c.buf, " after="...), c.after, 10)
		}
		c.buf = append(c.buf, '\n')
	} else {
		c.buf = c.buf[:0]
	}
	n := len(c.buf)
	c.buf = append(c.buf, 0, 0, 0, 0)
	c.buf = append(append(append(c.buf, op...), '\n'), body...)
	binary.BigEndian.PutUint32(c.buf[n:], uint32(len(c.buf)-n-4))
	// A cancelled ctx interrupts the exchange through the deadline. The
	// func gets its own copy of the connection: it may still be running
	// when Close below clears c.conn.
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	status, answer, err := c.roundTrip()
	if !stop() || err != nil {
		c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return 0, nil, err
	}
	return status, answer, nil
}

func (c *Client) roundTrip() (int, []byte, error) {
	if _, err := c.conn.Write(c.buf); err != nil {
		return 0, nil, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	frame := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(c.r, frame); err != nil {
		return 0, nil, err
	}
	st, answer, ok := bytes.Cut(frame, []byte("\n"))
	status, err := strconv.Atoi(string(st))
	if !ok || err != nil {
		return 0, nil, fmt.Errorf("malformed answer frame %q", frame[:min(len(frame), 64)])
	}
	return status, answer, nil
}

func (c *Client) do(ctx context.Context, route string, req, resp any) error {
	if err := checkText(req); err != nil {
		err.Route = route
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	status, b, err := c.exchange(ctx, strings.TrimPrefix(route, "/v1/"), body)
	if err != nil {
		return fmt.Errorf(ClientErrorPrefix+"%s: %w", route, err)
	}
	if status != http.StatusOK {
		var e errorResponse
		if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
			return &Error{Status: status, Message: fmt.Sprintf("unexpected answer to %s: %q", route, b)}
		}
		return &Error{Status: status, Message: e.Error, Suspended: e.Suspended}
	}
	var failed failedResponse
	if err := json.Unmarshal(b, &failed); err == nil && failed.Failure != nil {
		code, err := failureCode(failed.Failure.Code)
		if err != nil {
			return fmt.Errorf(ClientErrorPrefix+"the answer to %s: %w", route, err)
		}
		return &CallFailedError{Failure: Failure{Code: code, Message: failed.Failure.Message}}
	}
	if err := json.Unmarshal(b, resp); err != nil {
		return fmt.Errorf(ClientErrorPrefix+"decoding the answer to %s: %w", route, err)
	}
	return nil
}

// TextError is a request whose text field (a step or state name, a key,
// a header) is not valid UTF-8. Restate takes text as UTF-8, and JSON
// would replace the invalid bytes, so two different keys or names would
// reach Restate as one: the request is refused before it is sent.
type TextError struct {
	Route string // the operation, e.g. "/v1/call"
	Field string // its name in the request, e.g. "key"
	Value string
}

func (e *TextError) Error() string {
	return fmt.Sprintf("%s: %s %q is not valid UTF-8: Restate takes text as UTF-8 only", strings.TrimPrefix(e.Route, "/v1/"), e.Field, e.Value)
}

// checkText finds a string field of the request struct req (or a string
// of one of its map fields) that is not valid UTF-8.
func checkText(req any) *TextError {
	v := reflect.ValueOf(req)
	if v.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i < v.NumField(); i++ {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			if !utf8.ValidString(f.String()) {
				return &TextError{Field: name, Value: f.String()}
			}
		case reflect.Map:
			if f.Type().Key().Kind() != reflect.String || f.Type().Elem().Kind() != reflect.String {
				continue
			}
			for it := f.MapRange(); it.Next(); {
				if k := it.Key().String(); !utf8.ValidString(k) {
					return &TextError{Field: name + " name", Value: k}
				}
				if e := it.Value().String(); !utf8.ValidString(e) {
					return &TextError{Field: name + "[" + strconv.Quote(it.Key().String()) + "]", Value: e}
				}
			}
		}
	}
	return nil
}

// RunStart starts a run: a recorded Result (replay: do not execute), or
// the handle to pass to RunComplete after executing.
func (c *Client) RunStart(ctx context.Context, name string) (*Result, string, error) {
	var resp runStartResponse
	if err := c.do(ctx, RouteRunStart, runStartRequest{Name: name, AsBytes: true}, &resp); err != nil {
		return nil, "", err
	}
	if resp.Recorded != nil {
		r, err := decodeResult(resp.Recorded)
		if err != nil {
			return nil, "", fmt.Errorf(ClientErrorPrefix+"run/start: %w", err)
		}
		return &r, "", nil
	}
	if resp.Execute == "" {
		return nil, "", errors.New(ClientErrorPrefix + "run/start answered neither recorded nor execute")
	}
	return nil, resp.Execute, nil
}

// RunComplete reports how the closure of run handle ended.
func (c *Client) RunComplete(ctx context.Context, handle string, out RunOutcome) error {
	req := runCompleteRequest{Handle: handle, AsBytes: true}
	switch {
	case out.Retryable != nil:
		req.Retryable = &wireRetryable{Message: out.Retryable.Message}
	case out.Result.Failure != nil:
		req.Failure = &wireFailure{Code: int(out.Result.Failure.Code), Message: out.Result.Failure.Message}
	default:
		b := base64.StdEncoding.EncodeToString(out.Result.Value)
		req.Bytes = &b
	}
	var resp runCompleteResponse
	return c.do(ctx, RouteRunComplete, req, &resp)
}

func (c *Client) future(ctx context.Context, route string, req any) (Result, string, error) {
	var resp futureResponse
	if err := c.do(ctx, route, req, &resp); err != nil {
		return Result{}, "", err
	}
	if resp.Handle != "" {
		return Result{}, resp.Handle, nil
	}
	r, err := decodeResult(resp.Result)
	return r, "", err
}

// Sleep sleeps durably for d (rounded down to milliseconds).
func (c *Client) Sleep(ctx context.Context, d time.Duration) (Result, error) {
	r, _, err := c.future(ctx, RouteSleep, sleepRequest{Millis: d.Milliseconds(), AsBytes: true})
	return r, err
}

// SleepAsync starts a durable timer and returns its handle.
func (c *Client) SleepAsync(ctx context.Context, d time.Duration) (string, error) {
	_, h, err := c.future(ctx, RouteSleep, sleepRequest{Millis: d.Milliseconds(), Async: true})
	return h, err
}

func wireCall(req CallRequest, async bool) callRequest {
	b := base64.StdEncoding.EncodeToString(req.Input)
	return callRequest{Service: req.Service, Handler: req.Handler, Key: req.Key, IdempotencyKey: req.IdempotencyKey,
		Headers: req.Headers, InputBytes: &b, Async: async, AsBytes: true}
}

// Call calls a handler and returns its result.
func (c *Client) Call(ctx context.Context, req CallRequest) (Result, error) {
	r, _, err := c.future(ctx, RouteCall, wireCall(req, false))
	return r, err
}

// CallAsync calls a handler and returns the handle of its result.
func (c *Client) CallAsync(ctx context.Context, req CallRequest) (string, error) {
	_, h, err := c.future(ctx, RouteCall, wireCall(req, true))
	return h, err
}

// Send sends a one-way call and returns the callee's invocation id.
func (c *Client) Send(ctx context.Context, req SendRequest) (string, error) {
	w := wireCall(req.CallRequest, false)
	var resp sendResponse
	err := c.do(ctx, RouteSend, sendRequest{Service: w.Service, Handler: w.Handler, Key: w.Key, IdempotencyKey: w.IdempotencyKey,
		Headers: w.Headers, InputBytes: w.InputBytes, DelayMillis: req.Delay.Milliseconds()}, &resp)
	return resp.InvocationID, err
}

// Await waits for all handles and returns their results in order.
func (c *Client) Await(ctx context.Context, handles ...string) ([]Result, error) {
	var resp awaitResponse
	if err := c.do(ctx, RouteAwait, awaitRequest{Handles: handles, Mode: "all", AsBytes: true}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(handles) {
		return nil, fmt.Errorf(ClientErrorPrefix+"await answered %d results for %d handles", len(resp.Results), len(handles))
	}
	out := make([]Result, len(handles))
	for i, w := range resp.Results {
		r, err := decodeResult(w)
		if err != nil {
			return nil, fmt.Errorf(ClientErrorPrefix+"await: %w", err)
		}
		out[i] = r
	}
	return out, nil
}

// AwaitAny waits for the first of handles to complete and returns its
// index and result.
func (c *Client) AwaitAny(ctx context.Context, handles ...string) (int, Result, error) {
	var resp awaitResponse
	if err := c.do(ctx, RouteAwait, awaitRequest{Handles: handles, Mode: "any", AsBytes: true}, &resp); err != nil {
		return 0, Result{}, err
	}
	if resp.Index == nil || *resp.Index < 0 || *resp.Index >= len(handles) {
		return 0, Result{}, errors.New(ClientErrorPrefix + "await any answered no valid index")
	}
	r, err := decodeResult(resp.Result)
	return *resp.Index, r, err
}

// InvocationID returns the invocation's id.
func (c *Client) InvocationID(ctx context.Context) (string, error) {
	var resp invocationIDResponse
	err := c.do(ctx, RouteInvocationID, emptyRequest{}, &resp)
	return resp.InvocationID, err
}

// Random returns the attempt's next random number, as a float in [0, 1)
// and as the integer in [0, 2^53) it was made from.
func (c *Client) Random(ctx context.Context) (float64, uint64, error) {
	var resp randomResponse
	err := c.do(ctx, RouteRandom, emptyRequest{}, &resp)
	return resp.Float, resp.Int, err
}

// UUID returns the attempt's next random version 4 UUID.
func (c *Client) UUID(ctx context.Context) (string, error) {
	var resp uuidResponse
	err := c.do(ctx, RouteUUID, emptyRequest{}, &resp)
	return resp.UUID, err
}

// GetState reads the state key name: its value and whether it has one.
func (c *Client) GetState(ctx context.Context, name string) ([]byte, bool, error) {
	var resp foundResponse
	if err := c.do(ctx, RouteStateGet, nameRequest{Name: name, AsBytes: true}, &resp); err != nil {
		return nil, false, err
	}
	if !resp.Found {
		return nil, false, nil
	}
	r, err := decodeResult(resp.Result)
	return r.Value, true, err
}

// StateKeys lists the state keys, sorted.
func (c *Client) StateKeys(ctx context.Context) ([]string, error) {
	var resp stateKeysResponse
	err := c.do(ctx, RouteStateKeys, emptyRequest{}, &resp)
	return resp.Keys, err
}

func bytesValue(v []byte) *string {
	b := base64.StdEncoding.EncodeToString(v)
	return &b
}

// SetState sets the state key name to value.
func (c *Client) SetState(ctx context.Context, name string, value []byte) error {
	return c.do(ctx, RouteStateSet, valueRequest{Name: name, Bytes: bytesValue(value)}, &emptyRequest{})
}

// ClearState removes the state key name.
func (c *Client) ClearState(ctx context.Context, name string) error {
	return c.do(ctx, RouteStateClear, nameRequest{Name: name}, &emptyRequest{})
}

// ClearAllState removes every state key.
func (c *Client) ClearAllState(ctx context.Context) error {
	return c.do(ctx, RouteStateClearAll, emptyRequest{}, &emptyRequest{})
}

// Awakeable creates an awakeable and returns its id, which is also the
// handle to Await it with.
func (c *Client) Awakeable(ctx context.Context) (string, error) {
	var resp awakeableResponse
	err := c.do(ctx, RouteAwakeable, emptyRequest{}, &resp)
	return resp.ID, err
}

// ResolveAwakeable completes the awakeable id with value.
func (c *Client) ResolveAwakeable(ctx context.Context, id string, value []byte) error {
	return c.do(ctx, RouteAwakeableResolve, valueRequest{ID: id, Bytes: bytesValue(value)}, &emptyRequest{})
}

// RejectAwakeable fails the awakeable id with message and code (0: 500).
func (c *Client) RejectAwakeable(ctx context.Context, id, message string, code int) error {
	return c.do(ctx, RouteAwakeableReject, rejectRequest{ID: id, Message: message, Code: codeOrNil(code)}, &emptyRequest{})
}

// Promise waits for the workflow promise name and returns its result.
func (c *Client) Promise(ctx context.Context, name string) (Result, error) {
	r, _, err := c.future(ctx, RoutePromiseGet, promiseGetRequest{Name: name, AsBytes: true})
	return r, err
}

// PromiseAsync starts waiting for the workflow promise name and returns
// its handle for Await.
func (c *Client) PromiseAsync(ctx context.Context, name string) (string, error) {
	_, h, err := c.future(ctx, RoutePromiseGet, promiseGetRequest{Name: name, Async: true})
	return h, err
}

// PeekPromise reads the workflow promise name without waiting: nil while
// it is unresolved.
func (c *Client) PeekPromise(ctx context.Context, name string) (*Result, error) {
	var resp foundResponse
	if err := c.do(ctx, RoutePromisePeek, nameRequest{Name: name, AsBytes: true}, &resp); err != nil {
		return nil, err
	}
	if !resp.Found {
		return nil, nil
	}
	r, err := decodeResult(resp.Result)
	return &r, err
}

// ResolvePromise completes the workflow promise name with value.
func (c *Client) ResolvePromise(ctx context.Context, name string, value []byte) error {
	return c.do(ctx, RoutePromiseResolve, valueRequest{Name: name, Bytes: bytesValue(value)}, &emptyRequest{})
}

// RejectPromise fails the workflow promise name with message and code
// (0: 500).
func (c *Client) RejectPromise(ctx context.Context, name, message string, code int) error {
	return c.do(ctx, RoutePromiseReject, rejectRequest{Name: name, Message: message, Code: codeOrNil(code)}, &emptyRequest{})
}

// CancelInvocation asks Restate to cancel the invocation id.
func (c *Client) CancelInvocation(ctx context.Context, id string) error {
	return c.do(ctx, RouteCancel, cancelRequest{InvocationID: id}, &emptyRequest{})
}

// codeOrNil leaves a zero code out of the request: the endpoint's default.
func codeOrNil(code int) *int {
	if code == 0 {
		return nil
	}
	return &code
}
