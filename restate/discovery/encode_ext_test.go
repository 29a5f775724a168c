package discovery_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/restate/discovery"
)

func ptr[T any](v T) *T { return &v }

// fullManifest sets every field the API has, so each version's golden file
// shows exactly which of them that version carries.
func fullManifest() discovery.Manifest {
	return discovery.Manifest{
		ProtocolMode:       discovery.BidiStream,
		MinProtocolVersion: 5,
		MaxProtocolVersion: 7,
		Services: []discovery.Service{
			{
				Name:                 "Greeter",
				Documentation:        "Says hello.",
				Metadata:             map[string]string{"owner": "team-a"},
				InactivityTimeout:    ptr(time.Minute),
				AbortTimeout:         ptr(10 * time.Minute),
				JournalRetention:     ptr(24 * time.Hour),
				IdempotencyRetention: ptr(time.Hour),
				IngressPrivate:       ptr(false),
				RetryPolicy: &discovery.RetryPolicy{
					InitialInterval:      ptr(100 * time.Millisecond),
					MaxInterval:          ptr(30 * time.Second),
					ExponentiationFactor: ptr(2.5),
					MaxAttempts:          ptr(10),
					OnMaxAttempts:        discovery.OnMaxAttemptsPause,
				},
				Handlers: []discovery.Handler{
					{
						Name:              "greet",
						Documentation:     "Greets $1.",
						Metadata:          map[string]string{"runtime": "python"},
						InactivityTimeout: ptr(1500 * time.Millisecond),
						AbortTimeout:      ptr(time.Duration(0)),
						IngressPrivate:    ptr(true),
						RetryPolicy:       &discovery.RetryPolicy{MaxAttempts: ptr(0), OnMaxAttempts: discovery.OnMaxAttemptsKill},
					},
					{Name: "raw", InputContentType: "application/octet-stream", OutputContentType: "text/plain"},
				},
			},
			{
				Name:            "acme.Counter-v2",
				Type:            discovery.ServiceTypeVirtualObject,
				EnableLazyState: ptr(true),
				Handlers: []discovery.Handler{
					{Name: "add", Type: discovery.HandlerTypeExclusive, JournalRetention: ptr(time.Second)},
					{Name: "get", Type: discovery.HandlerTypeShared, EnableLazyState: ptr(false)},
				},
			},
			{
				Name: "Signup",
				Type: discovery.ServiceTypeWorkflow,
				Handlers: []discovery.Handler{
					{Name: "run", Type: discovery.HandlerTypeWorkflow, WorkflowCompletionRetention: ptr(48 * time.Hour)},
					{Name: "approve", Type: discovery.HandlerTypeShared},
				},
			},
		},
	}
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, b)
	}
	return v
}

// Golden documents per version, written by hand from the schema history of
// endpoint_manifest_schema.json (v1 base, service and handler types; v2
// documentation/metadata; v3 timeouts, retentions, ingressPrivate,
// enableLazyState; v4 retry policy).
func TestEncodeGoldenPerVersion(t *testing.T) {
	for v := discovery.MinVersion; v <= discovery.MaxVersion; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			got, err := discovery.Encode(fullManifest(), v)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("manifest_v%d.json", v)))
			if err != nil {
				t.Fatal(err)
			}
			if g, w := decode(t, got), decode(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("v%d manifest differs from golden\n got: %s\nwant: %s", v, got, want)
			}
		})
	}
}

// Allowed keys per version, from the schema of that version.
var (
	rootKeys      = []string{"protocolMode", "minProtocolVersion", "maxProtocolVersion", "services"}
	serviceKeysV1 = []string{"name", "ty", "handlers"}
	handlerKeysV1 = []string{"name", "ty", "input", "output"}
	v2Keys        = []string{"documentation", "metadata"}
	v3Keys        = []string{"inactivityTimeout", "abortTimeout", "journalRetention", "idempotencyRetention", "workflowCompletionRetention", "ingressPrivate", "enableLazyState"}
	v4Keys        = []string{"retryPolicyInitialInterval", "retryPolicyMaxInterval", "retryPolicyMaxAttempts", "retryPolicyExponentiationFactor", "retryPolicyOnMaxAttempts"}
)

func allowed(base []string, v int) []string {
	out := slices.Clone(base)
	if v >= 2 {
		out = append(out, v2Keys...)
	}
	if v >= 3 {
		out = append(out, v3Keys...)
	}
	if v >= 4 {
		out = append(out, v4Keys...)
	}
	return out
}

