package bridge_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
)

// The fields each level of the configuration knows, in the order its
// errors list them: one place to update when a field is added.
const (
	knownTop      = "listen, protocol_mode, identity_keys, allow_unauthenticated, runtimes, shared_runtimes, python, shutdown_timeout, start_timeout, max_concurrent_invocations, max_journal_bytes, context_listen, metrics_listen, tracing, instance, services"
	knownService  = "name, type, documentation, metadata, lazy_state, handlers"
	knownHandler  = "name, documentation, metadata, runtime, dir, handler, env, python, bash, timeout, idle_timeout, concurrency, min_warm, lease_timeout, input_content_type, output_content_type, inactivity_timeout, abort_timeout, journal_retention, idempotency_retention, workflow_completion_retention, ingress_private, retry_policy, limits, durability, suspend_after, shared"
	knownLimits   = "memory, processes, open_files, file_size, cpu"
	knownRetry    = "initial_interval, max_interval, exponentiation_factor, max_attempts, on_max_attempts"
	knownPython   = "interpreter"
	goodHandler   = "      - {name: h, runtime: python, dir: functions, handler: greeter.greet}\n"
	servicesStart = "services:\n  - name: S\n    handlers:\n"
)

// configDir is a configuration directory whose functions/ holds
// greeter.py (writeConfig's), so the good parts of the cases below are
// valid.
func configDir(t *testing.T) string {
	t.Helper()
	return filepath.Dir(writeConfig(t, ""))
}

