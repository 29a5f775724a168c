package main

import (
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
)

// --instance wins over FNBRIDGE_INSTANCE, which wins over the file's
// instance:, which wins over the hostname.
func TestInstancePrecedence(t *testing.T) {
	cases := []struct {
		name, head, env, flag string
		setEnv                bool
		want, from            string
	}{
		{"hostname", "", "", "", false, bridge.DefaultInstance(), bridge.InstanceFromHostname},
		{"file", "instance: file-1\n", "", "", false, "file-1", bridge.InstanceFromConfig},
		{"env over file", "instance: file-1\n", "env-1", "", true, "env-1", bridge.InstanceFromEnv},
		{"flag over env", "instance: file-1\n", "env-1", "flag-1", true, "flag-1", bridge.InstanceFromFlag},
		{"empty env is unset", "instance: file-1\n", "", "", true, "file-1", bridge.InstanceFromConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setEnv {
				t.Setenv(bridge.InstanceEnv, tc.env)
			}
			cfg, err := loadServeConfig(writeServeConfig(t, tc.head), "", "")
			if err != nil {
				t.Fatal(err)
			}
			if err := applyInstance(cfg, tc.flag); err != nil {
				t.Fatal(err)
			}
			if cfg.Instance != tc.want || cfg.InstanceFrom != tc.from {
				t.Errorf("instance %q from %q, want %q from %q", cfg.Instance, cfg.InstanceFrom, tc.want, tc.from)
			}
		})
	}
}

// A malformed FNBRIDGE_INSTANCE is an error naming it, not a silent fall
// back to the hostname.
func TestInstanceEnvRefused(t *testing.T) {
	for _, v := range []string{"a b", "-x"} {
		t.Setenv(bridge.InstanceEnv, v)
		cfg, err := loadServeConfig(writeServeConfig(t, ""), "", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := applyInstance(cfg, ""); err == nil || !strings.HasPrefix(err.Error(), bridge.InstanceEnv+": ") {
			t.Errorf("FNBRIDGE_INSTANCE=%q: err = %v, want one naming it", v, err)
		}
	}
}

// --context-listen wins over FNBRIDGE_CONTEXT_LISTEN, which wins over the
// file's context_listen, as for the instance identity.
func TestContextListenPrecedence(t *testing.T) {
	cases := []struct {
		name, head, env, flag string
		setEnv                bool
		want, from            string
	}{
		{"none", "", "", "", false, "", ""},
		{"file", "context_listen: 127.0.0.1:9091\n", "", "", false, "127.0.0.1:9091", bridge.ContextListenFromConfig},
		{"env over file", "context_listen: 127.0.0.1:9091\n", "10.0.0.5:9091", "", true, "10.0.0.5:9091", bridge.ContextListenFromEnv},
		{"env without file", "", "unix:///run/fnbridge/ctx.sock", "", true, "unix:///run/fnbridge/ctx.sock", bridge.ContextListenFromEnv},
		{"flag over env", "context_listen: 127.0.0.1:9091\n", "10.0.0.5:9091", "10.0.0.6:9091", true, "10.0.0.6:9091", bridge.ContextListenFromFlag},
		{"empty env is unset", "context_listen: 127.0.0.1:9091\n", "", "", true, "127.0.0.1:9091", bridge.ContextListenFromConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(bridge.ContextListenEnv, "")
			if tc.setEnv {
				t.Setenv(bridge.ContextListenEnv, tc.env)
			}
			cfg, err := loadServeConfig(writeServeConfig(t, tc.head), "", "")
			if err != nil {
				t.Fatal(err)
			}
			if err := applyContextListen(cfg, tc.flag); err != nil {
				t.Fatal(err)
			}
			if cfg.ContextListen != tc.want || cfg.ContextListenFrom != tc.from {
				t.Errorf("context_listen %q from %q, want %q from %q", cfg.ContextListen, cfg.ContextListenFrom, tc.want, tc.from)
			}
		})
	}
}

// bridge invoke derives its one-off identity from FNBRIDGE_INSTANCE as
// serve takes it: a bad value is refused (exit 2, nothing run), naming the
// variable.
func TestInvokeTakesFNBRIDGE_INSTANCE(t *testing.T) {
	t.Setenv(bridge.InstanceEnv, "bad name")
	var stdout, stderr strings.Builder
	code := runBridge([]string{"invoke", "--config", writeServeConfig(t, ""), "S/f", "{}"}, &stdout, &stderr)
	if code != invokeExitUsage || !strings.Contains(stderr.String(), bridge.InstanceEnv+`: "bad name" is not allowed`) {
		t.Fatalf("exit %d, stderr %q; want %d naming %s", code, stderr.String(), invokeExitUsage, bridge.InstanceEnv)
	}
}
