package bridge

import (
	"bytes"
	"testing"
)

// "The journaled run value carries what replay needs to reproduce the
// result exactly (output bytes, content type, outputs)": decoding what was
// encoded gives the same result, and re-encoding is stable, so first
// execution and replay answer identically.
func TestRunRecordRoundTrip(t *testing.T) {
	cases := []Result{
		{Output: []byte(`{"greeting":"hi"}`), ContentType: "application/json", Outputs: map[string]string{"k": "v"}},
		{Output: []byte("plain text\n"), ContentType: "text/plain; charset=utf-8"},
		{Output: []byte{0, 1, 2, 255}, ContentType: "application/octet-stream"},
		{Output: []byte(`null`), ContentType: "application/json"},
		{Output: []byte(`not json`), ContentType: "application/json"},
		{Output: nil, ContentType: "application/json"},
	}
	for _, want := range cases {
		enc, err := encodeRecord(&want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(enc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Output, want.Output) || got.ContentType != want.ContentType || len(got.Outputs) != len(want.Outputs) {
			t.Errorf("round trip of %q: got %+v", want.Output, got)
		}
		again, _ := encodeRecord(got)
		if !bytes.Equal(again, enc) {
			t.Errorf("re-encoding is not stable: %s vs %s", again, enc)
		}
	}
}

// A JSON output stays JSON in the journal so `restate invocations
// describe` shows it readably.
func TestRunRecordKeepsJSONReadable(t *testing.T) {
	enc, _ := encodeRecord(&Result{Output: []byte(`{"a":1}`), ContentType: "application/json"})
	if !bytes.Contains(enc, []byte(`"output":{"a":1}`)) {
		t.Fatalf("record %s does not embed the JSON output", enc)
	}
}

func TestDecodeRecordRejectsForeignValue(t *testing.T) {
	if _, err := decodeRecord([]byte("garbage")); err == nil {
		t.Fatal("a foreign journal value was accepted")
	}
}
