package bridge

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// Field types the configuration may grow keep decoding as yaml decodes
// them: a time.Duration from "30s", a TextUnmarshaler from its text, an
// any from whatever is there; a bad value is a problem in the file's words.
func TestConfigDecoderTakesDurationsAndTextTypes(t *testing.T) {
	type fields struct {
		D time.Duration  `yaml:"d"`
		A netip.Addr     `yaml:"a"`
		X map[string]any `yaml:"x"`
	}
	for _, tc := range []struct{ yaml, want string }{
		{"d: 30s\na: 10.0.0.1\nx: {n: {deep: [1, two]}}\n", ""},
		{"d: soon\n", `line 1: d: want a duration like 30s or 5m, got "soon"`},
		{"a: [1]\n", `line 1: a: want a single value, got a list`},
		{"a: nope\n", `line 1: a: want a single value, got "nope"`},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tc.yaml), &doc); err != nil {
			t.Fatal(err)
		}
		var got fields
		d := newConfigDecoder()
		d.decode(&doc, reflect.ValueOf(&got).Elem(), "")
		var msg string
		if len(d.problems) > 0 {
			msg = (&ConfigError{Problems: d.problems}).Error()
		}
		if msg != tc.want {
			t.Errorf("%q: %q, want %q", tc.yaml, msg, tc.want)
		}
		if tc.want == "" && (got.D != 30*time.Second || got.A != netip.MustParseAddr("10.0.0.1") || got.X["n"] == nil) {
			t.Errorf("%q decoded as %+v", tc.yaml, got)
		}
	}
}
