package bridge

import (
	"bytes"
	"encoding/json"
	"maps"
	"testing"
	"unicode/utf8"
)

// "The journaled run value carries what replay needs to reproduce the
// result exactly (output bytes, content type, outputs)": decoding what was
// encoded gives the same result, and re-encoding is stable, so first
// execution and replay answer identically.
func TestRunRecordRoundTrip(t *testing.T) {
	cases := []Result{
		{Output: []byte(`{"greeting":"hi"}`), ContentType: "application/json", Outputs: map[string]string{"k": "v"}},
		{Output: []byte(`{"greeting": "hi"}`), ContentType: "application/json"},
		{Output: []byte("plain text\n"), ContentType: "text/plain; charset=utf-8"},
		{Output: []byte{0, 1, 2, 255}, ContentType: "application/octet-stream"},
		{Output: []byte(`null`), ContentType: "application/json"},
		{Output: []byte(`not json`), ContentType: "application/json"},
		{Output: nil, ContentType: "application/json"},
		{Output: []byte(`[1,2]`), ContentType: "application/problem+json"},
		// JSON outputs that read as records are journaled as records.
		{Output: []byte(`{}`), ContentType: "application/json"},
		{Output: []byte(`{"output":1}`), ContentType: "application/json"},
		{Output: []byte(`{"outputs":{"a":"b"},"content_type":"x"}`), ContentType: "application/json"},
		{Output: []byte(`{"\u006futput":1}`), ContentType: "application/json"},
	}
	for _, want := range cases {
		enc, err := encodeRecord(&want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(enc)
		if err != nil {
			t.Fatalf("decode %s: %v", enc, err)
		}
		if !sameOutput(got.Output, want.Output) || got.ContentType != want.ContentType || !maps.Equal(got.Outputs, want.Outputs) {
			t.Errorf("round trip of %q (%s): got %+v from %s", want.Output, want.ContentType, got, enc)
		}
		again, _ := encodeRecord(got)
		if !bytes.Equal(again, enc) {
			t.Errorf("re-encoding is not stable: %s vs %s", again, enc)
		}
	}
}

// sameOutput: byte for byte, or, for JSON, the same document (a record
// compacts a JSON output).
func sameOutput(got, want []byte) bool {
	if bytes.Equal(got, want) {
		return true
	}
	var c bytes.Buffer
	return json.Valid(want) && json.Compact(&c, want) == nil && bytes.Equal(got, c.Bytes())
}

// The usual result, JSON of content type application/json without
// outputs, is journaled as it is, byte for byte (what restate-server
// stores, sends back and replays is the output alone, as for sdk-go);
// anything else is a record.
func TestPlainJSONOutputIsJournaledAsItIs(t *testing.T) {
	for _, out := range []string{`{"n":1}`, `{"a": [1, 2]}` + "\n", `"text"`, `42`, `[{"output":1}]`, `{"n":1,"output":2}`} {
		enc, err := encodeRecord(&Result{Output: []byte(out), ContentType: "application/json"})
		if err != nil || string(enc) != out {
			t.Errorf("output %q journaled as %q, %v; want it as it is", out, enc, err)
		}
	}
	for _, r := range []Result{
		{Output: []byte(`{"n":1}`), ContentType: "application/json", Outputs: map[string]string{"k": "v"}},
		{Output: []byte(`{"n":1}`), ContentType: "application/json; charset=utf-8"},
		{Output: []byte(`{"n":1}`), ContentType: "application/vnd.x+json"},
		{Output: []byte(`{"output":{"n":1}}`), ContentType: "application/json"},
	} {
		enc, _ := encodeRecord(&r)
		if !looksLikeRecord(enc) || !bytes.Contains(enc, []byte(`"content_type":`)) {
			t.Errorf("%+v journaled as %s, want a record", r, enc)
		}
	}
	// A record keeps a JSON output as JSON, readable in `restate
	// invocations describe`.
	enc, _ := encodeRecord(&Result{Output: []byte(`{"a":1}`), ContentType: "application/json", Outputs: map[string]string{"k": "v"}})
	if !bytes.Contains(enc, []byte(`"output":{"a":1}`)) {
		t.Fatalf("record %s does not embed the JSON output", enc)
	}
}

// Every record a bridge journaled before the plain form existed replays
// to the result it recorded: these are the values that encoder wrote.
func TestRecordsOfEarlierBridgesReplay(t *testing.T) {
	for _, c := range []struct {
		journaled string
		want      Result
	}{
		{`{"output":{"a":1},"content_type":"application/json"}`, Result{Output: []byte(`{"a":1}`), ContentType: "application/json"}},
		{`{"output":{"greeting":"hi"},"content_type":"application/json","outputs":{"k":"v"}}`,
			Result{Output: []byte(`{"greeting":"hi"}`), ContentType: "application/json", Outputs: map[string]string{"k": "v"}}},
		{`{"output":"text","content_type":"application/json"}`, Result{Output: []byte(`"text"`), ContentType: "application/json"}},
		{`{"output":null,"content_type":"application/json"}`, Result{Output: []byte(`null`), ContentType: "application/json"}},
		{`{"output":{},"content_type":"application/json"}`, Result{Output: []byte(`{}`), ContentType: "application/json"}},
		{`{"output_bytes":"cGxhaW4gdGV4dAo=","content_type":"text/plain; charset=utf-8"}`, Result{Output: []byte("plain text\n"), ContentType: "text/plain; charset=utf-8"}},
		{`{"output_bytes":"AAEC/w==","content_type":"application/octet-stream"}`, Result{Output: []byte{0, 1, 2, 255}, ContentType: "application/octet-stream"}},
		{`{"output_bytes":"bm90IGpzb24=","content_type":"application/json"}`, Result{Output: []byte("not json"), ContentType: "application/json"}},
		{`{"content_type":"application/json"}`, Result{ContentType: "application/json"}},
		{`{"content_type":"application/json","outputs":{"only":"outputs"}}`, Result{ContentType: "application/json", Outputs: map[string]string{"only": "outputs"}}},
		{`{}`, Result{}},
	} {
		got, err := decodeRecord([]byte(c.journaled))
		if err != nil {
			t.Fatalf("%s: %v", c.journaled, err)
		}
		if !bytes.Equal(got.Output, c.want.Output) || got.ContentType != c.want.ContentType || !maps.Equal(got.Outputs, c.want.Outputs) {
			t.Errorf("%s replays as %+v (output %q), want %+v", c.journaled, got, got.Output, c.want)
		}
	}
}

func TestDecodeRecordRejectsForeignValue(t *testing.T) {
	for _, v := range []string{"garbage", `{"output":1`, `[1,`, ``, `{"output":1}trailing`} {
		if r, err := decodeRecord([]byte(v)); err == nil {
			t.Errorf("the foreign journal value %q was accepted as %+v", v, r)
		}
	}
}

// Whatever a function returns, replay reproduces the result of the first
// execution: decode(encode(r)) is r (a JSON output in a record compacted),
// and encoding that again gives the same value.
func FuzzRunRecordRoundTrip(f *testing.F) {
	f.Add([]byte(`{"n":1}`), "application/json", "")
	f.Add([]byte(`{"output":1}`), "application/json", "")
	f.Add([]byte(`{ }`), "application/json", "k")
	f.Add([]byte{0xff, 0}, "application/octet-stream", "")
	f.Add([]byte(` {"\u0063ontent_type":"x"}`), "application/json", "")
	f.Fuzz(func(t *testing.T, out []byte, ct, outputKey string) {
		if !utf8.ValidString(ct) || !utf8.ValidString(outputKey) {
			t.Skip("the runtime refuses a content type or output key that is not UTF-8")
		}
		want := Result{Output: out, ContentType: ct}
		if outputKey != "" {
			want.Outputs = map[string]string{outputKey: "v"}
		}
		enc, err := encodeRecord(&want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(enc)
		if err != nil {
			t.Fatalf("decoding %q: %v", enc, err)
		}
		if !sameOutput(got.Output, want.Output) && !(len(want.Output) == 0 && len(got.Output) == 0) ||
			got.ContentType != want.ContentType || !maps.Equal(got.Outputs, want.Outputs) {
			t.Fatalf("%+v (output %q) came back as %+v (output %q) from %q", want, want.Output, got, got.Output, enc)
		}
		again, err := encodeRecord(got)
		if err != nil || !bytes.Equal(again, enc) {
			t.Fatalf("re-encoding %q gave %q, %v", enc, again, err)
		}
	})
}