// A configuration error speaks the file's words: the line, the field path
// and what is allowed, never a Go type, with a suggestion for a likely
// typo and the fields known where an unknown one is. Each case asserts the
// whole message.
func TestConfigErrorsNameLineFieldAndWhatIsAllowed(t *testing.T) {
	dir := configDir(t)
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown top-level field",
			"metrics_port: 9464\n" + servicesStart + goodHandler,
			`line 1: unknown field "metrics_port" (known here: ` + knownTop + `)`},
		{"a typo gets a suggestion",
			"protocl_mode: bidi\n" + servicesStart + goodHandler,
			`line 1: unknown field "protocl_mode", did you mean "protocol_mode"? (known here: ` + knownTop + `)`},
		{"wrong case",
			"Listen: 127.0.0.1:9080\n" + servicesStart + goodHandler,
			`line 1: unknown field "Listen", did you mean "listen"? (known here: ` + knownTop + `)`},
		{"unknown service field",
			"services:\n  - name: S\n    handler:\n" + goodHandler,
			"line 2: services[0].handlers: want at least one handler\n" +
				"line 3: services[0]: unknown field \"handler\", did you mean \"handlers\"? (known here: " + knownService + ")"},
		{"unknown handler field, in the second handler",
			servicesStart + goodHandler + "      - {name: h2, runtime: python, dir: functions, handler: greeter.greet, concurency: 2}\n",
			`line 5: services[0].handlers[1]: unknown field "concurency", did you mean "concurrency"? (known here: ` + knownHandler + `)`},
		{"dashes for underscores",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, idle-timeout: 1m}\n",
			`line 4: services[0].handlers[0]: unknown field "idle-timeout", did you mean "idle_timeout"? (known here: ` + knownHandler + `)`},
		{"underscores left out",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, minwarm: 1}\n",
			`line 4: services[0].handlers[0]: unknown field "minwarm", did you mean "min_warm"? (known here: ` + knownHandler + `)`},
		{"nothing close enough to suggest",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, colour: red}\n",
			`line 4: services[0].handlers[0]: unknown field "colour" (known here: ` + knownHandler + `)`},
		{"unknown field in limits",
			servicesStart + goodHandler[:len(goodHandler)-2] + ", limits: {memroy: 1Gi}}\n",
			`line 4: services[0].handlers[0].limits: unknown field "memroy", did you mean "memory"? (known here: ` + knownLimits + `)`},
		{"unknown field in retry_policy",
			servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n        retry_policy:\n          max_attemps: 3\n",
			`line 9: services[0].handlers[0].retry_policy: unknown field "max_attemps", did you mean "max_attempts"? (known here: ` + knownRetry + `)`},
		{"a word for a whole number",
			servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n        concurrency: abc\n",
			`line 8: services[0].handlers[0].concurrency: want a whole number, got "abc"`},
		{"a fraction for a whole number",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, min_warm: 1.5}\n",
			`line 4: services[0].handlers[0].min_warm: want a whole number, got "1.5"`},
		{"a quoted number",
			"max_concurrent_invocations: \"10\"\n" + servicesStart + goodHandler,
			`line 1: max_concurrent_invocations: want a whole number, got the text "10" (write it without quotes)`},
		{"a number out of range",
			"max_concurrent_invocations: 99999999999999999999\n" + servicesStart + goodHandler,
			`line 1: max_concurrent_invocations: 99999999999999999999 is more than 9223372036854775807, the largest whole number this field holds`},
		{"a word for a number",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, retry_policy: {exponentiation_factor: double}}\n",
			`line 4: services[0].handlers[0].retry_policy.exponentiation_factor: want a number, got "double"`},
		{"a word for a boolean",
			"allow_unauthenticated: maybe\n" + servicesStart + goodHandler,
			`line 1: allow_unauthenticated: want true or false, got "maybe"`},
		{"quoted yes", "allow_unauthenticated: \"yes\"\n" + servicesStart + goodHandler,
			`line 1: allow_unauthenticated: want true or false, got the text "yes" (write it without quotes)`},
		{"quoted true", "allow_unauthenticated: 'true'\n" + servicesStart + goodHandler,
			`line 1: allow_unauthenticated: want true or false, got the text "true" (write it without quotes)`},
		{"a list for a duration",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, timeout: [1s]}\n",
			`line 4: services[0].handlers[0].timeout: want a duration like 30s or 5m, got a list`},
		{"a word for a duration",
			"shutdown_timeout: soon\n" + servicesStart + goodHandler,
			`line 1: shutdown_timeout: "soon" is not a duration (want e.g. 30s, 5m, 7d)`},
		{"a word for a size",
			"max_journal_bytes: lots\n" + servicesStart + goodHandler,
			`line 1: max_journal_bytes: "lots" is not a size (want e.g. 65536, 64Ki, 128Mi)`},
		{"a mapping for a string",
			servicesStart + "      - {name: h, runtime: {kind: python}, dir: functions, handler: greeter.greet}\n",
			`line 4: services[0].handlers[0].runtime: want a string, got a mapping`},
		{"a list for an env value",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, env: {A: [1, 2]}}\n",
			`line 4: services[0].handlers[0].env.A: want a string, got a list`},
		{"a scalar for a list",
			"identity_keys: publickeyv1_x\n" + servicesStart + goodHandler,
			`line 1: identity_keys: want a list, got "publickeyv1_x"`},
		{"a mapping for the services list",
			"services: {name: S}\n",
			`line 1: services: want a list, got a mapping`},
		{"a scalar for a mapping of fields",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, limits: 1Gi}\n",
			`line 4: services[0].handlers[0].limits: want a mapping of fields (known here: ` + knownLimits + `), got "1Gi"`},
		{"a scalar for env",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, env: A=b}\n",
			`line 4: services[0].handlers[0].env: want a mapping (name: value), got "A=b"`},
		{"the file is a list",
			"- listen\n- services\n",
			`line 1: want a mapping of fields (known here: ` + knownTop + `), got a list`},
		{"a field given twice",
			"listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n" + servicesStart + goodHandler,
			`line 2: field "listen" is given twice (first on line 1)`},
		{"an env name given twice",
			servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n        env:\n          A: x\n          A: y\n",
			`line 10: services[0].handlers[0].env: "A" is given twice (first on line 9)`},
		{"not YAML",
			"services: [\n",
			`line 1: not valid YAML: did not find expected node content`},
		{"a tab for indentation",
			"services:\n\t- name: S\n",
			`line 2: not valid YAML: found character that cannot start any token`},
		{"an alias inside its own anchor",
			"services: &s [*s]\n",
			`line 1: services[0]: want a mapping of fields (known here: ` + knownService + `), got a list`},
		{"unknown field in a handler's python block",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, python: {interpeter: .venv/bin/python}}\n",
			`line 4: services[0].handlers[0].python: unknown field "interpeter", did you mean "interpreter"? (known here: ` + knownPython + `)`},
		{"python block on a bash handler",
			servicesStart + "      - {name: h, runtime: bash, dir: functions, handler: greeter.greet, python: {interpreter: python3}}\n",
			`line 4: services[0].handlers[0].python: only applies to runtime: python`},
		{"bash block on a python handler",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, bash: {subshell: false}}\n",
			`line 4: services[0].handlers[0].bash: only applies to runtime: bash`},
		{"unknown field in a handler's bash block",
			servicesStart + "      - {name: h, runtime: bash, dir: functions, handler: greeter.greet, bash: {subshel: false}}\n",
			`line 4: services[0].handlers[0].bash: unknown field "subshel", did you mean "subshell"? (known here: subshell)`},
		{"interpreter that is neither a path nor a python command",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, python: {interpreter: sh}}\n",
			`line 4: services[0].handlers[0].python.interpreter: "sh" is neither a path (write ./sh for a relative one) nor a python command such as python3 or python3.12`},
		{"top-level interpreter with a line break",
			"python:\n  interpreter: \"/opt/py\\nthon\"\n" + servicesStart + goodHandler,
			`line 2: python.interpreter: "/opt/py\nthon" contains a NUL or line break`},
		{"validation problems carry their field's line",
			servicesStart + "      - name: h\n        runtime: ruby\n        dir: functions\n        handler: greeter.greet\n        concurrency: -1\n",
			"line 5: services[0].handlers[0].runtime: \"ruby\" is not allowed (python | bash)\n" +
				"line 8: services[0].handlers[0].concurrency: -1 is out of range (1..256)"},
		{"a field left out is reported where its parent is",
			servicesStart + "      - name: h\n        runtime: python\n        handler: greeter.greet\n",
			`line 4: services[0].handlers[0].dir: missing: the directory holding the handler's code`},
		{"a section left out has no line",
			"listen: 127.0.0.1:9080\n",
			`services: want at least one service`},
		{"a value of the wrong shape is not also reported as missing",
			servicesStart + "      - {name: h, runtime: [python], dir: functions, handler: greeter.greet}\n",
			`line 4: services[0].handlers[0].runtime: want a string, got a list`},
		{"a written zero is not the default it would silently get",
			"shutdown_timeout: 0s\n" + servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n        durability: steps\n" +
				"        timeout: 0s\n        idle_timeout: 0s\n        concurrency: 0\n        lease_timeout: 0\n        suspend_after: 0s\n",
			"line 1: shutdown_timeout: 0 is not allowed: want a positive duration (left out: 30s)\n" +
				"line 10: services[0].handlers[0].timeout: 0 is not allowed: want 0 < timeout <= 15m (left out: 30s)\n" +
				"line 11: services[0].handlers[0].idle_timeout: 0 is not allowed: want at least 1s (left out: 5m)\n" +
				"line 12: services[0].handlers[0].concurrency: 0 is not allowed: want 1..256 (left out: 1)\n" +
				"line 13: services[0].handlers[0].lease_timeout: 0 is not allowed: want 0 < lease_timeout <= 15m (left out: 5s)\n" +
				"line 14: services[0].handlers[0].suspend_after: 0 is not allowed: want a positive duration shorter than timeout (left out: 5s, at most half the timeout)"},
		{"a written zero Restate timeout or retry interval is not the default it would silently get",
			servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n" +
				"        inactivity_timeout: 0s\n        abort_timeout: 0\n        retry_policy: {initial_interval: 0s, max_interval: 0, max_attempts: 3}\n",
			"line 8: services[0].handlers[0].inactivity_timeout: 0 is not allowed: want a positive duration longer than timeout + lease_timeout (left out: timeout + lease_timeout + 30s)\n" +
				"line 9: services[0].handlers[0].abort_timeout: 0 is not allowed: want a positive duration (left out: inactivity_timeout)\n" +
				"line 10: services[0].handlers[0].retry_policy.initial_interval: 0 is not allowed: want a positive interval such as 100ms (left out: Restate's default)\n" +
				"line 10: services[0].handlers[0].retry_policy.max_interval: 0 is not allowed: want a positive interval such as 10s (left out: Restate's default)"},
		{"a negative retry interval is named",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, retry_policy: {max_interval: -1s}}\n",
			"line 4: services[0].handlers[0].retry_policy.max_interval: -1s is negative: want a positive interval"},
		{"a written zero after a merged null",
			servicesStart + "      - &base {name: a, runtime: python, dir: functions, handler: greeter.greet, timeout: ~}\n" +
				"      - <<: *base\n        name: b\n        timeout: 0s\n",
			"line 7: services[0].handlers[1].timeout: 0 is not allowed: want 0 < timeout <= 15m (left out: 30s)"},
		{"too few processes for a steps-mode Bash worker",
			servicesStart + "      - {name: h, runtime: bash, dir: functions, handler: greeter.greet, durability: steps, limits: {processes: 8}}\n",
			"line 4: services[0].handlers[0].limits.processes: 8 is fewer than 12, the fewest a durability: steps Bash worker takes a step with (the worker, its guardian and subshell, the step agent, a Go program whose threads count, and the step's command; each fnbridge command run outside the function's own shell adds about 6)"},
		{"a written zero suspend_after on a function-mode handler",
			servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, suspend_after: 0s}\n",
			"line 4: services[0].handlers[0].suspend_after: only applies with durability: steps (a function-mode handler never waits on the journal)"},
		{"every problem at once, in line order",
			"protocol_mode: grpc\nlisten: [a]\n" + servicesStart + "      - {name: h, runtime: python, dir: functions, handler: greeter.greet, timeout: 20h, colour: red}\n",
			"line 1: protocol_mode: \"grpc\" is not allowed (bidi | request_response)\n" +
				"line 2: listen: want a string, got a list\n" +
				"line 6: services[0].handlers[0]: unknown field \"colour\" (known here: " + knownHandler + ")\n" +
				"line 6: services[0].handlers[0].timeout: 20h is out of range (0 < timeout <= 15m)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bridge.ParseConfig([]byte(tc.yaml), dir)
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n%s\nwant:\n%s", err, tc.want)
			}
			var ce *bridge.ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error is a %T, want a *bridge.ConfigError", err)
			}
			for _, goWord := range []string{"bridge.", "!!", "unmarshal", "int64", "float64", "[]string", "map["} {
				if strings.Contains(err.Error(), goWord) {
					t.Errorf("error names a Go or YAML-library type (%q): %s", goWord, err)
				}
			}
		})
	}
}

