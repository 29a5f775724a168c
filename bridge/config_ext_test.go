package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/internal/testtool"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "functions"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "functions", "greeter.py"), []byte("def greet(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "functions", "notafile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const validConfig = `
listen: 127.0.0.1:9080
protocol_mode: bidi
services:
  - name: Greeter
    handlers:
      - name: greet
        runtime: python
        dir: functions
        handler: greeter.greet
        env: {GREETING: Hello}
        timeout: 10s
        idle_timeout: 5m
        concurrency: 4
`

// "Paths are relative to the config file": dir resolves against the file's
// directory, and omitted fields take their documented defaults.
func TestLoadConfigResolvesPathsAndDefaults(t *testing.T) {
	path := writeConfig(t, validConfig)
	cfg, err := bridge.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Services[0].Handlers[0]
	if want := filepath.Join(filepath.Dir(path), "functions"); h.Dir != want {
		t.Errorf("dir = %q, want %q", h.Dir, want)
	}
	if h.Timeout.Std() != 10*time.Second || h.Concurrency != 4 {
		t.Errorf("timeout/concurrency = %s/%d", h.Timeout.Std(), h.Concurrency)
	}
	if h.LeaseTimeout.Std() != bridge.DefaultLeaseTimeout {
		t.Errorf("lease_timeout default = %s", h.LeaseTimeout.Std())
	}
	if cfg.ShutdownTimeout.Std() != bridge.DefaultShutdownTimeout {
		t.Errorf("shutdown_timeout default = %s", cfg.ShutdownTimeout.Std())
	}
}

// "Invalid config fails at start with an error naming the field path and
// what is allowed."
func TestLoadConfigRejectsInvalidNamingFieldPath(t *testing.T) {
	cases := []struct {
		name, from, to string
		want           []string
	}{
		{"unknown runtime", "runtime: python", "runtime: ruby", []string{"services[0].handlers[0].runtime", `"ruby" is not allowed (python | bash)`}},
		{"missing runtime", "        runtime: python\n", "", []string{"services[0].handlers[0].runtime", "missing (python | bash)"}},
		{"unknown runtime kind for a remote address", "protocol_mode: bidi", "protocol_mode: bidi\nruntimes: {ruby: 127.0.0.1:9090}",
			[]string{"runtimes.ruby", "unknown runtime kind (python | bash)"}},
		{"bad remote runtime address", "protocol_mode: bidi", "protocol_mode: bidi\nruntimes: {bash: nine}",
			[]string{"runtimes.bash", `"nine" is neither host:port nor unix:///path`}},
		{"bad bash handler", "runtime: python\n        dir: functions\n        handler: greeter.greet", "runtime: bash\n        dir: functions\n        handler: ../h.f",
			[]string{"services[0].handlers[0].handler", `"../h.f" is not file.function (file.sh in dir; no paths, no shell characters)`}},
		{"bash handler over the adapter's length bound", "runtime: python\n        dir: functions\n        handler: greeter.greet", "runtime: bash\n        dir: functions\n        handler: h." + strings.Repeat("f", 200),
			[]string{"services[0].handlers[0].handler", "must be 1-128"}},
		{"bad protocol mode", "protocol_mode: bidi", "protocol_mode: grpc", []string{"protocol_mode", "bidi | request_response"}},
		{"missing dir", "dir: functions", "dir: nowhere", []string{"services[0].handlers[0].dir", "does not exist"}},
		{"a dir's trailing space shows", "dir: functions", `dir: "functions "`, []string{"services[0].handlers[0].dir", `/functions " does not exist`}},
		{"empty service name", "name: Greeter", `name: ""`, []string{"services[0].name", "missing: the Restate service name"}},
		{"dir is a file", "dir: functions", "dir: functions/notafile", []string{"services[0].handlers[0].dir", "is not a directory"}},
		{"bad python handler", "handler: greeter.greet", "handler: greet", []string{"services[0].handlers[0].handler", `"greet" is not module.function (python identifiers, module may be dotted)`}},
		{"path in handler", "handler: greeter.greet", "handler: ../x.greet", []string{"services[0].handlers[0].handler"}},
		// Well-formed but over the adapter's bound: the configuration must
		// not accept what the runtime would refuse at registration.
		{"python handler over the adapter's length bound", "handler: greeter.greet", "handler: greeter." + strings.Repeat("g", 300),
			[]string{"services[0].handlers[0].handler", "longer than 256"}},
		// Each part within its bound, the whole over the server's.
		{"bash handler over the server's length bound", "runtime: python\n        dir: functions\n        handler: greeter.greet", "runtime: bash\n        dir: functions\n        handler: " + strings.Repeat("h", 128) + "." + strings.Repeat("f", 128),
			[]string{"services[0].handlers[0].handler", "longer than 256"}},
		{"bad env name", "env: {GREETING: Hello}", "env: {1BAD: x}", []string{"services[0].handlers[0].env.1BAD", "not a valid environment variable name"}},
		{"reserved env name", "env: {GREETING: Hello}", "env: {FNBRIDGE_OUTPUTS: x}", []string{"services[0].handlers[0].env.FNBRIDGE_OUTPUTS", "reserved"}},
		{"concurrency range", "concurrency: 4", "concurrency: 100000", []string{"services[0].handlers[0].concurrency", "out of range"}},
		{"timeout over cap", "timeout: 10s", "timeout: 20h", []string{"services[0].handlers[0].timeout", "out of range"}},
		// The runtime would refuse every registration of it (paused invocations).
		{"idle_timeout over the runtime's bound", "idle_timeout: 5m", "idle_timeout: 200h", []string{"services[0].handlers[0].idle_timeout: 200h is too long (at most 168h, the runtime's bound)"}},
		{"bad duration", "timeout: 10s", "timeout: soon", []string{"not a duration"}},
		{"unknown field", "concurrency: 4", "concurrency: 4\n        colour: red", []string{`services[0].handlers[0]: unknown field "colour" (known here: name, `}},
		{"env that changes how bash starts", "env: {GREETING: Hello}", "env: {BASH_ENV: /tmp/evil.sh}", []string{"services[0].handlers[0].env.BASH_ENV", "changes how the interpreter or the dynamic loader starts"}},
		{"env that changes how the loader starts", "env: {GREETING: Hello}", "env: {LD_LIBRARY_PATH: /tmp}", []string{"services[0].handlers[0].env.LD_LIBRARY_PATH", "changes how"}},
		{"bad service name", "name: Greeter", "name: Greeter-Service", []string{"services[0].name", "not a valid service name"}},
		// What restate-server's discovery refuses is refused here, naming
		// the field in the file's words, with every other problem.
		{"service name _", "name: Greeter", "name: _", []string{"services[0].name", `"_" is not a valid service name (letters, digits and _, starting with a letter, or with _ and a letter or digit)`}},
		{"service name __x", "name: Greeter", "name: __x", []string{"services[0].name", "not a valid service name"}},
		// restate-server refuses these at registration (META0005).
		{"service name restate_Foo", "name: Greeter", "name: restate_Foo", []string{"services[0].name", `"restate_Foo" is reserved by Restate`}},
		{"service name RestateX", "name: Greeter", "name: RestateX", []string{"services[0].name", `starts with "restate" (in any case)`}},
		{"service name OpenAPI", "name: Greeter", "name: OpenAPI", []string{"services[0].name", `or is "openapi"`}},
		{"sub-millisecond abort_timeout", "concurrency: 4", "concurrency: 4\n        abort_timeout: 1500us", []string{"services[0].handlers[0].abort_timeout: 1.5ms is not a whole number of milliseconds"}},
		{"sub-millisecond inactivity_timeout", "concurrency: 4", "concurrency: 4\n        inactivity_timeout: 60000500us", []string{"services[0].handlers[0].inactivity_timeout: 1m0.0005s is not a whole number of milliseconds"}},
		{"sub-millisecond retry interval", "concurrency: 4", "concurrency: 4\n        retry_policy: {initial_interval: 1500us}", []string{"services[0].handlers[0].retry_policy.initial_interval: 1.5ms is not a whole number of milliseconds"}},
		{"max_interval below initial_interval", "concurrency: 4", "concurrency: 4\n        retry_policy: {initial_interval: 10s, max_interval: 1ms}", []string{"services[0].handlers[0].retry_policy.max_interval: 1ms is less than initial_interval 10s"}},
		{"input content type that is no media type", "concurrency: 4", "concurrency: 4\n        input_content_type: not a type", []string{"services[0].handlers[0].input_content_type", `"not a type": not a media type`}},
		// The Python adapter decodes JSON only: every invocation would fail.
		{"python handler with a non-JSON input type", "concurrency: 4", "concurrency: 4\n        input_content_type: text/plain", []string{"services[0].handlers[0].input_content_type", `"text/plain": a python handler takes JSON input (application/json, or a type ending in +json)`}},
		{"python handler with an input pattern", "concurrency: 4", "concurrency: 4\n        input_content_type: '*/*'", []string{"services[0].handlers[0].input_content_type", `"*/*": a python handler takes JSON input`}},
		{"output content type that is a pattern", "concurrency: 4", "concurrency: 4\n        output_content_type: text/*", []string{"services[0].handlers[0].output_content_type", "one type, not a pattern"}},
		{"relative unix socket of a runtime", "protocol_mode: bidi", "protocol_mode: bidi\nruntimes: {python: unix://../rel.sock}", []string{"runtimes.python", "a unix socket's path must be absolute"}},
		{"listen port out of range", "listen: 127.0.0.1:9080", "listen: 127.0.0.1:99999", []string{"listen", `port "99999" is not a number from 0 to 65535`}},
		{"metrics_listen port out of range", "protocol_mode: bidi", "protocol_mode: bidi\nmetrics_listen: 127.0.0.1:99999", []string{"metrics_listen", `port "99999"`}},
		{"otlp endpoint port out of range", "protocol_mode: bidi", "protocol_mode: bidi\ntracing: {otlp_endpoint: 'http://127.0.0.1:99999'}", []string{"tracing.otlp_endpoint", `port "99999"`}},
		{"lease_timeout past any sense", "concurrency: 4", "concurrency: 4\n        lease_timeout: 2562047h47m", []string{"services[0].handlers[0].lease_timeout", "out of range (0 < lease_timeout <= 15m)"}},
		{"bad listen", "listen: 127.0.0.1:9080", "listen: nine", []string{"listen", "host:port"}},
		{"negative start_timeout", "protocol_mode: bidi", "protocol_mode: bidi\nstart_timeout: -1s", []string{"start_timeout: -1s is negative (0: the default of 30s)"}},
		{"negative max_concurrent_invocations", "protocol_mode: bidi", "protocol_mode: bidi\nmax_concurrent_invocations: -2", []string{"max_concurrent_invocations: -2 is negative (0: the default of 10000)"}},
		{"negative max_journal_bytes", "protocol_mode: bidi", "protocol_mode: bidi\nmax_journal_bytes: -64Ki", []string{"max_journal_bytes: -65536 is negative"}},
		{"max_journal_bytes that is not a size", "protocol_mode: bidi", "protocol_mode: bidi\nmax_journal_bytes: lots", []string{`"lots" is not a size (want e.g. 65536, 64Ki, 128Mi)`}},
		{"start_timeout that is not a duration", "protocol_mode: bidi", "protocol_mode: bidi\nstart_timeout: soon", []string{`"soon" is not a duration`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(validConfig, tc.from, tc.to, 1)
			if body == validConfig {
				t.Fatalf("case did not change the config")
			}
			_, err := bridge.LoadConfig(writeConfig(t, body))
			if err == nil {
				t.Fatal("invalid config accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadConfigEmptyFile(t *testing.T) {
	_, err := bridge.LoadConfig(writeConfig(t, ""))
	if err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("err = %v, want a clear 'empty' error", err)
	}
}

// Every problem is reported at once, so a user fixes the file in one pass.
func TestLoadConfigReportsAllProblems(t *testing.T) {
	body := strings.NewReplacer("runtime: python", "runtime: ruby", "concurrency: 4", "concurrency: -1").Replace(validConfig)
	_, err := bridge.LoadConfig(writeConfig(t, body))
	if err == nil || !strings.Contains(err.Error(), ".runtime") || !strings.Contains(err.Error(), ".concurrency") {
		t.Fatalf("err = %v, want both runtime and concurrency named", err)
	}
}

// The endpoint bounds: left out they stay zero (restate's defaults apply);
// set, they hold what the file says, sizes with or without a unit.
func TestLoadConfigEndpointBounds(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, validConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StartTimeout != 0 || cfg.MaxConcurrentInvocations != 0 || cfg.MaxJournalBytes != 0 {
		t.Errorf("defaults = %s/%d/%d, want zeros (restate's defaults)", cfg.StartTimeout.Std(), cfg.MaxConcurrentInvocations, cfg.MaxJournalBytes)
	}
	for _, tc := range []struct {
		yaml string
		want bridge.ByteSize
	}{{"64Ki", 64 << 10}, {"65536", 65536}, {"128Mi", 128 << 20}, {"1M", 1e6}} {
		body := "start_timeout: 1s\nmax_concurrent_invocations: 2\nmax_journal_bytes: " + tc.yaml + "\n" + validConfig
		cfg, err := bridge.LoadConfig(writeConfig(t, body))
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		if cfg.StartTimeout.Std() != time.Second || cfg.MaxConcurrentInvocations != 2 || cfg.MaxJournalBytes != tc.want {
			t.Errorf("%s: got %s/%d/%d, want 1s/2/%d", tc.yaml, cfg.StartTimeout.Std(), cfg.MaxConcurrentInvocations, cfg.MaxJournalBytes, tc.want)
		}
	}
}

// The bounds reach the endpoint bridge.New builds: with
// max_concurrent_invocations 1 a second stream is refused with 503 while
// the first runs, and a stream that sends nothing is ended after
// start_timeout.
func TestEndpointBoundsReachTheEndpoint(t *testing.T) {
	// A start_timeout this test waits out stays on the second endpoint: on
	// a loaded host the admitted stream's Start could come later than it.
	h := newHarness(t, "max_concurrent_invocations: 1\n")
	inInvoke, release := make(chan struct{}), make(chan struct{})
	h.fake.setInvoke(func(_ context.Context, r *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		close(inInvoke)
		<-release
		return &executorv1.InvokeFunctionResponse{Registration: r.Registration, InvocationId: r.InvocationId,
			Output: r.Input, ContentType: "application/json"}, nil
	})
	client := restatetest.NewH2CClient()
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := restatetest.InvokeURL(h.url, "Svc", "fn")

	first := restatetest.Open(ctx, client, url, 6)
	defer first.Close()
	played := make(chan error, 1)
	go func() {
		got, err := first.Play([]any{restatetest.Start("inv_first", 1), restatetest.Input([]byte(`1`))}, nil)
		if err == nil && got[len(got)-1].Type() != wire.EndMessageType {
			err = fmt.Errorf("frames %v", got)
		}
		played <- err
	}()
	select {
	case <-inInvoke:
	case err := <-played:
		t.Fatalf("the first stream ended before its function ran: %v", err)
	}
	second := restatetest.Open(ctx, client, url, 6)
	defer second.Close()
	resp, err := second.Response()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second stream: HTTP %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(release)
	if err := <-played; err != nil {
		t.Fatalf("the admitted stream: %v", err)
	}

	// A stream's slot is freed as its handler returns, just after the
	// client read End: the start timeout is checked on an endpoint of its
	// own rather than racing that.
	h2 := newHarness(t, "start_timeout: 300ms\n")
	idle := restatetest.Open(ctx, client, restatetest.InvokeURL(h2.url, "Svc", "fn"), 6)
	defer idle.Close()
	start := time.Now()
	f, err := idle.Next()
	if err != nil {
		t.Fatal(err)
	}
	e := errorOf(t, []restatetest.Frame{f})
	if e.GetCode() != 571 || !strings.Contains(e.GetMessage(), "timed out after 300ms waiting for the StartMessage") {
		t.Errorf("idle stream ended with %d %q, want 571 after the 300ms start timeout", e.GetCode(), e.GetMessage())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the start timeout took %s", d)
	}
}

// An OTLP endpoint with credentials in it is refused without printing
// them: the error goes to the terminal and, under bridge dev, the log.
func TestLoadConfigHidesEndpointCredentials(t *testing.T) {
	_, err := bridge.LoadConfig(writeConfig(t, "tracing: {otlp_endpoint: 'http://user:s3cret@127.0.0.1:4318'}\n"+validConfig))
	if err == nil || !strings.Contains(err.Error(), "tracing.otlp_endpoint") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v, want a refusal of tracing.otlp_endpoint without the password", err)
	}
}

// What net.Listen takes is taken: a service name as the port, or none
// (any free port).
func TestLoadConfigListenFormsNetTakes(t *testing.T) {
	for _, listen := range []string{"localhost:http", "127.0.0.1:", "127.0.0.1:0", "[::1]:9080"} {
		if _, err := bridge.LoadConfig(writeConfig(t, strings.Replace(validConfig, "listen: 127.0.0.1:9080", "listen: '"+listen+"'", 1))); err != nil {
			t.Errorf("listen %q: %v", listen, err)
		}
	}
}

// A handler whose code is not there (a typo in handler, code not
// deployed) is named at start with a warning, not first at its first
// invocation; the bridge still starts, for the handlers that are there.
func TestNewWarnsOfAHandlerWhoseCodeIsMissing(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, `
services:
  - name: Greeter
    handlers:
      - {name: greet, runtime: python, dir: functions, handler: greeter.greet}
      - {name: typo, runtime: python, dir: functions, handler: greeter.py.greet}
`))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	b, err := bridge.New(cfg, bridge.Options{Logger: zerolog.New(&logs), Clients: map[string]executorv1.FunctionRuntimeClient{"python": newFakeRuntime()}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	var warned []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, "the handler's code cannot be read") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `"handler":"typo"`) || !strings.Contains(warned[0], `the .py is implied, write \"greeter.greet\"`) {
		t.Fatalf("warnings %q, want one for typo with the hint", warned)
	}

	// A one-off run (bridge invoke) speaks only of the handler it runs.
	cfg.ForOneOffRun("Greeter", "greet")
	logs.Reset()
	one, err := bridge.New(cfg, bridge.Options{Logger: zerolog.New(&logs), Clients: map[string]executorv1.FunctionRuntimeClient{"python": newFakeRuntime()}})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close(context.Background())
	if strings.Contains(logs.String(), "the handler's code cannot be read") {
		t.Errorf("a one-off run of Greeter/greet warned of another handler:\n%s", logs.String())
	}
}

