package discovery_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/restate/discovery"
)

// What restate-server 1.7.12 sends (observed with a logging proxy between it and a deployment).
const runtimeAccept = "application/vnd.restate.endpointmanifest.v4+json, application/vnd.restate.endpointmanifest.v3+json, application/vnd.restate.endpointmanifest.v2+json, application/vnd.restate.endpointmanifest.v1+json"

// Spec: "The runtime advertises supported manifest versions through Accept"
// and "The SDK MUST reply with the chosen version in content-type".
func TestNegotiatePicksHighestSupportedVersion(t *testing.T) {
	cases := []struct {
		name   string
		accept string
		want   int
	}{
		{"restate 1.7 list", runtimeAccept, 4},
		{"spec example v2,v1", "application/vnd.restate.endpointmanifest.v2+json, application/vnd.restate.endpointmanifest.v1+json", 2},
		{"only v1", "application/vnd.restate.endpointmanifest.v1+json", 1},
		{"order does not matter", "application/vnd.restate.endpointmanifest.v1+json,application/vnd.restate.endpointmanifest.v3+json,application/vnd.restate.endpointmanifest.v2+json", 3},
		{"future version skipped", "application/vnd.restate.endpointmanifest.v5+json, application/vnd.restate.endpointmanifest.v2+json", 2},
		{"whitespace and tabs", " \tapplication/vnd.restate.endpointmanifest.v3+json\t ,  application/vnd.restate.endpointmanifest.v1+json ", 3},
		{"parameters ignored", "application/vnd.restate.endpointmanifest.v2+json;charset=utf-8", 2},
		{"q-value kept", "application/vnd.restate.endpointmanifest.v3+json;q=0.5, application/vnd.restate.endpointmanifest.v1+json", 3},
		{"q=0 refuses that version", "application/vnd.restate.endpointmanifest.v4+json;q=0, application/vnd.restate.endpointmanifest.v2+json", 2},
		{"case-insensitive", "Application/VND.Restate.EndpointManifest.V3+JSON", 3},
		{"empty list elements", ",application/vnd.restate.endpointmanifest.v1+json,,", 1},
		{"wildcard any", "*/*", 4},
		{"wildcard application", "text/html, application/*;q=0.8", 4},
		{"unrelated types around", "text/plain, application/vnd.restate.endpointmanifest.v2+json, application/json", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := discovery.Negotiate(tc.accept)
			if err != nil {
				t.Fatalf("Negotiate(%q): %v", tc.accept, err)
			}
			if got != tc.want {
				t.Fatalf("Negotiate(%q) = v%d, want v%d", tc.accept, got, tc.want)
			}
		})
	}
}

// An unanswerable Accept makes the endpoint answer 415; the error says why.
func TestNegotiateRejects(t *testing.T) {
	cases := []struct {
		name, accept, mention string
	}{
		{"missing", "", "missing Accept"},
		{"blank", "   ", "missing Accept"},
		{"only unsupported versions", "application/vnd.restate.endpointmanifest.v5+json, application/vnd.restate.endpointmanifest.v0+json", "no supported"},
		{"only other types", "application/json, text/plain", "no supported"},
		{"all refused by q=0", "application/vnd.restate.endpointmanifest.v1+json;q=0", "no supported"},
		{"version not a number", "application/vnd.restate.endpointmanifest.vX+json", "no supported"},
		{"signed version", "application/vnd.restate.endpointmanifest.v+1+json", "no supported"},
		{"not a media type", "garbage", "not a media type"},
		{"bad q", "application/vnd.restate.endpointmanifest.v1+json;q=high", "q-value"},
		{"q out of range", "application/vnd.restate.endpointmanifest.v1+json;q=2", "q-value"},
		{"parameter without value", "application/vnd.restate.endpointmanifest.v1+json;q", "no value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := discovery.Negotiate(tc.accept)
			if err == nil {
				t.Fatalf("Negotiate(%q) = v%d, want an error", tc.accept, v)
			}
			if !errors.Is(err, discovery.ErrNotAcceptable) {
				t.Errorf("error %v does not wrap ErrNotAcceptable (the endpoint maps it to 415)", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

func TestContentType(t *testing.T) {
	for v := discovery.MinVersion; v <= discovery.MaxVersion; v++ {
		ct := discovery.ContentType(v)
		got, err := discovery.Negotiate(ct)
		if err != nil || got != v {
			t.Errorf("ContentType(%d) = %q does not negotiate back to v%d (got v%d, %v)", v, ct, v, got, err)
		}
	}
	if got := discovery.ContentType(1); got != "application/vnd.restate.endpointmanifest.v1+json" {
		t.Errorf("ContentType(1) = %q", got)
	}
}