// A field written as null is left out: its default applies, where a
// written 0 is refused (above).
func TestConfigNullIsLeftOut(t *testing.T) {
	cfg, err := bridge.ParseConfig([]byte("shutdown_timeout: ~\n"+servicesStart+
		"      - {name: h, runtime: python, dir: functions, handler: greeter.greet, timeout: ~, concurrency: null, lease_timeout: null, idle_timeout: ~}\n"), configDir(t))
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Services[0].Handlers[0]
	if h.Timeout.Std() != bridge.DefaultTimeout || h.Concurrency != bridge.DefaultConcurrency ||
		h.LeaseTimeout.Std() != bridge.DefaultLeaseTimeout || h.IdleTimeout.Std() != bridge.DefaultIdleTimeout ||
		cfg.ShutdownTimeout.Std() != bridge.DefaultShutdownTimeout {
		t.Fatalf("null fields: %+v, shutdown_timeout %s; want the defaults", h, cfg.ShutdownTimeout)
	}
}

// YAML's own features still work through the field-checking decoder:
// anchors, aliases and merge keys, where the mapping's own keys win.
func TestConfigAnchorsAndMergeKeys(t *testing.T) {
	dir := configDir(t)
	yaml := `
services:
  - name: S
    handlers:
      - &base {name: a, runtime: python, dir: functions, handler: greeter.greet, timeout: 5s, env: &env {A: "1"}}
      - <<: *base
        name: b
        timeout: 7s
        env: {<<: *env, B: "2"}
  - name: T
    handlers: [*base]
`
	cfg, err := bridge.ParseConfig([]byte(yaml), dir)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := cfg.Services[0].Handlers[0], cfg.Services[0].Handlers[1], cfg.Services[1].Handlers[0]
	if a.Name != "a" || b.Name != "b" || c.Name != "a" {
		t.Errorf("names %q %q %q, want a b a", a.Name, b.Name, c.Name)
	}
	if a.Timeout.Std().String() != "5s" || b.Timeout.Std().String() != "7s" || b.Env["A"] != "1" || b.Env["B"] != "2" || b.Handler != "greeter.greet" {
		t.Errorf("merged handler = %+v, want a's fields with its own name and timeout", b)
	}
}