// "a field not allowed in vN must be absent": the schema of each version has
// additionalProperties: false, so an unknown key is a schema violation.
func TestEncodeOnlyFieldsOfTheVersion(t *testing.T) {
	for v := discovery.MinVersion; v <= discovery.MaxVersion; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			b, err := discovery.Encode(fullManifest(), v)
			if err != nil {
				t.Fatal(err)
			}
			doc := decode(t, b)
			checkKeys(t, "manifest", doc, rootKeys)
			for _, s := range doc["services"].([]any) {
				svc := s.(map[string]any)
				checkKeys(t, "service "+svc["name"].(string), svc, allowed(serviceKeysV1, v))
				for _, h := range svc["handlers"].([]any) {
					hd := h.(map[string]any)
					checkKeys(t, "handler "+hd["name"].(string), hd, allowed(handlerKeysV1, v))
					checkKeys(t, "input", hd["input"].(map[string]any), []string{"required", "contentType"})
					checkKeys(t, "output", hd["output"].(map[string]any), []string{"setContentTypeIfEmpty", "contentType"})
				}
			}
		})
	}
}

func checkKeys(t *testing.T, where string, obj map[string]any, allowed []string) {
	t.Helper()
	for k := range obj {
		if !slices.Contains(allowed, k) {
			t.Errorf("%s has key %q, which its schema version does not define", where, k)
		}
	}
}

func TestDroppedFieldsNamesWhatOldVersionsLose(t *testing.T) {
	m := fullManifest()
	if d := discovery.DroppedFields(m, 4); len(d) != 0 {
		t.Errorf("v4 drops nothing, got %v", d)
	}
	d3 := discovery.DroppedFields(m, 3)
	sort.Strings(d3)
	if want := []string{"Greeter/greet: retryPolicy", "Greeter: retryPolicy"}; !slices.Equal(d3, want) {
		t.Errorf("v3 dropped %v, want %v", d3, want)
	}
	d1 := strings.Join(discovery.DroppedFields(m, 1), "\n")
	for _, want := range []string{"Greeter: documentation", "Greeter: metadata", "Greeter/greet: documentation",
		"Greeter: inactivityTimeout", "Greeter: ingressPrivate", "acme.Counter-v2/add: journalRetention", "Greeter: retryPolicy",
		"acme.Counter-v2: enableLazyState", "acme.Counter-v2/get: enableLazyState", "Signup/run: workflowCompletionRetention"} {
		if !strings.Contains(d1, want) {
			t.Errorf("v1 dropped fields lack %q:\n%s", want, d1)
		}
	}
}