// An interpreter an embedded runtime cannot start (a venv's python that is
// gone, a python.interpreter that is not there) is a warning at start
// too, naming the handler; a handler whose interpreter is there is not.
func TestNewWarnsOfAHandlerWhoseInterpreterIsMissing(t *testing.T) {
	testtool.Require(t, "", "python3", "the default interpreter")
	cfg, err := bridge.LoadConfig(writeConfig(t, `
services:
  - name: Greeter
    handlers:
      - {name: greet, runtime: python, dir: functions, handler: greeter.greet}
      - {name: gone, runtime: python, dir: functions, handler: greeter.greet, python: {interpreter: venv-gone/bin/python}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	b, err := bridge.New(cfg, bridge.Options{Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	var warned []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, "the handler's interpreter cannot be started") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `"handler":"gone"`) || !strings.Contains(warned[0], "venv-gone/bin/python (python.interpreter) does not exist") {
		t.Fatalf("warnings %q, want one for gone naming its interpreter", warned)
	}
}

// A bridge built only to answer its manifest (`bridge manifest`) starts no
// runtime: nothing is invoked, so no FunctionRuntime server runs, logs its
// worker limits or shuts down.
func TestManifestOnlyBridgeStartsNoRuntime(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, validConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ForManifest()
	var logs bytes.Buffer
	b, err := bridge.New(cfg, bridge.Options{Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Manifest(); len(got.Services) != 1 {
		t.Errorf("manifest %+v, want the one service", got)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "function runtime server") {
		t.Errorf("a runtime started and stopped:\n%s", logs.String())
	}
}