// An alias bomb (a handler aliased 500 times in a service aliased 500
// times: a quarter million handlers from a few kilobytes) is refused
// quickly, as one problem for the whole file.
func TestConfigAliasExpansionIsBounded(t *testing.T) {
	aliases := func(name string) string { return strings.TrimSuffix(strings.Repeat("*"+name+", ", 500), ", ") }
	yaml := "h: &h {name: h, runtime: python, dir: functions, handler: greeter.greet}\n" +
		"s: &s {name: S, handlers: [" + aliases("h") + "]}\n" +
		"services: [" + aliases("s") + "]\n"
	_, err := bridge.ParseConfig([]byte(yaml), configDir(t))
	want := "line 1: unknown field \"h\" (known here: " + knownTop + ")\n" +
		"line 2: unknown field \"s\" (known here: " + knownTop + ")\n" +
		"line 3: the file expands to more than 200000 values (through aliases)"
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
}

// LoadConfig names the file as the user gave it, once, before each
// problem's line: no "config ...: yaml: yaml:" chain.
func TestLoadConfigNamesTheFileOnce(t *testing.T) {
	dir := configDir(t)
	t.Chdir(dir)
	if err := os.WriteFile("bridge.yaml", []byte("protocl_mode: bidi\n"+servicesStart+goodHandler), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := bridge.LoadConfig("bridge.yaml")
	if want := `bridge.yaml:1: unknown field "protocl_mode", did you mean "protocol_mode"? (known here: ` + knownTop + `)`; err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
	if err := os.WriteFile("bridge.yaml", []byte("listen: 127.0.0.1:9080\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.LoadConfig("bridge.yaml"); err == nil || err.Error() != "bridge.yaml: services: want at least one service" {
		t.Errorf("error %v, want the file named without a line", err)
	}
	if _, err := bridge.LoadConfig("missing.yaml"); err == nil || err.Error() != "missing.yaml: no such file (--config names the configuration file)" {
		t.Errorf("missing file: %v", err)
	}
	if _, err := bridge.LoadConfig("functions"); err == nil || err.Error() != "functions is a directory (--config names the configuration file, e.g. functions/bridge.yaml)" {
		t.Errorf("a directory: %v", err)
	}
	if _, err := bridge.LoadConfig(""); err == nil || err.Error() != "the configuration file's path is empty (--config names the configuration file)" {
		t.Errorf("an empty path: %v", err)
	}
}

// python.interpreter: a handler's own wins; a handler without one takes
// the top-level one, made absolute against the file's directory; a
// handler's relative path stays relative (the runtime resolves it against
// dir on its host); without either, none (the runtime's default: dir's
// .venv, else python3).
func TestConfigPythonInterpreter(t *testing.T) {
	dir := configDir(t)
	cfg, err := bridge.ParseConfig([]byte(`
python: {interpreter: venvs/shared/bin/python}
services:
  - name: S
    handlers:
      - {name: own, runtime: python, dir: functions, handler: greeter.greet, python: {interpreter: .venv/bin/python}}
      - {name: command, runtime: python, dir: functions, handler: greeter.greet, python: {interpreter: python3.12}}
      - {name: inherits, runtime: python, dir: functions, handler: greeter.greet}
      - {name: empty, runtime: python, dir: functions, handler: greeter.greet, python: {}}
      - {name: shell, runtime: bash, dir: functions, handler: greeter.greet}
`), dir)
	if err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "venvs", "shared", "bin", "python")
	for i, want := range []string{".venv/bin/python", "python3.12", shared, shared, ""} {
		h := cfg.Services[0].Handlers[i]
		if got := h.PythonInterpreter(); got != want {
			t.Errorf("%s: interpreter %q, want %q", h.Name, got, want)
		}
	}
	cfg, err = bridge.ParseConfig([]byte(servicesStart+goodHandler), dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Services[0].Handlers[0].PythonInterpreter(); got != "" {
		t.Errorf("no python block anywhere: interpreter %q, want none (the runtime's default)", got)
	}
}
