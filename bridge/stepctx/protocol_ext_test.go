package stepctx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
)

// raw speaks the protocol by hand, as a Python stdlib client would: it
// pins the routes, bodies and statuses the package doc promises.
type raw struct {
	t     *testing.T
	hc    *http.Client
	token string
}

func newRaw(t *testing.T, addr, token string) *raw {
	network, address, err := stepctx.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &raw{t: t, hc: &http.Client{Transport: tr}, token: token}
}

func (r *raw) post(method, route, body string) (int, map[string]any) {
	r.t.Helper()
	req, _ := http.NewRequest(method, "http://localhost"+route, strings.NewReader(body))
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		r.t.Errorf("%s: Content-Type %q", route, ct)
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		r.t.Fatalf("%s: body is not a JSON object: %v", route, err)
	}
	return resp.StatusCode, m
}

// want asserts the status and the JSON encoding of the answer.
func (r *raw) want(route, body string, status int, want string) {
	r.t.Helper()
	got, m := r.post(http.MethodPost, route, body)
	b, _ := json.Marshal(m)
	if got != status || string(b) != want {
		r.t.Errorf("POST %s %s\n got %d %s\nwant %d %s", route, body, got, b, status, want)
	}
}

func TestProtocolOnTheWire(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{MaxBodyBytes: 1024})
	j := &stepctxtest.Journal{ID: "inv_x", CallResult: func(req stepctx.CallRequest) stepctx.Result {
		if req.Handler == "fail" {
			return stepctx.Result{Failure: &stepctx.Failure{Code: 404, Message: "no such user"}}
		}
		return stepctx.Result{Value: req.Input}
	}}
	a, err := s.Open("", j)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r := newRaw(t, addr, a.Token())
	run1, run2, run3 := handleOf("run-", "inv_x", 1), handleOf("run-", "inv_x", 2), handleOf("run-", "inv_x", 3)
	fut4, fut5 := handleOf("fut-", "inv_x", 4), handleOf("fut-", "inv_x", 5)

	r.want("/v1/run/start", `{"name":"a"}`, 200, `{"execute":"`+run1+`"}`)
	r.want("/v1/run/complete", `{"handle":"`+run1+`","value":{"n": 1}}`, 200, `{"result":{"value":{"n":1}}}`)
	r.want("/v1/run/start", `{"name":"b"}`, 200, `{"execute":"`+run2+`"}`)
	r.want("/v1/run/complete", `{"handle":"`+run2+`","bytes":"aGk="}`, 200, `{"result":{"bytes":"aGk="}}`)
	r.want("/v1/run/start", `{"name":"c"}`, 200, `{"execute":"`+run3+`"}`)
	r.want("/v1/run/complete", `{"handle":"`+run3+`","failure":{"code":0,"message":"no"}}`, 200, `{"result":{"failure":{"code":500,"message":"no"}}}`)
	r.want("/v1/sleep", `{"millis":10}`, 200, `{"result":{"bytes":""}}`)
	r.want("/v1/sleep", `{"millis":10,"async":true}`, 200, `{"handle":"`+fut4+`"}`)
	r.want("/v1/call", `{"service":"S","handler":"h","input":{"a":[1,2]}}`, 200, `{"result":{"value":{"a":[1,2]}}}`)
	r.want("/v1/call", `{"service":"S","handler":"h","input":"x","as_bytes":true}`, 200, `{"result":{"bytes":"Ingi"}}`)
	r.want("/v1/call", `{"service":"S","handler":"fail","async":true}`, 200, `{"handle":"`+fut5+`"}`)
	r.want("/v1/await", `{"handles":["`+fut5+`","`+fut4+`"]}`, 200, `{"results":[{"failure":{"code":404,"message":"no such user"}},{"bytes":""}]}`)
	r.want("/v1/await", `{"handles":["`+fut4+`"],"mode":"any"}`, 200, `{"handle":"`+fut4+`","index":0,"result":{"bytes":""}}`)
	r.want("/v1/send", `{"service":"S","handler":"h","delay_millis":5,"input":1}`, 200, `{"invocation_id":"inv_send_1"}`)
	r.want("/v1/invocation-id", ``, 200, `{"invocation_id":"inv_x"}`)

	// Requests refused without touching the journal.
	before := len(j.Entries())
	r.want("/v1/sleep", `{"milis":10}`, 400, `{"error":"request body: json: unknown field \"milis\""}`)
	r.want("/v1/await", `{"handles":["`+run1+`"]}`, 400, `{"error":"handle \"`+run1+`\" is a run: runs are completed with /v1/run/complete, not awaited"}`)
	r.want("/v1/await", `{"handles":["fut-99"]}`, 400, `{"error":"unknown handle \"fut-99\": not issued by sleep, call, awakeable or promise/get in this attempt"}`)
	r.want("/v1/await", `{"handles":["`+fut4+`"],"mode":"race"}`, 400, `{"error":"await \"mode\" \"race\": want \"all\" or \"any\""}`)
	r.want("/v1/call", `{"service":"S"}`, 400, `{"error":"a call needs a non-empty \"service\" and \"handler\""}`)
	r.want("/v1/sleep", `{"millis":-1}`, 400, `{"error":"sleep \"millis\" is -1; want 0 to 9223372036854 (about 292 years)"}`)
	// Past the largest duration, which would wrap to a negative one: a
	// sleep that ends at once, a delayed send delivered now.
	r.want("/v1/sleep", `{"millis":10000000000000}`, 400, `{"error":"sleep \"millis\" is 10000000000000; want 0 to 9223372036854 (about 292 years)"}`)
	r.want("/v1/send", `{"service":"S","handler":"h","delay_millis":10000000000000}`, 400, `{"error":"send \"delay_millis\" is 10000000000000; want 0 to 9223372036854 (about 292 years)"}`)
	r.want("/v1/call", `{"service":"S","handler":"h","input_bytes":"`+strings.Repeat("A", 2000)+`"}`, 413, `{"error":"request body exceeds 1024 bytes"}`)
	r.want("/v2/sleep", `{}`, 404, `{"error":"no fnbridge context operation \"/v2/sleep\" (this bridge speaks protocol v1)"}`)
	if st, _ := r.post(http.MethodGet, "/v1/sleep", ""); st != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", st)
	}
	anon := newRaw(t, addr, "")
	anon.want("/v1/invocation-id", `{}`, 401, `{"error":"missing Authorization header: every fnbridge context request needs \"Authorization: Bearer \u003ctoken\u003e\" with the token from FNBRIDGE_CONTEXT_TOKEN"}`)
	if n := len(j.Entries()); n != before {
		t.Errorf("refused requests journaled %d commands", n-before)
	}

	j.HoldSleeps = true
	r.want("/v1/sleep", `{"millis":10}`, 410, `{"error":"the invocation suspended: this attempt must stop now; Restate resumes the invocation in a new attempt","suspended":true}`)
	r.want("/v1/invocation-id", `{}`, 410, `{"error":"the invocation suspended: this attempt must stop now; Restate resumes the invocation in a new attempt","suspended":true}`)
}

