package bridge

import (
	"encoding/json"
	"fmt"
	"mime"
)

// runRecord is the value journaled as the completion of the "invoke" run.
// It carries everything replay needs to reproduce the result exactly, and
// keeps a JSON output as JSON so `restate invocations describe` shows it
// readably. encoding/json compacts a JSON output; the handler therefore
// always answers with the decoded record, on first execution and on replay
// alike, so both give byte-identical outputs.
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
	rec := runRecord{ContentType: r.ContentType, Outputs: r.Outputs}
	if isJSON(r.ContentType) && len(r.Output) > 0 && json.Valid(r.Output) {
		rec.Output = r.Output
	} else {
		rec.OutputBytes = r.Output
	}
	return json.Marshal(rec)
}

// decodeRecord reads a journaled value back. A value that is not a record
// means the journal holds something this bridge did not write: refusing it
// is better than returning a wrong result.
func decodeRecord(b []byte) (*Result, error) {
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
