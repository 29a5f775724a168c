package bridge_test

import (
	"encoding/json"
	"path/filepath"
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
	for version, want := range map[int]*float64{2: nil, 3: ptr(float64(wantInactivity.Milliseconds())), 4: ptr(float64(wantInactivity.Milliseconds()))} {
		got := firstManifestHandler(t, cfg, version)
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

// journal_retention, idempotency_retention, ingress_private and a
// workflow's workflow_completion_retention reach the manifest from v3 (in
// whole milliseconds); left out, the manifest says nothing and Restate's
// defaults apply. Misplaced or negative values are refused naming the field.
func TestRetentionsAndIngressPrivateReachTheManifest(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, `
services:
  - name: Greeter
    handlers:
      - {name: greet, runtime: python, dir: functions, handler: greeter.greet,
         journal_retention: 2h, idempotency_retention: 30m, ingress_private: true}
      - {name: plain, runtime: python, dir: functions, handler: greeter.greet}
  - name: Signup
    type: workflow
    handlers:
      - {name: run, runtime: python, dir: functions, handler: greeter.greet, workflow_completion_retention: 1d24h}
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := bridge.New(cfg, bridge.Options{Clients: map[string]executorv1.FunctionRuntimeClient{"python": newFakeRuntime()}})
	if err != nil {
		t.Fatal(err)
	}
	handlers := func(version int) map[string]map[string]any {
		out, err := discovery.Encode(b.Manifest(), version)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Services []struct {
				Name     string           `json:"name"`
				Handlers []map[string]any `json:"handlers"`
			} `json:"services"`
		}
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		byName := map[string]map[string]any{}
		for _, s := range m.Services {
			for _, h := range s.Handlers {
				byName[s.Name+"/"+h["name"].(string)] = h
			}
		}
		return byName
	}
	v3 := handlers(3)
	for _, c := range []struct {
		handler, field string
		want           any
	}{
		{"Greeter/greet", "journalRetention", float64(2 * time.Hour / time.Millisecond)},
		{"Greeter/greet", "idempotencyRetention", float64(30 * time.Minute / time.Millisecond)},
		{"Greeter/greet", "ingressPrivate", true},
		{"Signup/run", "workflowCompletionRetention", float64(48 * time.Hour / time.Millisecond)},
	} {
		if got := v3[c.handler][c.field]; got != c.want {
			t.Errorf("manifest v3 %s %s = %v, want %v", c.handler, c.field, got, c.want)
		}
	}
	for _, field := range []string{"journalRetention", "idempotencyRetention", "ingressPrivate", "workflowCompletionRetention"} {
		if v, ok := v3["Greeter/plain"][field]; ok {
			t.Errorf("manifest v3 Greeter/plain carries %s = %v, left out in the configuration", field, v)
		}
		if v, ok := handlers(2)["Greeter/greet"][field]; ok {
			t.Errorf("manifest v2 carries %s = %v, which it does not define", field, v)
		}
	}

	for _, bad := range []struct{ services, want string }{
		{`
  - name: S
    handlers:
      - {name: h, runtime: python, dir: functions, handler: greeter.greet, journal_retention: -1s}`,
			"services[0].handlers[0].journal_retention: must be positive"},
		{`
  - name: S
    handlers:
      - {name: h, runtime: python, dir: functions, handler: greeter.greet, workflow_completion_retention: 1h}`,
			"services[0].handlers[0].workflow_completion_retention: only the run handler of a workflow"},
		{`
  - name: W
    type: workflow
    handlers:
      - {name: run, runtime: python, dir: functions, handler: greeter.greet, idempotency_retention: 1h}`,
			"services[0].handlers[0].idempotency_retention: a workflow's run handler keeps its result for workflow_completion_retention"},
	} {
		_, err := bridge.LoadConfig(writeConfig(t, "services:"+bad.services+"\n"))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("config %s: error %v, want it to say %q", bad.services, err, bad.want)
		}
	}
}

// Durations take whole days in front, as retentions are counted: 7d,
// 1d12h; anything else after the days is refused.
func TestDurationsInDays(t *testing.T) {
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute} {
		cfg, err := bridge.LoadConfig(writeConfig(t, strings.Replace(validConfig, "idle_timeout: 5m", "idle_timeout: 5m\n        journal_retention: "+in, 1)))
		if err != nil {
			t.Fatalf("journal_retention %s: %v", in, err)
		}
		if got := cfg.Services[0].Handlers[0].JournalRetention.Std(); got != want {
			t.Errorf("journal_retention %s = %s, want %s", in, got, want)
		}
	}
	// (99999d2562047h, which overflows a duration, is more than the
	// longest: TestConfigOverflowNamesTheLargest.)
	for _, in := range []string{"7dx", "d", "1d-1h"} {
		_, err := bridge.LoadConfig(writeConfig(t, strings.Replace(validConfig, "idle_timeout: 5m", "idle_timeout: 5m\n        journal_retention: "+in, 1)))
		if err == nil || !strings.Contains(err.Error(), "is not a duration") {
			t.Errorf("journal_retention %s: error %v, want it refused as not a duration", in, err)
		}
	}
	_, err := bridge.LoadConfig(writeConfig(t, strings.Replace(validConfig, "idle_timeout: 5m", "idle_timeout: 5m\n        journal_retention: 500us", 1)))
	if err == nil || !strings.Contains(err.Error(), "journal_retention: 500µs is under a millisecond") {
		t.Errorf("journal_retention 500us: error %v, want it refused as under the manifest's unit", err)
	}
}

// Only a Restate timeout the file writes is checked for whole
// milliseconds, on its own line: abort_timeout left out takes
// inactivity_timeout's value, and a fraction of a millisecond there is
// reported once, under inactivity_timeout, not also under an abort_timeout
// the file does not have. Each case asserts the whole error.
func TestRestateTimeoutsReportOnlyTheWrittenField(t *testing.T) {
	handler := "services:\n  - name: S\n    handlers:\n      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n"
	dir := filepath.Dir(writeConfig(t, ""))
	for _, tc := range []struct{ name, extra, want string }{
		{"inactivity_timeout alone", "        inactivity_timeout: 36000500us\n",
			"line 8: services[0].handlers[0].inactivity_timeout: 36.0005s is not a whole number of milliseconds, the endpoint manifest's unit"},
		{"abort_timeout alone", "        abort_timeout: 36000500us\n",
			"line 8: services[0].handlers[0].abort_timeout: 36.0005s is not a whole number of milliseconds, the endpoint manifest's unit"},
		{"both", "        inactivity_timeout: 36000500us\n        abort_timeout: 1m0.5ms\n",
			"line 8: services[0].handlers[0].inactivity_timeout: 36.0005s is not a whole number of milliseconds, the endpoint manifest's unit\n" +
				"line 9: services[0].handlers[0].abort_timeout: 1m0.0005s is not a whole number of milliseconds, the endpoint manifest's unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bridge.ParseConfig([]byte(handler+tc.extra), dir)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
	// A whole inactivity_timeout is what abort_timeout, left out, takes.
	cfg, err := bridge.ParseConfig([]byte(handler+"        inactivity_timeout: 120s\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.Services[0].Handlers[0]; h.AbortTimeout.Std() != 120*time.Second {
		t.Errorf("abort_timeout left out = %s, want inactivity_timeout's 120s", h.AbortTimeout.Std())
	}
}

// A request/response deployment gets no inactivity timeout from Restate,
// which warns about one it is given (RT0021, on every handler): a derived
// one is left out of the manifest there, abort_timeout kept; one the file
// wrote is sent as written.
func TestRequestResponseManifestLeavesTheDerivedInactivityTimeoutOut(t *testing.T) {
	manifestHandler := func(cfgText string) map[string]any {
		t.Helper()
		cfg, err := bridge.LoadConfig(writeConfig(t, cfgText))
		if err != nil {
			t.Fatal(err)
		}
		return firstManifestHandler(t, cfg, 4)
	}
	rr := strings.Replace(validConfig, "protocol_mode: bidi", "protocol_mode: request_response", 1)
	derived := 10*time.Second + bridge.DefaultLeaseTimeout + bridge.RestateTimeoutMargin
	got := manifestHandler(rr)
	if v, ok := got["inactivityTimeout"]; ok {
		t.Errorf("request_response manifest carries the derived inactivityTimeout %v", v)
	}
	if v := got["abortTimeout"]; v != float64(derived.Milliseconds()) {
		t.Errorf("abortTimeout = %v, want %d", v, derived.Milliseconds())
	}
	got = manifestHandler(strings.Replace(rr, "timeout: 10s", "timeout: 10s\n        inactivity_timeout: 2m", 1))
	if v := got["inactivityTimeout"]; v != float64(2*time.Minute.Milliseconds()) {
		t.Errorf("a written inactivity_timeout became %v in the manifest, want 120000", v)
	}
	if v := manifestHandler(validConfig)["inactivityTimeout"]; v != float64(derived.Milliseconds()) {
		t.Errorf("bidi inactivityTimeout = %v, want %d", v, derived.Milliseconds())
	}
}

// firstManifestHandler is the first handler of the manifest version a
// bridge of cfg (on a fake runtime) answers discovery with.
func firstManifestHandler(t *testing.T, cfg *bridge.Config, version int) map[string]any {
	t.Helper()
	b, err := bridge.New(cfg, bridge.Options{Clients: map[string]executorv1.FunctionRuntimeClient{"python": newFakeRuntime()}})
	if err != nil {
		t.Fatal(err)
	}
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
	return m.Services[0].Handlers[0]
}
