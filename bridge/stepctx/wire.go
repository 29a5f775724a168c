package stepctx

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Routes of protocol version 1, all POST with a JSON body.
const (
	RouteRunStart     = "/v1/run/start"
	RouteRunComplete  = "/v1/run/complete"
	RouteSleep        = "/v1/sleep"
	RouteCall         = "/v1/call"
	RouteSend         = "/v1/send"
	RouteAwait        = "/v1/await"
	RouteInvocationID = "/v1/invocation-id"
	RouteRandom       = "/v1/random"
	RouteUUID         = "/v1/uuid"

	RouteStateGet         = "/v1/state/get"
	RouteStateKeys        = "/v1/state/keys"
	RouteStateSet         = "/v1/state/set"
	RouteStateClear       = "/v1/state/clear"
	RouteStateClearAll    = "/v1/state/clear-all"
	RouteAwakeable        = "/v1/awakeable"
	RouteAwakeableResolve = "/v1/awakeable/resolve"
	RouteAwakeableReject  = "/v1/awakeable/reject"
	RoutePromiseGet       = "/v1/promise/get"
	RoutePromisePeek      = "/v1/promise/peek"
	RoutePromiseResolve   = "/v1/promise/resolve"
	RoutePromiseReject    = "/v1/promise/reject"
	RouteCancel           = "/v1/cancel"
)

// The JSON bodies below are the protocol; see the package doc.

type wireFailure struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type wireRetryable struct {
	Message string `json:"message"`
}

// wireResult carries a value as JSON ("value") when the bytes are JSON and
// the client did not ask for bytes, else as base64 ("bytes").
type wireResult struct {
	Value   json.RawMessage `json:"value,omitempty"`
	Bytes   *string         `json:"bytes,omitempty"`
	Failure *wireFailure    `json:"failure,omitempty"`
}

type runStartRequest struct {
	Name    string `json:"name"`
	AsBytes bool   `json:"as_bytes"`
	// Ahead numbers a start sent without waiting for its answer (1, 2,
	// ... in an attempt; see EnvAfter); read by aheadOf.
	Ahead uint64 `json:"ahead,omitempty"`
}

type runStartResponse struct {
	Recorded *wireResult `json:"recorded,omitempty"`
	Execute  string      `json:"execute,omitempty"`
	Live     bool        `json:"live,omitempty"`
}

type runCompleteRequest struct {
	Handle    string          `json:"handle"`
	Value     json.RawMessage `json:"value,omitempty"`
	Bytes     *string         `json:"bytes,omitempty"`
	Failure   *wireFailure    `json:"failure,omitempty"`
	Retryable *wireRetryable  `json:"retryable,omitempty"`
	AsBytes   bool            `json:"as_bytes"`
}

type runCompleteResponse struct {
	Result        *wireResult `json:"result,omitempty"`
	AttemptFailed bool        `json:"attempt_failed,omitempty"`
}

type sleepRequest struct {
	Millis  int64 `json:"millis"`
	Async   bool  `json:"async"`
	AsBytes bool  `json:"as_bytes"`
}

type callRequest struct {
	Service        string            `json:"service"`
	Handler        string            `json:"handler"`
	Key            string            `json:"key"`
	IdempotencyKey string            `json:"idempotency_key"`
	Headers        map[string]string `json:"headers"`
	Input          json.RawMessage   `json:"input,omitempty"`
	InputBytes     *string           `json:"input_bytes,omitempty"`
	Async          bool              `json:"async"`
	AsBytes        bool              `json:"as_bytes"`
}

type sendRequest struct {
	Service        string            `json:"service"`
	Handler        string            `json:"handler"`
	Key            string            `json:"key"`
	IdempotencyKey string            `json:"idempotency_key"`
	Headers        map[string]string `json:"headers"`
	Input          json.RawMessage   `json:"input,omitempty"`
	InputBytes     *string           `json:"input_bytes,omitempty"`
	DelayMillis    int64             `json:"delay_millis"`
}

// futureResponse answers sleep and call: a handle when async, else the
// result.
type futureResponse struct {
	Handle string      `json:"handle,omitempty"`
	Result *wireResult `json:"result,omitempty"`
}

type sendResponse struct {
	InvocationID string `json:"invocation_id"`
}

type awaitRequest struct {
	Handles []string `json:"handles"`
	Mode    string   `json:"mode"`
	AsBytes bool     `json:"as_bytes"`
}

type awaitResponse struct {
	// Results, for mode "all": one per handle, in request order.
	Results []*wireResult `json:"results,omitempty"`
	// Index, Handle and Result, for mode "any": the first complete one.
	Index  *int        `json:"index,omitempty"`
	Handle string      `json:"handle,omitempty"`
	Result *wireResult `json:"result,omitempty"`
}

type invocationIDResponse struct {
	InvocationID string `json:"invocation_id"`
}

type randomResponse struct {
	Float float64 `json:"float"`
	Int   uint64  `json:"int"`
}

type uuidResponse struct {
	UUID string `json:"uuid"`
}

// nameRequest names a state key or promise (state/get, state/clear,
// promise/peek).
type nameRequest struct {
	Name    string `json:"name"`
	AsBytes bool   `json:"as_bytes"`
}

// foundResponse answers a read that may find nothing (state/get,
// promise/peek): Result only when found.
type foundResponse struct {
	Found  bool        `json:"found"`
	Result *wireResult `json:"result,omitempty"`
}

type stateKeysResponse struct {
	Keys []string `json:"keys"`
}

// valueRequest writes a value under a name or id (state/set,
// promise/resolve, awakeable/resolve).
type valueRequest struct {
	Name  string          `json:"name,omitempty"`
	ID    string          `json:"id,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
	Bytes *string         `json:"bytes,omitempty"`
}

// rejectRequest rejects a promise or awakeable with a message and a
// failure code (default 500), what the waiter's TerminalError carries.
type rejectRequest struct {
	Name    string `json:"name,omitempty"`
	ID      string `json:"id,omitempty"`
	Message string `json:"message"`
	Code    *int   `json:"code,omitempty"`
}

// failure is the rejection as journaled: the code given, else 500.
func (r *rejectRequest) failure(op string) (*Failure, *apiError) {
	code := 500
	if r.Code != nil {
		code = *r.Code
	}
	if code < 1 || code > 65535 {
		return nil, badRequest("%s: code %d is not a failure code (1-65535)", op, code)
	}
	return &Failure{Code: uint16(code), Message: r.Message}, nil
}

type awakeableResponse struct {
	// ID is what completes it; Handle, the same string, awaits it.
	ID     string `json:"id"`
	Handle string `json:"handle"`
}

type promiseGetRequest struct {
	Name    string `json:"name"`
	Async   bool   `json:"async"`
	AsBytes bool   `json:"as_bytes"`
}

type cancelRequest struct {
	InvocationID string `json:"invocation_id"`
}

// failedResponse is a 200 answer whose call failed terminally without
// ending the attempt (CallFailedError): refused, or interrupted by the
// invocation's cancellation.
type failedResponse struct {
	Failure *wireFailure `json:"failure"`
}

type errorResponse struct {
	Error     string `json:"error"`
	Suspended bool   `json:"suspended,omitempty"`
}

type emptyRequest struct{}

// encodeResult is r as it goes on the wire: a value inline only when it
// is JSON, which is UTF-8 (json.Valid lets other bytes through in
// strings, and a client decoding the answer as JSON text then fails);
// anything else as bytes.
func encodeResult(r Result, asBytes bool) *wireResult {
	if r.Failure != nil {
		return &wireResult{Failure: &wireFailure{Code: int(orInternal(r.Failure.Code)), Message: r.Failure.Message}}
	}
	if !asBytes && len(r.Value) > 0 && json.Valid(r.Value) && utf8.Valid(r.Value) {
		return &wireResult{Value: json.RawMessage(r.Value)}
	}
	b := base64.StdEncoding.EncodeToString(r.Value)
	return &wireResult{Bytes: &b}
}

// decodeResult is the Result a wireResult carries.
func decodeResult(w *wireResult) (Result, error) {
	if w == nil {
		return Result{}, fmt.Errorf("missing result")
	}
	if w.Failure != nil {
		code, err := failureCode(w.Failure.Code)
		if err != nil {
			return Result{}, err
		}
		return Result{Failure: &Failure{Code: code, Message: w.Failure.Message}}, nil
	}
	v, err := decodePayload("value", w.Value, "bytes", w.Bytes)
	return Result{Value: bytes.Clone(v)}, err
}

// decodePayload reads a payload given either as JSON (kept byte for byte
// as the client sent it) or as base64; neither is an empty payload.
func decodePayload(jsonName string, j json.RawMessage, bytesName string, b *string) ([]byte, error) {
	if len(j) > 0 && b != nil {
		return nil, fmt.Errorf("give %q or %q, not both", jsonName, bytesName)
	}
	if b != nil {
		v, err := base64.StdEncoding.DecodeString(*b)
		if err != nil {
			return nil, fmt.Errorf("%q is not standard base64: %v", bytesName, err)
		}
		return v, nil
	}
	return []byte(j), nil
}

func failureCode(c int) (uint16, error) {
	if c < 0 || c > 65535 {
		return 0, fmt.Errorf("failure code %d is out of range 0..65535", c)
	}
	return orInternal(uint16(c)), nil
}

func orInternal(c uint16) uint16 {
	if c == 0 {
		return 500
	}
	return c
}

// decodeRunStart is decode for run/start, with a fast path for the body
// every client sends, {"name":"<name>"} (compact, no escapes): a step is
// two requests, and encoding/json's reflection was a visible share of
// the bridge's CPU per step. Any other body takes decode, so what is
// accepted or refused is the same.
func decodeRunStart(body []byte, req *runStartRequest) *apiError {
	const pre, post = `{"name":"`, `"}`
	if len(body) >= len(pre)+len(post) && bytes.HasPrefix(body, []byte(pre)) && bytes.HasSuffix(body, []byte(post)) {
		if name := body[len(pre) : len(body)-len(post)]; plainString(name) {
			*req = runStartRequest{Name: string(name)}
			return nil
		}
	}
	// A pipelined start: {"name":"<name>","ahead":<k>}.
	if k := aheadOf(body); k > 0 && bytes.HasPrefix(body, []byte(pre)) && body[len(body)-1] == '}' {
		rest := body[len(pre):]
		if i := bytes.IndexByte(rest, '"'); i >= 0 && plainString(rest[:i]) && string(rest[i:]) == `","ahead":`+strconv.FormatUint(k, 10)+`}` {
			*req = runStartRequest{Name: string(rest[:i]), Ahead: k}
			return nil
		}
	}
	return decode(body, req)
}

