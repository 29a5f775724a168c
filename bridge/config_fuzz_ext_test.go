package bridge_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/python"
)

// fuzzBase is a configuration directory with a functions/ folder holding a
// Python module and a Bash file, so valid configurations can pass.
func fuzzBase(f *testing.F) string {
	dir := f.TempDir()
	for name, body := range map[string]string{"greeter.py": "def greet(x):\n    return x\n", "shell.sh": "respond() { echo '{}'; }\n"} {
		if err := os.MkdirAll(filepath.Join(dir, "functions"), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "functions", name), []byte(body), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	return dir
}

var (
	fuzzNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	pyAdapter  = python.New(python.Options{})
	shAdapter  = bash.New(bash.Options{})
)

// checkAccepted asserts what the configuration reference promises of every
// configuration ParseConfig accepts: defaults applied, every value inside
// its documented range, and every handler string one the runtime's adapter
// accepts too (otherwise a config that loads would fail at registration).
func checkAccepted(t *testing.T, c *bridge.Config, base string) {
	t.Helper()
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		t.Fatalf("accepted listen %q", c.Listen)
	}
	if c.ProtocolMode != bridge.ModeBidi && c.ProtocolMode != bridge.ModeRequestResponse {
		t.Fatalf("accepted protocol_mode %q", c.ProtocolMode)
	}
	for _, k := range c.IdentityKeys {
		if !strings.HasPrefix(k, "publickeyv1_") {
			t.Fatalf("accepted identity key %q", k)
		}
	}
	for kind := range c.Runtimes {
		if kind != "python" && kind != "bash" {
			t.Fatalf("accepted runtime kind %q", kind)
		}
	}
	if c.ShutdownTimeout <= 0 || len(c.Services) == 0 {
		t.Fatalf("accepted shutdown_timeout %v with %d services", c.ShutdownTimeout, len(c.Services))
	}
	services := map[string]bool{}
	for _, s := range c.Services {
		if !fuzzNameRE.MatchString(s.Name) || services[s.Name] || len(s.Handlers) == 0 {
			t.Fatalf("accepted service %q (duplicate %v, %d handlers)", s.Name, services[s.Name], len(s.Handlers))
		}
		services[s.Name] = true
		handlers := map[string]bool{}
		for _, h := range s.Handlers {
			if !fuzzNameRE.MatchString(h.Name) || handlers[h.Name] {
				t.Fatalf("accepted handler name %q", h.Name)
			}
			handlers[h.Name] = true
			switch h.Runtime {
			case "python":
				if err := pyAdapter.ValidateHandler(h.Handler); err != nil {
					t.Fatalf("config accepted python handler %q that the adapter rejects: %v", h.Handler, err)
				}
			case "bash":
				if err := shAdapter.ValidateHandler(h.Handler); err != nil {
					t.Fatalf("config accepted bash handler %q that the adapter rejects: %v", h.Handler, err)
				}
			default:
				t.Fatalf("accepted runtime %q", h.Runtime)
			}
			if interp := h.PythonInterpreter(); interp != "" && (h.Runtime != "python" || python.CheckInterpreter(interp) != nil) {
				t.Fatalf("accepted interpreter %q for a %s handler", interp, h.Runtime)
			}
			if st, err := os.Stat(h.Dir); !filepath.IsAbs(h.Dir) || err != nil || !st.IsDir() {
				t.Fatalf("accepted dir %q (base %s)", h.Dir, base)
			}
			for k := range h.Env {
				if !fuzzNameRE.MatchString(k) || strings.HasPrefix(k, "FNBRIDGE_") {
					t.Fatalf("accepted env name %q", k)
				}
			}
			if h.Timeout <= 0 || h.Timeout.Std() > bridge.MaxTimeout {
				t.Fatalf("accepted timeout %v", h.Timeout.Std())
			}
			if h.Concurrency < 1 || h.Concurrency > bridge.MaxConcurrency || h.MinWarm < 0 || h.MinWarm > h.Concurrency {
				t.Fatalf("accepted concurrency %d / min_warm %d", h.Concurrency, h.MinWarm)
			}
			if h.IdleTimeout.Std() < 1e9 || h.LeaseTimeout <= 0 || h.InactivityTimeout < 0 || h.AbortTimeout < 0 {
				t.Fatalf("accepted idle %v lease %v inactivity %v abort %v", h.IdleTimeout.Std(), h.LeaseTimeout.Std(), h.InactivityTimeout.Std(), h.AbortTimeout.Std())
			}
			if h.InputContentType == "" || h.OutputContentType == "" {
				t.Fatal("content types not defaulted")
			}
			if rp := h.RetryPolicy; rp != nil {
				if rp.InitialInterval < 0 || rp.MaxInterval < 0 || rp.MaxAttempts != nil && *rp.MaxAttempts < 1 ||
					(rp.ExponentiationFactor != nil && !(*rp.ExponentiationFactor >= 1)) ||
					(rp.OnMaxAttempts != "" && rp.OnMaxAttempts != "pause" && rp.OnMaxAttempts != "kill") {
					t.Fatalf("accepted retry policy %+v", *rp)
				}
			}
		}
	}
}

