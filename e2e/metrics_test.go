package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/telemetry/telemetrytest"
	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// metricsOutcomes is every outcome label value, the README's list.
var metricsOutcomes = []string{"ok", "replayed", "terminal_failure", "retryable_failure", "cancelled", "suspended", "paused"}

// scrapeUntil scrapes url until every expectation holds (the counts of
// the attempts the test made), then returns that scrape; the test fails
// with the expectations that still differ. Expectations are "name
// label=value,label=value" → value.
func scrapeUntil(t *testing.T, url string, want map[string]float64) telemetrytest.Families {
	t.Helper()
	var f telemetrytest.Families
	testtool.Eventually(t, 15*time.Second, "the scrape shows every attempt", func() (bool, string) {
		var err error
		if f, err = telemetrytest.Scrape(url); err != nil {
			return false, err.Error()
		}
		var wrong []string
		for sel, v := range want {
			name, labels := parseSelector(sel)
			got, ok := f.Value(name, labels...)
			if !ok || got != v {
				wrong = append(wrong, fmt.Sprintf("%s = %v (found %v), want %v", sel, got, ok, v))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
	return f
}

// parseSelector splits "name a=b,c=d" into the name and label pairs.
func parseSelector(sel string) (string, []string) {
	name, rest, _ := strings.Cut(sel, " ")
	var labels []string
	if rest != "" {
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels = append(labels, k, v)
		}
	}
	return name, labels
}

// handlerOutcomes are the expectations of one handler's invocation counts: every
// outcome not in n is 0.
func handlerOutcomes(service, handler string, n map[string]float64) map[string]float64 {
	want := map[string]float64{}
	for _, o := range metricsOutcomes {
		want[fmt.Sprintf("fnbridge_invocations_total service=%s,handler=%s,outcome=%s", service, handler, o)] = n[o]
	}
	return want
}

func merge(ms ...map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// TestMetrics runs invocations of known outcomes through a real
// restate-server 1.7.12 into `bridge serve` with metrics_listen, and
// scrapes /metrics: each attempt is counted once under the outcome the
// README defines, only executions are timed, and the gauges say what the
// registrations are doing.
func TestMetrics(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{})

	t.Run("bidi: ok, terminal, retryable then ok, cancelled", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t, "greeter.py", "shell.sh", "refuse.py", "refuse.sh", "flaky.py")
		// hang.py marks calls.log too, which flaky.py counts: its own dir.
		hangDir := filepath.Join(ws.root, "hang")
		copyTestdata(t, "hang.py", filepath.Join(hangDir, "hang.py"))
		metrics := testtool.FreeAddr(t)
		cfg := ws.config(t, fmt.Sprintf(`metrics_listen: %s
services:
  - name: MGreeter
    handlers:
      - {name: greet, runtime: python, dir: fn, handler: greeter.greet, env: {GREETING: Hi}}
  - name: MShell
    handlers:
      - {name: respond, runtime: bash, dir: fn, handler: shell.respond}
  - name: MTerminal
    handlers:
      - {name: py, runtime: python, dir: fn, handler: refuse.refuse}
      - {name: sh, runtime: bash, dir: fn, handler: refuse.refuse}
  - name: MFlaky
    handlers:
      - name: flaky
        runtime: python
        dir: fn
        handler: flaky.flaky
        retry_policy: {initial_interval: 50ms, max_interval: 200ms}
  - name: MCancel
    handlers:
      - {name: hang, runtime: python, dir: hang, handler: hang.hang, timeout: 5m}
`, metrics))
		b := startBridge(t, cfg, testtool.FreeAddr(t))
		srv.Register(t, b.URI(), false)
		url := "http://" + metrics + "/metrics"

		// Before any invocation every handler's series exist at zero.
		before := scrapeUntil(t, url, merge(handlerOutcomes("MGreeter", "greet", nil), handlerOutcomes("MCancel", "hang", nil),
			map[string]float64{"fnbridge_registrations service=MGreeter,handler=greet,state=unregistered": 1}))
		if n := len(before.Labels("fnbridge_invocations_total")); n != 6*len(metricsOutcomes) {
			t.Errorf("%d invocation series, want 6 handlers x %d outcomes: %v", n, len(metricsOutcomes), before.Labels("fnbridge_invocations_total"))
		}

		ctx := caseContext(t)
		for i := range 3 {
			callOK(ctx, t, srv, "MGreeter", "greet", fmt.Sprintf(`{"name":"n%d"}`, i), nil)
		}
		for range 2 {
			callOK(ctx, t, srv, "MShell", "respond", `{"x":1}`, nil)
		}
		for _, h := range []string{"py", "sh"} {
			if status, body, err := srv.Call(ctx, "MTerminal", h, []byte(`{"order":"M-1"}`), nil); err != nil || status != 500 {
				t.Fatalf("MTerminal/%s: %d %s %v, want the terminal failure", h, status, body, err)
			}
		}
		callOK(ctx, t, srv, "MFlaky", "flaky", `{"order":"M-2"}`, nil) // fails twice, then succeeds
		id, err := srv.Send(ctx, "MCancel", "hang", []byte(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		testtool.Eventually(t, 30*time.Second, "the hanging function starts", func() (bool, string) {
			b, err := os.ReadFile(filepath.Join(hangDir, "calls.log"))
			return err == nil && len(b) > 0, fmt.Sprint(err)
		})
		// While it hangs its registration is busy and its stream in flight.
		scrapeUntil(t, url, map[string]float64{
			"fnbridge_registrations service=MCancel,handler=hang,state=busy": 1,
			"fnbridge_inflight_streams":                                      1,
		})
		if err := srv.CancelInvocation(ctx, id); err != nil {
			t.Fatal(err)
		}
		waitCompleted(t, srv, id, 30*time.Second)

		f := scrapeUntil(t, url, merge(
			handlerOutcomes("MGreeter", "greet", map[string]float64{"ok": 3}),
			handlerOutcomes("MShell", "respond", map[string]float64{"ok": 2}),
			handlerOutcomes("MTerminal", "py", map[string]float64{"terminal_failure": 1}),
			handlerOutcomes("MTerminal", "sh", map[string]float64{"terminal_failure": 1}),
			handlerOutcomes("MFlaky", "flaky", map[string]float64{"retryable_failure": 2, "ok": 1}),
			handlerOutcomes("MCancel", "hang", map[string]float64{"cancelled": 1}),
			map[string]float64{
				// Every execution is timed; each attempt too.
				"fnbridge_function_duration_seconds service=MGreeter,handler=greet": 3,
				"fnbridge_function_duration_seconds service=MFlaky,handler=flaky":   3,
				"fnbridge_function_duration_seconds service=MCancel,handler=hang":   1,
				"fnbridge_attempt_duration_seconds service=MFlaky,handler=flaky":    3,
				"fnbridge_lease_wait_seconds service=MGreeter,handler=greet":        3,
				// The retries replay the journaled run command; first
				// attempts replay nothing.
				"fnbridge_journal_replays_total service=MFlaky,handler=flaky":   2,
				"fnbridge_journal_replays_total service=MGreeter,handler=greet": 0,
				// One warm worker served all three greetings, and an
				// exception does not cost the worker.
				"fnbridge_worker_starts_total service=MGreeter,handler=greet":         1,
				"fnbridge_worker_starts_total service=MFlaky,handler=flaky":           1,
				"fnbridge_worker_start_failures_total service=MGreeter,handler=greet": 0,
				"fnbridge_worker_crashes_total service=MGreeter,handler=greet":        0,
				"fnbridge_lease_timeouts_total service=MGreeter,handler=greet":        0,
				"fnbridge_registrations service=MGreeter,handler=greet,state=idle":    1,
				"fnbridge_registrations service=MGreeter,handler=greet,state=busy":    0,
				"fnbridge_warm_workers service=MGreeter,handler=greet":                1,
				"fnbridge_inflight_streams":                                           0,
			}))
		version, _, _ := runBridge(t, 10*time.Second, "version")
		ver := strings.TrimSpace(strings.TrimPrefix(version, "fnbridge"))
		if v, ok := f.Value("fnbridge_build_info", "version", ver, "goversion", runtime.Version()); !ok || v != 1 {
			t.Errorf("fnbridge_build_info{version=%q} = %v (%v); series %v", ver, v, ok, f.Labels("fnbridge_build_info"))
		}
		// No label value comes from a request: the series are the
		// configuration's, whatever was invoked.
		if n := len(f.Labels("fnbridge_invocations_total")); n != 6*len(metricsOutcomes) {
			t.Errorf("%d invocation series after the invocations, want %d", n, 6*len(metricsOutcomes))
		}
	})

	// In request/response mode the one attempt runs the function and
	// answers with the run's proposal and the Output in the same
	// response: nothing is suspended or replayed.
	t.Run("request/response: one attempt", func(t *testing.T) {
		t.Parallel()
		ws := newWorkspace(t, "square.py")
		metrics := testtool.FreeAddr(t)
		cfg := ws.config(t, fmt.Sprintf(`protocol_mode: request_response
metrics_listen: %s
services:
  - name: MSquare
    handlers:
      - {name: square, runtime: python, dir: fn, handler: square.square}
`, metrics))
		b := startBridge(t, cfg, testtool.FreeAddr(t))
		srv.Register(t, b.URI(), false)
		out := callOK(caseContext(t), t, srv, "MSquare", "square", `{"n":6}`, nil)
		assertJSON(t, "output", out, `{"square":36}`)
		scrapeUntil(t, "http://"+metrics+"/metrics", merge(
			handlerOutcomes("MSquare", "square", map[string]float64{"ok": 1}),
			map[string]float64{
				"fnbridge_function_duration_seconds service=MSquare,handler=square": 1,
				"fnbridge_attempt_duration_seconds service=MSquare,handler=square":  1,
				"fnbridge_journal_replays_total service=MSquare,handler=square":     0,
			}))
		if n := len(ws.lines(t, "calls.log")); n != 1 {
			t.Errorf("%d executions, want 1", n)
		}
	})
}
