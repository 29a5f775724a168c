package stepctx

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// The operations of keyed services and awakeables (see the package doc).

// refused is the terminal failure of a call the handler may not make;
// nothing is journaled and the attempt goes on.
func refused(format string, args ...any) *apiError {
	return callFailed(&CallFailedError{Failure: Failure{Code: 500, Message: fmt.Sprintf(format, args...)}})
}

func (a *Attempt) handlerName() string {
	if a.handler.Name == "" {
		return "this handler"
	}
	return a.handler.Name
}

// stateAllowed refuses state outside virtual objects and workflows, and
// (write) state changes from shared handlers.
func (a *Attempt) stateAllowed(op string, write bool) *apiError {
	switch {
	case !a.handler.Keyed:
		return refused("%s refused: %s belongs to a plain service, which has no state; state needs a service of type virtual_object or workflow", op, a.handlerName())
	case write && a.handler.Shared && a.handler.Workflow:
		return refused("%s refused: %s is a shared handler (every workflow handler but run is shared): shared handlers read state but cannot change it; change it from the workflow's run handler", op, a.handlerName())
	case write && a.handler.Shared:
		return refused("%s refused: %s is a shared handler (shared: true): shared handlers read state but cannot change it; change it from an exclusive handler", op, a.handlerName())
	}
	return nil
}

// promiseAllowed refuses promises outside workflows.
func (a *Attempt) promiseAllowed(op string) *apiError {
	if !a.handler.Workflow {
		return refused("%s refused: %s is not a handler of a workflow; durable promises exist only in services of type workflow", op, a.handlerName())
	}
	return nil
}

// calleeKey refuses a call to a service of this deployment whose key does
// not fit its type: without a key, Restate would run a virtual object's
// or workflow's handler under the empty key, with that key's state. It
// refuses a call to a handler such a service lacks too (a misspelt name),
// which Restate would retry until it paused the invocation.
func (a *Attempt) calleeKey(op string, req CallRequest) *apiError {
	typ, ok := a.handler.Services[req.Service]
	if hs, known := a.handler.Handlers[req.Service]; ok && known && !slices.Contains(hs, req.Handler) {
		return refused("%s %s/%s refused: %s has no handler %q (its handlers: %s)", op, req.Service, req.Handler, req.Service, req.Handler, strings.Join(hs, ", "))
	}
	switch {
	case !ok:
		return nil
	case typ == "" || typ == "service":
		if req.Key != "" {
			return refused("%s %s/%s refused: %s is a plain service (type: service), whose handlers take no key; call it without one", op, req.Service, req.Handler, req.Service)
		}
	case req.Key == "":
		return refused("%s %s/%s refused: %s is a %s, whose handlers run under a key: give one (key= in Python, --key in Bash)", op, req.Service, req.Handler, req.Service, strings.ReplaceAll(typ, "_", " "))
	}
	return nil
}

// keyedCall decodes body into req and runs the checks every keyed
// operation shares: a non-empty name (when name is not nil) and no run
// executing.
func (a *Attempt) keyedCall(body []byte, req any, what string, name *string) *apiError {
	if e := decode(body, req); e != nil {
		return e
	}
	if name != nil && *name == "" {
		return badRequest("%s needs a non-empty \"name\"", what)
	}
	return a.notInRun()
}

func (a *Attempt) stateGet(_ context.Context, body []byte) (any, *apiError) {
	var req nameRequest
	if e := a.keyedCall(body, &req, "state/get", &req.Name); e != nil {
		return nil, e
	}
	if e := a.stateAllowed("state get", false); e != nil {
		return nil, e
	}
	v, found, err := a.j.GetState(a.ctx, req.Name)
	if err != nil {
		return nil, a.journalFailed(err)
	}
	if !found {
		return foundResponse{}, nil
	}
	return foundResponse{Found: true, Result: encodeResult(Result{Value: v}, req.AsBytes)}, nil
}

func (a *Attempt) stateKeys(_ context.Context, body []byte) (any, *apiError) {
	if e := a.keyedCall(body, &emptyRequest{}, "state/keys", nil); e != nil {
		return nil, e
	}
	if e := a.stateAllowed("state keys", false); e != nil {
		return nil, e
	}
	keys, err := a.j.StateKeys(a.ctx)
	if err != nil {
		return nil, a.journalFailed(err)
	}
	if keys == nil {
		keys = []string{}
	}
	return stateKeysResponse{Keys: keys}, nil
}

// valueOf reads the value of a valueRequest: JSON as sent, or base64.
func valueOf(req valueRequest) ([]byte, *apiError) {
	if len(req.Value) == 0 && req.Bytes == nil {
		return nil, badRequest("give the value as \"value\" (JSON) or \"bytes\" (base64)")
	}
	v, err := decodePayload("value", req.Value, "bytes", req.Bytes)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	return v, nil
}