// FuzzParseConfig: arbitrary bytes never panic the loader, and whatever it
// accepts is valid by the configuration rules (checkAccepted). A rejection
// must be an error that names something.
func FuzzParseConfig(f *testing.F) {
	base := fuzzBase(f)
	f.Add([]byte("services:\n  - name: Greeter\n    handlers:\n      - {name: greet, runtime: python, dir: functions, handler: greeter.greet}\n"))
	f.Add([]byte("listen: 127.0.0.1:9080\nprotocol_mode: request_response\nshutdown_timeout: 5s\nservices:\n  - name: Shell\n    handlers:\n      - name: respond\n        runtime: bash\n        dir: functions\n        handler: shell.respond\n        env: {A: b}\n        timeout: 15m\n        concurrency: 256\n        min_warm: 256\n        retry_policy: {initial_interval: 1s, exponentiation_factor: 1, on_max_attempts: kill}\n"))
	f.Add([]byte("services: []\n"))
	f.Add([]byte("services:\n  - name: A\n    handlers:\n      - {name: h, runtime: bash, dir: /, handler: ../x.f, env: {FNBRIDGE_X: y}}\n"))
	f.Add([]byte("{listen: ':0', identity_keys: [publickeyv1_x], runtimes: {python: unix:///tmp/s}, services: [{name: S, handlers: [{name: h, runtime: python, dir: functions, handler: greeter.greet, timeout: -1s}]}]}"))
	f.Add([]byte("services:\n  - &a {name: A, handlers: [{name: h, runtime: python, dir: functions, handler: greeter.greet}]}\n  - *a\n"))
	f.Add([]byte("python: {interpreter: venv/bin/python}\nservices:\n  - name: A\n    handlers:\n      - {name: h, runtime: python, dir: functions, handler: greeter.greet, python: {interpreter: python3.12}}\n      - {name: s, runtime: bash, dir: functions, handler: shell.respond, python: {interpreter: sh}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := bridge.ParseConfig(data, base)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("rejection without a message")
			}
			return
		}
		checkAccepted(t, c, base)
	})
}

// FuzzConfigHandlerString fuzzes the handler string (and an env name) of
// an otherwise valid handler: the configuration's validation must never
// accept a handler string the runtime's adapter would refuse, nor one that
// names a path or carries shell syntax.
func FuzzConfigHandlerString(f *testing.F) {
	base := fuzzBase(f)
	for _, s := range []string{"greeter.greet", "shell.respond", "../greeter.greet", "/etc/passwd.x", "shell.$(id)", "shell.f;id", "a b.c",
		"pkg.sub.mod.fn", "-x.f", "x.f\n", "é.f", "1x.f", "x..f", ".f", "f."} {
		f.Add(strings.HasPrefix(s, "shell") || strings.Contains(s, "$"), s, "NAME")
	}
	f.Add(true, "shell.respond", "FNBRIDGE_OUTPUTS")
	f.Add(false, "greeter.greet", "A=B")
	f.Fuzz(func(t *testing.T, isBash bool, handler, envName string) {
		runtime := "python"
		if isBash {
			runtime = "bash"
		}
		h, _ := json.Marshal(handler)
		e, _ := json.Marshal(envName)
		yaml := fmt.Sprintf("services:\n  - name: S\n    handlers:\n      - {name: h, runtime: %s, dir: functions, handler: %s, env: {%s: v}}\n", runtime, h, e)
		c, err := bridge.ParseConfig([]byte(yaml), base)
		if err != nil {
			return
		}
		checkAccepted(t, c, base)
		got := c.Services[0].Handlers[0].Handler
		if got != handler {
			t.Fatalf("handler %q came back as %q", handler, got)
		}
		if strings.ContainsAny(got, "/ \t\n$`;&|<>(){}[]*?!~'\"\\#") || strings.Contains(got, "..") {
			t.Fatalf("accepted handler %q with a path or shell syntax", got)
		}
	})
}