// decodeRunComplete is decode for run/complete, with a fast path for a
// step's value, {"handle":"<handle>","value":<JSON>} (compact, no escapes
// in the handle) or, pipelined, {"value":<JSON>}; the value is checked to
// be one JSON value, as decode does, and copied: the body's buffer is
// reused.
func decodeRunComplete(body []byte, req *runCompleteRequest) *apiError {
	const pre, mid, bare = `{"handle":"`, `","value":`, `{"value":`
	if len(body) > 0 && body[len(body)-1] == '}' {
		handle, v, ok := "", []byte(nil), false
		switch {
		case bytes.HasPrefix(body, []byte(pre)):
			rest := body[len(pre) : len(body)-1]
			if i := bytes.IndexByte(rest, '"'); i >= 0 && plainString(rest[:i]) && bytes.HasPrefix(rest[i:], []byte(mid)) {
				handle, v, ok = string(rest[:i]), rest[i+len(mid):], true
			}
		case bytes.HasPrefix(body, []byte(bare)):
			v, ok = body[len(bare):len(body)-1], true
		}
		if ok && len(v) > 0 && !jsonSpace(v[0]) && !jsonSpace(v[len(v)-1]) && json.Valid(v) {
			*req = runCompleteRequest{Handle: handle, Value: bytes.Clone(v)}
			return nil
		}
	}
	return decode(body, req)
}

// plainString is true for the bytes of a JSON string that need no
// unescaping: valid UTF-8 without quotes, backslashes or control
// characters.
func plainString(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(b)
}

func jsonSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