// The keyed operations on the wire, as the Python module speaks them: a
// refused call and a second promise completion are 200 answers with a
// top-level "failure"; the attempt goes on.
func TestKeyedProtocolOnTheWire(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{State: map[string][]byte{"count": []byte("1")}}
	a, err := s.Open("", j, stepctx.WithHandler(stepctx.HandlerInfo{Name: "Signup/run", Keyed: true, Workflow: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r := newRaw(t, addr, a.Token())
	r.want("/v1/state/get", `{"name":"count"}`, 200, `{"found":true,"result":{"value":1}}`)
	r.want("/v1/state/get", `{"name":"none"}`, 200, `{"found":false}`)
	r.want("/v1/state/set", `{"name":"count","value":{"n": 2}}`, 200, `{}`)
	r.want("/v1/state/get", `{"name":"count","as_bytes":true}`, 200, `{"found":true,"result":{"bytes":"eyJuIjogMn0="}}`)
	r.want("/v1/state/keys", `{}`, 200, `{"keys":["count"]}`)
	r.want("/v1/state/clear", `{"name":"count"}`, 200, `{}`)
	r.want("/v1/state/clear-all", ``, 200, `{}`)
	r.want("/v1/state/keys", ``, 200, `{"keys":[]}`)
	aid := stepctxtest.AwakeableID(0)
	r.want("/v1/awakeable", `{}`, 200, `{"handle":"`+aid+`","id":"`+aid+`"}`)
	j.ResolveAwakeable(aid, stepctx.Result{Value: []byte(`"ok"`)})
	r.want("/v1/await", `{"handles":["`+aid+`"]}`, 200, `{"results":[{"value":"ok"}]}`)
	r.want("/v1/awakeable/resolve", `{"id":"`+aid+`","value":[1]}`, 200, `{}`)
	r.want("/v1/awakeable/reject", `{"id":"`+aid+`","message":"no"}`, 200, `{}`)
	r.want("/v1/promise/peek", `{"name":"p"}`, 200, `{"found":false}`)
	r.want("/v1/promise/resolve", `{"name":"p","value":"yes"}`, 200, `{}`)
	r.want("/v1/promise/resolve", `{"name":"p","value":"again"}`, 200, `{"failure":{"code":409,"message":"promise \"p\" was completed already"}}`)
	r.want("/v1/promise/peek", `{"name":"p"}`, 200, `{"found":true,"result":{"value":"yes"}}`)
	r.want("/v1/promise/get", `{"name":"p"}`, 200, `{"result":{"value":"yes"}}`)
	r.want("/v1/promise/get", `{"name":"p","async":true}`, 200, `{"handle":"`+handleOf("fut-", "inv_fake", 1)+`"}`)
	r.want("/v1/promise/reject", `{"name":"q","message":"denied"}`, 200, `{}`)
	r.want("/v1/cancel", `{"invocation_id":"`+realInvocationID+`"}`, 200, `{}`)

	before := len(j.Entries())
	r.want("/v1/state/set", `{"name":""}`, 400, `{"error":"state/set needs a non-empty \"name\""}`)
	r.want("/v1/state/set", `{"name":"x"}`, 400, `{"error":"give the value as \"value\" (JSON) or \"bytes\" (base64)"}`)
	r.want("/v1/state/set", `{"name":"x","id":"y","value":1}`, 400, `{"error":"state/set takes \"name\", not \"id\""}`)
	r.want("/v1/promise/resolve", `{"id":"p","value":1}`, 400, `{"error":"promise/resolve needs a non-empty \"name\""}`)
	r.want("/v1/awakeable/resolve", `{"name":"x","value":1}`, 400, `{"error":"awakeable/resolve takes \"id\", not \"name\""}`)
	// A malformed id is the call's terminal failure, not a bad request:
	// the handler can catch it, and no retry repeats it.
	r.want("/v1/cancel", `{"invocation_id":"inv_1abc"}`, 200, `{"failure":{"code":400,"message":"\"inv_1abc\" is not an invocation id: one is inv_ and 34 letters and digits, as Restate prints it"}}`)
	r.want("/v1/awakeable/resolve", `{"id":"sign_1AAAA","value":1}`, 200, `{"failure":{"code":400,"message":"\"sign_1AAAA\" is not an awakeable id: one is sign_1 and 38 base64url characters, as fnbridge awakeable prints it"}}`)
	r.want("/v1/awakeable/reject", `{"id":"nonsense","message":"no"}`, 200, `{"failure":{"code":400,"message":"\"nonsense\" is not an awakeable id: one is sign_1 and 38 base64url characters, as fnbridge awakeable prints it"}}`)
	r.want("/v1/cancel", `{"invocation_id":42}`, 400, `{"error":"request body: json: cannot unmarshal number into Go struct field cancelRequest.invocation_id of type string"}`)
	if n := len(j.Entries()); n != before {
		t.Errorf("refused requests journaled %d commands", n-before)
	}
	if a.Err() != nil {
		t.Errorf("attempt ended: %v", a.Err())
	}
}

// A step name is journaled with the step and shown in Restate's UI: one
// bound for every caller (Python, a Bash function's shell, a child
// process), not whatever fits the largest request body (48 MiB).
func TestRunNameIsBounded(t *testing.T) {
	s, addr := serve(t, "unix", stepctx.Config{})
	j := &stepctxtest.Journal{}
	a, err := s.Open("", j)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r := newRaw(t, addr, a.Token())
	r.want("/v1/run/start", `{"name":"`+strings.Repeat("n", stepctx.MaxRunNameBytes)+`"}`, 200, `{"execute":"`+handleOf("run-", "inv_fake", 1)+`"}`)
	r.want("/v1/run/complete", `{"handle":"`+handleOf("run-", "inv_fake", 1)+`","value":1}`, 200, `{"result":{"value":1}}`)
	r.want("/v1/run/start", `{"name":"`+strings.Repeat("n", stepctx.MaxRunNameBytes+1)+`"}`, 400,
		fmt.Sprintf(`{"error":"run's \"name\" is %d bytes; a step name may have at most %d"}`, stepctx.MaxRunNameBytes+1, stepctx.MaxRunNameBytes))
	if n := len(j.Entries()); n != 1 {
		t.Fatalf("%d journal entries, want the one step whose name was allowed", n)
	}
}