// writeValue serves a call that writes a value under a name (state/set,
// promise/resolve): checks, then the handler's permission, then write.
func (a *Attempt) writeValue(body []byte, what string, allowed func() *apiError, write func(name string, v []byte) error) (any, *apiError) {
	var req valueRequest
	if e := a.keyedCall(body, &req, what, &req.Name); e != nil {
		return nil, e
	}
	if req.ID != "" {
		return nil, badRequest("%s takes \"name\", not \"id\"", what)
	}
	v, e := valueOf(req)
	if e != nil {
		return nil, e
	}
	if e := allowed(); e != nil {
		return nil, e
	}
	if err := write(req.Name, v); err != nil {
		return nil, a.journalFailed(err)
	}
	return emptyRequest{}, nil
}

func (a *Attempt) stateSet(_ context.Context, body []byte) (any, *apiError) {
	return a.writeValue(body, "state/set", func() *apiError { return a.stateAllowed("state set", true) },
		func(name string, v []byte) error { return a.j.SetState(a.ctx, name, v) })
}

func (a *Attempt) stateClear(_ context.Context, body []byte) (any, *apiError) {
	var req nameRequest
	if e := a.keyedCall(body, &req, "state/clear", &req.Name); e != nil {
		return nil, e
	}
	if e := a.stateAllowed("state clear", true); e != nil {
		return nil, e
	}
	if err := a.j.ClearState(a.ctx, req.Name); err != nil {
		return nil, a.journalFailed(err)
	}
	return emptyRequest{}, nil
}

func (a *Attempt) stateClearAll(_ context.Context, body []byte) (any, *apiError) {
	if e := a.keyedCall(body, &emptyRequest{}, "state/clear-all", nil); e != nil {
		return nil, e
	}
	if e := a.stateAllowed("state clear-all", true); e != nil {
		return nil, e
	}
	if err := a.j.ClearAllState(a.ctx); err != nil {
		return nil, a.journalFailed(err)
	}
	return emptyRequest{}, nil
}

func (a *Attempt) awakeable(_ context.Context, body []byte) (any, *apiError) {
	if e := a.keyedCall(body, &emptyRequest{}, "awakeable", nil); e != nil {
		return nil, e
	}
	id, f, err := a.j.Awakeable(a.ctx)
	if err != nil {
		return nil, a.journalFailed(err)
	}
	// The id is its own handle: a Bash function awaits what it printed.
	a.handles[id] = &handle{f: f}
	return awakeableResponse{ID: id, Handle: id}, nil
}

// invalidID is the terminal failure (400) of a call naming an id that
// cannot be one: restate-server would reject the journaled command and
// fail every retry of the attempt, so it fails this call alone instead.
func invalidID(format string, args ...any) *apiError {
	return callFailed(&CallFailedError{Failure: Failure{Code: 400, Message: fmt.Sprintf(format, args...)}})
}

// An awakeable id is sign_1 (prom_1 in older journals) and the base64url
// of 28 bytes: the 24-byte invocation id and a 32-bit index, which is 38
// characters; restate-server takes them with or without padding and
// rejects any other length (crates/types/src/identifiers.rs).
const (
	awakeableIDBytes = 28
	awakeableIDChars = 38
)

// checkAwakeableID refuses what restate-server would not parse as an
// awakeable id.
func checkAwakeableID(id string) *apiError {
	for _, prefix := range []string{"sign_1", "prom_1"} {
		if rest, ok := strings.CutPrefix(id, prefix); ok {
			body := strings.TrimSuffix(strings.TrimSuffix(rest, "="), "=")
			// Strict: non-zero trailing bits are refused there too; the
			// length check also catches the CR/LF Go's decoder skips.
			b, err := base64.RawURLEncoding.Strict().DecodeString(body)
			if err == nil && len(body) == awakeableIDChars && len(b) == awakeableIDBytes {
				return nil
			}
		}
	}
	return invalidID("%q is not an awakeable id: one is sign_1 and %d base64url characters, as fnbridge awakeable prints it", id, awakeableIDChars)
}

func (a *Attempt) awakeableResolve(_ context.Context, body []byte) (any, *apiError) {
	var req valueRequest
	if e := a.keyedCall(body, &req, "awakeable/resolve", nil); e != nil {
		return nil, e
	}
	if req.Name != "" {
		return nil, badRequest("awakeable/resolve takes \"id\", not \"name\"")
	}
	v, e := valueOf(req)
	if e != nil {
		return nil, e
	}
	if e := checkAwakeableID(req.ID); e != nil {
		return nil, e
	}
	if err := a.j.CompleteAwakeable(a.ctx, req.ID, Result{Value: v}); err != nil {
		return nil, a.journalFailed(err)
	}
	return emptyRequest{}, nil
}

