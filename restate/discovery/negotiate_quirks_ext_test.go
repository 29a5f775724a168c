package discovery_test

import (
	"errors"
	"testing"

	"github.com/fnbridge/fnbridge/restate/discovery"
)

const mt = "application/vnd.restate.endpointmanifest.v"

// A wildcard accepts the newest version the list does not refuse: q=0 on
// a version is "not acceptable" (RFC 9110 §12.4.2), and the more specific
// media range takes precedence over the wildcard (RFC 9110 §12.5.1).
func TestNegotiateWildcardHonoursRefusals(t *testing.T) {
	cases := []struct {
		name, accept string
		want         int
	}{
		{"v4 refused, any", mt + "4+json;q=0, */*", 3},
		{"any first, v4 refused", "*/*, " + mt + "4+json;q=0", 3},
		{"v4 and v3 refused, application/*", mt + "4+json;q=0, " + mt + "3+json;q=0, application/*", 2},
		{"any refused, v2 listed", "*/*;q=0, " + mt + "2+json", 2},
		{"application/* refused, */* accepted", "application/*;q=0, */*", 0},
		{"application/* refused, v1 listed", "application/*;q=0, */*, " + mt + "1+json", 1},
		{"v4 listed beats a refusing wildcard", "*/*;q=0, " + mt + "4+json;q=0.1", 4},
		{"v4 refused, v3 listed, any", mt + "4+json;q=0, " + mt + "3+json;q=0.2, */*;q=0.1", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := discovery.Negotiate(tc.accept)
			if tc.want == 0 {
				if err == nil || !errors.Is(err, discovery.ErrNotAcceptable) {
					t.Fatalf("Negotiate(%q) = v%d, %v; want not acceptable", tc.accept, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Negotiate(%q) = v%d, %v; want v%d", tc.accept, got, err, tc.want)
			}
		})
	}
}

// An element for another media type that does not parse is not ours to
// judge: it is skipped, and the list is answered from the others. One of
// ours (or a wildcard) that does not parse still makes the list an error.
func TestNegotiateSkipsUnrelatedMalformedElements(t *testing.T) {
	ok := []struct {
		accept string
		want   int
	}{
		{mt + "3+json, text/html;level", 3},
		{"text/html;level, " + mt + "2+json", 2},
		{"garbage, " + mt + "4+json", 4},
		{"text/plain;q=high, " + mt + "1+json", 1},
		{"text/plain;x, */*", 4},
	}
	for _, tc := range ok {
		got, err := discovery.Negotiate(tc.accept)
		if err != nil || got != tc.want {
			t.Errorf("Negotiate(%q) = v%d, %v; want v%d", tc.accept, got, err, tc.want)
		}
	}
	for _, accept := range []string{
		mt + "3+json;q=high, " + mt + "2+json",
		"*/*;q, " + mt + "2+json",
		"application/*;q=2, " + mt + "1+json",
	} {
		if v, err := discovery.Negotiate(accept); err == nil || !errors.Is(err, discovery.ErrNotAcceptable) {
			t.Errorf("Negotiate(%q) = v%d, %v; want not acceptable", accept, v, err)
		}
	}
}

// Only the canonical decimal version names a manifest version: the
// response's content-type must be the media type that was accepted.
func TestNegotiateNeedsCanonicalVersions(t *testing.T) {
	for _, accept := range []string{mt + "04+json", mt + "003+json", mt + "+2+json", mt + "0+json"} {
		if v, err := discovery.Negotiate(accept); err == nil {
			t.Errorf("Negotiate(%q) = v%d, want not acceptable", accept, v)
		}
	}
	if v, err := discovery.Negotiate(mt + "04+json, " + mt + "2+json"); err != nil || v != 2 {
		t.Errorf("Negotiate(v04, v2) = v%d, %v; want v2", v, err)
	}
}