func TestEncodeDefaultsServiceTypeAndContentTypes(t *testing.T) {
	m := discovery.Manifest{ProtocolMode: discovery.RequestResponse, MinProtocolVersion: 5, MaxProtocolVersion: 6,
		Services: []discovery.Service{{Name: "S", Handlers: []discovery.Handler{{Name: "h"}}}}}
	b, err := discovery.Encode(m, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"protocolMode":"REQUEST_RESPONSE","minProtocolVersion":5,"maxProtocolVersion":6,"services":[{"name":"S","ty":"SERVICE","handlers":[{"name":"h","input":{"required":false,"contentType":"*/*"},"output":{"setContentTypeIfEmpty":false,"contentType":"application/json"}}]}]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// "Bad input gets a clear error naming the field".
func TestEncodeRejectsInvalidManifests(t *testing.T) {
	good := func() discovery.Manifest {
		return discovery.Manifest{ProtocolMode: discovery.BidiStream, MinProtocolVersion: 5, MaxProtocolVersion: 7,
			Services: []discovery.Service{{Name: "S", Handlers: []discovery.Handler{{Name: "h"}}}}}
	}
	cases := []struct {
		name    string
		mutate  func(*discovery.Manifest)
		mention string
	}{
		{"no protocol mode", func(m *discovery.Manifest) { m.ProtocolMode = "" }, "protocolMode is required"},
		{"bad protocol mode", func(m *discovery.Manifest) { m.ProtocolMode = "STREAM" }, `protocolMode "STREAM"`},
		{"zero versions", func(m *discovery.Manifest) { m.MinProtocolVersion = 0 }, ">= 1"},
		{"min > max", func(m *discovery.Manifest) { m.MinProtocolVersion = 8 }, "greater than maxProtocolVersion"},
		{"no services", func(m *discovery.Manifest) { m.Services = nil }, "no services"},
		{"empty service name", func(m *discovery.Manifest) { m.Services[0].Name = "" }, `services[0] "": name is empty`},
		{"bad service name", func(m *discovery.Manifest) { m.Services[0].Name = "1abc" }, "name must match"},
		{"duplicate service", func(m *discovery.Manifest) { m.Services = append(m.Services, m.Services[0]) }, `services[1] "S": name duplicates services[0]`},
		{"bad service type", func(m *discovery.Manifest) { m.Services[0].Type = "ACTOR" }, `type "ACTOR"`},
		{"no handlers", func(m *discovery.Manifest) { m.Services[0].Handlers = nil }, "has no handlers"},
		{"empty handler name", func(m *discovery.Manifest) { m.Services[0].Handlers[0].Name = "" }, `handlers[0] "": name is empty`},
		{"dot in handler name", func(m *discovery.Manifest) { m.Services[0].Handlers[0].Name = "a.b" }, "name must match"},
		{"duplicate handler", func(m *discovery.Manifest) {
			m.Services[0].Handlers = append(m.Services[0].Handlers, discovery.Handler{Name: "h"})
		}, `handlers[1] "h": name duplicates handlers[0]`},
		{"handler type in SERVICE", func(m *discovery.Manifest) { m.Services[0].Handlers[0].Type = discovery.HandlerTypeShared }, "not allowed in a SERVICE"},
		{"workflow handler in object", func(m *discovery.Manifest) {
			m.Services[0].Type = discovery.ServiceTypeVirtualObject
			m.Services[0].Handlers[0].Type = discovery.HandlerTypeWorkflow
		}, "not allowed in a VIRTUAL_OBJECT"},
		{"idempotency on workflow handler", func(m *discovery.Manifest) {
			m.Services[0].Type = discovery.ServiceTypeWorkflow
			m.Services[0].Handlers[0].Type = discovery.HandlerTypeWorkflow
			m.Services[0].Handlers[0].IdempotencyRetention = ptr(time.Hour)
		}, "idempotencyRetention is not valid"},
		{"workflow retention outside a workflow", func(m *discovery.Manifest) {
			m.Services[0].Handlers[0].WorkflowCompletionRetention = ptr(time.Hour)
		}, "workflowCompletionRetention is only valid on the WORKFLOW handler"},
		{"workflow retention on a shared handler", func(m *discovery.Manifest) {
			m.Services[0].Type = discovery.ServiceTypeWorkflow
			m.Services[0].Handlers[0].Type = discovery.HandlerTypeShared
			m.Services[0].Handlers[0].WorkflowCompletionRetention = ptr(time.Hour)
		}, "workflowCompletionRetention is only valid on the WORKFLOW handler"},
		{"negative timeout", func(m *discovery.Manifest) { m.Services[0].InactivityTimeout = ptr(-time.Second) }, "inactivityTimeout -1s is negative"},
		{"sub-millisecond", func(m *discovery.Manifest) { m.Services[0].Handlers[0].AbortTimeout = ptr(1500 * time.Microsecond) }, "abortTimeout 1.5ms is not a whole number of milliseconds"},
		{"retry max < initial", func(m *discovery.Manifest) {
			m.Services[0].RetryPolicy = &discovery.RetryPolicy{InitialInterval: ptr(time.Second), MaxInterval: ptr(time.Millisecond)}
		}, "maxInterval"},
		{"retry factor", func(m *discovery.Manifest) {
			m.Services[0].RetryPolicy = &discovery.RetryPolicy{ExponentiationFactor: ptr(0.0)}
		}, "exponentiationFactor"},
		{"retry attempts", func(m *discovery.Manifest) {
			m.Services[0].Handlers[0].RetryPolicy = &discovery.RetryPolicy{MaxAttempts: ptr(-1)}
		}, "maxAttempts -1"},
		{"retry on max", func(m *discovery.Manifest) {
			m.Services[0].RetryPolicy = &discovery.RetryPolicy{OnMaxAttempts: "STOP"}
		}, `onMaxAttempts "STOP"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.mutate(&m)
			b, err := discovery.Encode(m, 4)
			if err == nil {
				t.Fatalf("Encode accepted it: %s", b)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
	if _, err := discovery.Encode(good(), 5); err == nil || !strings.Contains(err.Error(), "version 5") {
		t.Errorf("Encode(v5) error = %v, want unsupported version", err)
	}
	if _, err := discovery.Encode(good(), 4); err != nil {
		t.Errorf("the unmodified manifest must encode: %v", err)
	}
}
