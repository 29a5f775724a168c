package bridge_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate/discovery"
)

// Left out, inactivity_timeout and abort_timeout are derived from timeout
// so that Restate never ends an attempt while the function still runs: the
// manifest carries them from v3, and v1/v2 (which cannot) leave them out.
func TestRestateTimeoutsAreDerivedFromTimeout(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, strings.Replace(validConfig, "timeout: 10s", "timeout: 12m", 1)))
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Services[0].Handlers[0]
	wantInactivity := 12*time.Minute + bridge.DefaultLeaseTimeout + bridge.RestateTimeoutMargin
	if h.InactivityTimeout.Std() != wantInactivity || h.AbortTimeout.Std() != wantInactivity {
		t.Fatalf("inactivity_timeout %s, abort_timeout %s; want both %s", h.InactivityTimeout.Std(), h.AbortTimeout.Std(), wantInactivity)
	}
	b, err := bridge.New(cfg, bridge.Options{Clients: map[string]executorv1.FunctionRuntimeClient{"python": newFakeRuntime()}})
	if err != nil {
		t.Fatal(err)
	}
	for version, want := range map[int]*float64{2: nil, 3: ptr(float64(wantInactivity.Milliseconds())), 4: ptr(float64(wantInactivity.Milliseconds()))} {
		out, err := discovery.Encode(b.Manifest(), version)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Services []struct {
				Handlers []map[string]any `json:"handlers"`
			} `json:"services"`
		}
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		got := m.Services[0].Handlers[0]
		for _, field := range []string{"inactivityTimeout", "abortTimeout"} {
			v, ok := got[field]
			switch {
			case want == nil && ok:
				t.Errorf("manifest v%d carries %s = %v, which it does not define", version, field, v)
			case want != nil && v != *want:
				t.Errorf("manifest v%d %s = %v, want %v", version, field, v, *want)
			}
		}
	}
}

// Explicit values are kept when long enough; an inactivity_timeout too
// short for timeout is refused naming both fields.
func TestExplicitRestateTimeouts(t *testing.T) {
	withTimeouts := func(extra string) string {
		return strings.Replace(validConfig, "timeout: 10s", "timeout: 10s\n"+extra, 1)
	}
	cfg, err := bridge.LoadConfig(writeConfig(t, withTimeouts("        inactivity_timeout: 1m\n        abort_timeout: 3s")))
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.Services[0].Handlers[0]; h.InactivityTimeout.Std() != time.Minute || h.AbortTimeout.Std() != 3*time.Second {
		t.Fatalf("explicit timeouts became %s / %s", h.InactivityTimeout.Std(), h.AbortTimeout.Std())
	}
	for _, short := range []string{"5s", "15s"} { // below timeout; below timeout + lease_timeout
		_, err := bridge.LoadConfig(writeConfig(t, withTimeouts("        inactivity_timeout: "+short)))
		if err == nil {
			t.Fatalf("inactivity_timeout %s with timeout 10s accepted", short)
		}
		for _, w := range []string{"services[0].handlers[0].inactivity_timeout", "timeout 10s", "lease_timeout 5s"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }
