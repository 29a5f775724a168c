package stepctx

import (
	"reflect"
	"testing"
)

// The fast paths of run/start and run/complete accept, refuse and decode
// exactly what decode does.
func TestRunDecodersMatchDecode(t *testing.T) {
	starts := []string{`{"name":"fetch"}`, `{"name":""}`, `{"name":"a\"b"}`, `{"name":"a\\u0041"}`, `{"name":"é"}`,
		"{\"name\":\"\xff\"}", `{"name":"a","name":"b"}`, `{"name":"a","as_bytes":true}`, `{"name":"a"} `, `{"name":"a"}}`,
		`{"name":"a"}{}`, `{"nam":"a"}`, `{"name":"`, `{"name":"}`, `{}`, ``, `{"name":"a\tb"}`}
	for _, b := range starts {
		var fast, slow runStartRequest
		fe, se := decodeRunStart([]byte(b), &fast), decode([]byte(b), &slow)
		if (fe == nil) != (se == nil) || !reflect.DeepEqual(fast, slow) {
			t.Errorf("run/start %q: fast %+v %v, decode %+v %v", b, fast, fe, slow, se)
		}
	}
	completes := []string{`{"handle":"run-1","value":{"n":1,"s":2}}`, `{"handle":"run-1","value":null}`, `{"handle":"run-1","value":"x"}`,
		`{"handle":"run-1","value":{"n": 1}}`, `{"handle":"run-1","value": 1}`, `{"handle":"run-1","value":1 }`, `{"handle":"run-1","value":1,"x":2}`,
		`{"handle":"run-1","value":1,"value":2}`, `{"handle":"run-1","value":{"a":1}}}`, `{"handle":"run-1","value":}`, `{"handle":"run-1","value":[1,}`,
		`{"handle":"r\"1","value":1}`, `{"handle":"","value":1}`, `{"handle":"run-1","value":1,"as_bytes":true}`, `{"handle":"run-1","bytes":"eA=="}`,
		`{"handle":"run-1","value":tru}`, `{"handle":"run-1","value":1}{"x":1}`, `{"handle":"run-1","value":"\ud800"}`,
		// pipelined: no handle
		`{"value":{"n":1,"s":2}}`, `{"value":null}`, `{"value": 1}`, `{"value":1 }`, `{"value":1,"value":2}`, `{"value":1,"handle":"run-1"}`,
		`{"value":{"a":1}}}`, `{"value":}`, `{"value":1}{"x":1}`, `{"value":1,"as_bytes":true}`, `{"value":"x"`}
	for _, b := range completes {
		var fast, slow runCompleteRequest
		fe, se := decodeRunComplete([]byte(b), &fast), decode([]byte(b), &slow)
		if (fe == nil) != (se == nil) || !reflect.DeepEqual(fast, slow) {
			t.Errorf("run/complete %q: fast %+v %v, decode %+v %v", b, fast, fe, slow, se)
		}
	}
}

// A value goes inline only when it is JSON text, which is UTF-8: a Bash
// step or state value holding other bytes in a JSON string passed
// json.Valid and reached Python inline, whose decoding of the answer then
// failed every attempt ("the context endpoint is unreachable").
func TestEncodeResultSendsOnlyUTF8JSONInline(t *testing.T) {
	for _, tc := range []struct {
		value  string
		inline bool
	}{{`"ab"`, true}, {`{"é":1}`, true}, {"\"a\xffb\"", false}, {"{\"k\":\"\xc3\"}", false}, {`not json`, false}} {
		w := encodeResult(Result{Value: []byte(tc.value)}, false)
		if got := w.Value != nil; got != tc.inline {
			t.Errorf("%q: inline %v, want %v", tc.value, got, tc.inline)
		}
		back, err := decodeResult(w)
		if err != nil || string(back.Value) != tc.value {
			t.Errorf("%q: decoded back as %q, %v", tc.value, back.Value, err)
		}
	}
}
