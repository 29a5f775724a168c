package main

import "testing"

// The re-execution with sysmon's tuning is for the commands that serve,
// and never for the short-lived ones (fnbridge run, bridge invoke, ...),
// where it would only add an exec to every call.
func TestLongRunningFindsTheServingCommands(t *testing.T) {
	cases := []struct {
		args []string
		cmd  []string
		want bool
	}{
		{[]string{"serve", "--config", "b.yaml"}, []string{"serve"}, true},
		{[]string{"--log-level", "debug", "serve"}, []string{"serve"}, true},
		{[]string{"--log-format=console", "serve"}, []string{"serve"}, true},
		{[]string{"dev", "--admin", "http://127.0.0.1:9070"}, []string{"dev"}, true},
		{[]string{"runtime", "serve", "--runtime", "bash"}, []string{"runtime", "serve"}, true},
		{[]string{"runtime", "--log-level", "warn", "serve"}, []string{"runtime", "serve"}, true},
		{[]string{"ctx", "agent", "/tmp/d", "42"}, []string{"ctx", "agent"}, true},
		{[]string{"agent", "/tmp/d", "42"}, []string{"agent"}, true},
		{[]string{"invoke", "Svc/h", "{}"}, []string{"serve"}, false},
		{[]string{"run", "serve", "--", "true"}, []string{"serve"}, false},
		{[]string{"--log-level", "serve", "invoke"}, []string{"serve"}, false},
		{[]string{"runtime"}, []string{"runtime", "serve"}, false},
		{[]string{"--", "serve"}, []string{"serve"}, false},
		{nil, []string{"serve"}, false},
	}
	for _, c := range cases {
		if got := longRunning(c.args, c.cmd...); got != c.want {
			t.Errorf("longRunning(%q, %q) = %v, want %v", c.args, c.cmd, got, c.want)
		}
	}
}
