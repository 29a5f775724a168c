package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge"
)

func stepsConfig(top, handler string) string {
	return top + `
services:
  - name: Greeter
    handlers:
      - name: greet
        runtime: python
        dir: functions
        handler: greeter.greet
` + handler
}

func TestDurabilityDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, handler string
		durability    string
		suspendAfter  time.Duration
	}{
		{"left out", "", bridge.DurabilityFunction, 0},
		{"steps, default timeout", "        durability: steps\n", bridge.DurabilitySteps, bridge.DefaultSuspendAfter},
		{"steps, short timeout", "        durability: steps\n        timeout: 4s\n", bridge.DurabilitySteps, 2 * time.Second},
		{"steps, explicit", "        durability: steps\n        suspend_after: 1500ms\n", bridge.DurabilitySteps, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := bridge.LoadConfig(writeConfig(t, stepsConfig("", tc.handler)))
			if err != nil {
				t.Fatal(err)
			}
			h := cfg.Services[0].Handlers[0]
			if h.Durability != tc.durability || h.SuspendAfter.Std() != tc.suspendAfter {
				t.Fatalf("durability %q suspend_after %s; want %q %s", h.Durability, h.SuspendAfter.Std(), tc.durability, tc.suspendAfter)
			}
		})
	}
}

func TestDurabilityErrorsNameTheField(t *testing.T) {
	hp := "services[0].handlers[0]."
	for _, tc := range []struct{ name, top, handler, want string }{
		{"unknown durability", "", "        durability: journal\n", hp + `durability: "journal" is not allowed (function | steps)`},
		{"suspend_after without steps", "", "        suspend_after: 2s\n", hp + "suspend_after: only applies with durability: steps"},
		{"suspend_after negative", "", "        durability: steps\n        suspend_after: -1s\n", hp + "suspend_after: must be positive"},
		{"suspend_after not below timeout", "", "        durability: steps\n        timeout: 10s\n        suspend_after: 10s\n", hp + "suspend_after: 10s is not shorter than timeout 10s"},
		{"context_listen scheme", "context_listen: http://x:1\n", "", `context_listen: "http://x:1": want unix:///absolute/path or host:port`},
		{"context_listen relative socket", "context_listen: unix://ctx.sock\n", "", `context_listen: "unix://ctx.sock"`},
		{"context_listen directory", "context_listen: unix:///tmp/x/\n", "", `context_listen: "unix:///tmp/x/" names a directory, not a socket file`},
		{"context_listen root", "context_listen: unix:///\n", "", `context_listen: "unix:///" names a directory`},
		{"context_listen unix: without slashes", "context_listen: unix:rel\n", "", `context_listen: "unix:rel" names no socket: write a unix socket as unix:///absolute/path`},
		{"context_listen wildcard", "context_listen: 0.0.0.0:9091\n", "", `context_listen: "0.0.0.0:9091": name the address functions dial`},
		{"context_listen no host", "context_listen: :9091\n", "", `context_listen: ":9091": name the address functions dial`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bridge.LoadConfig(writeConfig(t, stepsConfig(tc.top, tc.handler)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestContextListenAccepted(t *testing.T) {
	for _, v := range []string{"unix:///run/fnbridge/ctx.sock", "10.0.0.5:9091", "tcp://127.0.0.1:0", "localhost:9091"} {
		cfg, err := bridge.LoadConfig(writeConfig(t, stepsConfig("context_listen: "+v+"\n", "")))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if cfg.ContextListen != v {
			t.Fatalf("context_listen %q, want %q kept", cfg.ContextListen, v)
		}
	}
}

// SetContextListen checks a value as the file's is, naming its source;
// a refused one leaves the configuration as it was.
func TestSetContextListen(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, stepsConfig("context_listen: 10.0.0.5:9091\n", "")))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ContextListenFrom != bridge.ContextListenFromConfig {
		t.Fatalf("from %q, want %q", cfg.ContextListenFrom, bridge.ContextListenFromConfig)
	}
	for _, tc := range []struct{ raw, source, want string }{
		{"http://x:1", bridge.ContextListenFromFlag, `--context-listen: "http://x:1": want unix:///absolute/path or host:port`},
		{"0.0.0.0:9091", bridge.ContextListenFromEnv, `FNBRIDGE_CONTEXT_LISTEN: "0.0.0.0:9091": name the address functions dial (e.g. 10.0.0.5:9091), not a wildcard host`},
	} {
		if err := cfg.SetContextListen(tc.raw, tc.source); err == nil || err.Error() != tc.want {
			t.Fatalf("%s: err = %v, want %s", tc.raw, err, tc.want)
		}
		if cfg.ContextListen != "10.0.0.5:9091" || cfg.ContextListenFrom != bridge.ContextListenFromConfig {
			t.Fatalf("after a refusal: %q from %q, want the file's kept", cfg.ContextListen, cfg.ContextListenFrom)
		}
	}
	if err := cfg.SetContextListen("unix:///run/fnbridge/ctx.sock", bridge.ContextListenFromEnv); err != nil {
		t.Fatal(err)
	}
	if cfg.ContextListen != "unix:///run/fnbridge/ctx.sock" || cfg.ContextListenFrom != bridge.ContextListenFromEnv {
		t.Fatalf("%q from %q, want the variable's", cfg.ContextListen, cfg.ContextListenFrom)
	}
}