func (a *Attempt) awakeableReject(_ context.Context, body []byte) (any, *apiError) {
	var req rejectRequest
	if e := a.keyedCall(body, &req, "awakeable/reject", nil); e != nil {
		return nil, e
	}
	if req.Name != "" {
		return nil, badRequest("awakeable/reject takes \"id\", not \"name\"")
	}
	if e := checkAwakeableID(req.ID); e != nil {
		return nil, e
	}
	f, e := req.failure("awakeable/reject")
	if e != nil {
		return nil, e
	}
	if err := a.j.CompleteAwakeable(a.ctx, req.ID, Result{Failure: f}); err != nil {
		return nil, a.journalFailed(err)
	}
	return emptyRequest{}, nil
}

func (a *Attempt) promiseGet(ctx context.Context, body []byte) (any, *apiError) {
	var req promiseGetRequest
	if e := a.keyedCall(body, &req, "promise/get", &req.Name); e != nil {
		return nil, e
	}
	if e := a.promiseAllowed("promise get"); e != nil {
		return nil, e
	}
	f, err := a.j.Promise(a.ctx, req.Name)
	if err != nil {
		return nil, a.journalFailed(err)
	}
	return a.future(ctx, f, req.Async, req.AsBytes)
}

func (a *Attempt) promisePeek(_ context.Context, body []byte) (any, *apiError) {
	var req nameRequest
	if e := a.keyedCall(body, &req, "promise/peek", &req.Name); e != nil {
		return nil, e
	}
	if e := a.promiseAllowed("promise peek"); e != nil {
		return nil, e
	}
	res, err := a.j.PeekPromise(a.ctx, req.Name)
	if err != nil {
		return nil, a.journalFailed(err)
	}
	if res == nil {
		return foundResponse{}, nil
	}
	return foundResponse{Found: true, Result: encodeResult(*res, req.AsBytes)}, nil
}

func (a *Attempt) promiseResolve(_ context.Context, body []byte) (any, *apiError) {
	return a.writeValue(body, "promise/resolve", func() *apiError { return a.promiseAllowed("promise resolve") },
		func(name string, v []byte) error { return a.j.CompletePromise(a.ctx, name, Result{Value: v}) })
}

func (a *Attempt) promiseReject(_ context.Context, body []byte) (any, *apiError) {
	var req rejectRequest
	if e := a.keyedCall(body, &req, "promise/reject", &req.Name); e != nil {
		return nil, e
	}
	if req.ID != "" {
		return nil, badRequest("promise/reject takes \"name\", not \"id\"")
	}
	if e := a.promiseAllowed("promise reject"); e != nil {
		return nil, e
	}
	f, e := req.failure("promise/reject")
	if e != nil {
		return nil, e
	}
	if err := a.j.CompletePromise(a.ctx, req.Name, Result{Failure: f}); err != nil {
		return nil, a.journalFailed(err)
	}
	return emptyRequest{}, nil
}

// An invocation id is inv_1 and the fixed-width base62 (0-9a-zA-Z) of
// its partition key (u64, 11 digits) and uuid (u128, 22 digits), as
// restate-server prints and parses it (crates/types/src/id_util.rs).
const (
	base62Digits      = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	invocationIDChars = 1 + 11 + 22
)

// base62Fits reports whether s is base62 digits whose value fits in bits.
func base62Fits(s string, bits int) bool {
	n, base := new(big.Int), big.NewInt(62)
	for i := range len(s) {
		d := strings.IndexByte(base62Digits, s[i])
		if d < 0 {
			return false
		}
		n.Mul(n, base).Add(n, big.NewInt(int64(d)))
	}
	return n.BitLen() <= bits
}

// checkInvocationID refuses what restate-server would not parse as an
// invocation id.
func checkInvocationID(id string) *apiError {
	rest, ok := strings.CutPrefix(id, "inv_1")
	if ok && len(rest) == invocationIDChars-1 && base62Fits(rest[:11], 64) && base62Fits(rest[11:], 128) {
		return nil
	}
	return invalidID("%q is not an invocation id: one is inv_ and %d letters and digits, as Restate prints it", id, invocationIDChars)
}

func (a *Attempt) cancelInvocation(_ context.Context, body []byte) (any, *apiError) {
	var req cancelRequest
	if e := a.keyedCall(body, &req, "cancel", nil); e != nil {
		return nil, e
	}
	if e := checkInvocationID(req.InvocationID); e != nil {
		return nil, e
	}
	if err := a.j.CancelInvocation(a.ctx, req.InvocationID); err != nil {
		return nil, a.journalFailed(err)
	}
	return emptyRequest{}, nil
}
