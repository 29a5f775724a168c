package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// The value journaled as the completion of the "invoke" run has two forms.
//
// A JSON output of content type application/json without outputs, the
// usual result, is journaled as it is, byte for byte: what sdk-go
// journals for a run returning JSON. restate-server stores that value,
// sends it back in the run's completion and replays it, so a wrapper
// around every output was paid for several times per invocation.
//
// Anything else is a record, a JSON object with the keys of runRecord
// only, which keeps everything replay needs to reproduce the result.
// Records are also what every bridge before the plain form wrote, and
// journals hold them: they must stay readable.
//
// The two are told apart by looksLikeRecord: an object whose keys are all
// record keys is a record; the plain form is used only for outputs that
// are not such an object, so a value is read back as what it was written
// as. The handler always answers with the decoded value, on first
// execution and on replay alike, so both give byte-identical outputs.

// runRecord is the record form of the journaled value. A JSON output is
// kept as JSON so `restate invocations describe` shows it readably
// (encoding/json compacts it).
type runRecord struct {
	// Output holds the handler output when it is JSON.
	Output json.RawMessage `json:"output,omitempty"`
	// OutputBytes holds any other output, base64 in the journal.
	OutputBytes []byte `json:"output_bytes,omitempty"`
	// ContentType is the output's content type as the runtime reported it.
	ContentType string `json:"content_type,omitempty"`
	// Outputs are the handler's bounded key/value outputs.
	Outputs map[string]string `json:"outputs,omitempty"`
}

// jsonSpace is the whitespace JSON allows between tokens.
const jsonSpace = " \t\r\n"

// recordKeys are runRecord's JSON keys.
var recordKeys = map[string]bool{"output": true, "output_bytes": true, "content_type": true, "outputs": true}

// plainContentType is the content type of a value journaled plain.
const plainContentType = functionruntime.DefaultContentType

// Result is one function invocation's result, as journaled and replayed.
type Result struct {
	Output      []byte
	ContentType string
	Outputs     map[string]string
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || (len(mt) > 5 && mt[len(mt)-5:] == "+json"))
}

// encodeRecord makes the journal value for r.
func encodeRecord(r *Result) ([]byte, error) {
	jsonOut := len(r.Output) > 0 && isJSON(r.ContentType) && json.Valid(r.Output)
	if jsonOut && r.ContentType == plainContentType && len(r.Outputs) == 0 && !looksLikeRecord(r.Output) {
		return r.Output, nil
	}
	rec := runRecord{ContentType: r.ContentType, Outputs: r.Outputs}
	if jsonOut {
		rec.Output = r.Output
	} else {
		rec.OutputBytes = r.Output
	}
	// Without HTML escaping, a JSON output comes back as json.Compact
	// writes it: json.Marshal would also turn its <, > and & into \u003c
	// and the like, so a replay would return other bytes than the first
	// execution did.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// decodeRecord reads a journaled value back. A value that is neither
// form means the journal holds something this bridge did not write:
// refusing it is better than returning a wrong result.
func decodeRecord(b []byte) (*Result, error) {
	if !looksLikeRecord(b) {
		if !json.Valid(b) {
			return nil, fmt.Errorf("journaled run value is not an fnbridge record: %.40q is neither a record nor JSON", b)
		}
		return &Result{Output: b, ContentType: plainContentType}, nil
	}
	var rec runRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("journaled run value is not an fnbridge record: %w", err)
	}
	r := &Result{ContentType: rec.ContentType, Outputs: rec.Outputs}
	if rec.Output != nil {
		r.Output = []byte(rec.Output)
	} else {
		r.Output = rec.OutputBytes
	}
	return r, nil
}

// looksLikeRecord reports whether b is a JSON object all of whose keys
// (as decoded, compared exactly) are record keys, the empty object
// included. A value that is not an object costs a byte or two, an object
// whose first key is not a record key a scan of that key; only the rest
// goes through a JSON decoder.
func looksLikeRecord(b []byte) bool {
	b = bytes.TrimLeft(b, jsonSpace)
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	if first := bytes.TrimLeft(b[1:], jsonSpace); len(first) > 0 && first[0] == '"' {
		if end := bytes.IndexByte(first[1:], '"'); end >= 0 {
			if key := first[1 : 1+end]; bytes.IndexByte(key, '\\') < 0 && !recordKeys[string(key)] {
				return false
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // the '{'
		return false
	}
	for dec.More() {
		key, err := dec.Token()
		if k, ok := key.(string); err != nil || !ok || !recordKeys[k] {
			return false
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false
		}
	}
	return true
}
