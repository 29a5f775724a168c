package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/sysmon"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// bridgeCase is one end-to-end rule, run against a group's shared server.
type bridgeCase struct {
	name string
	run  func(t *testing.T, env *bridgeEnv)
}

// bridgeGroup is a set of cases sharing one environment (a restate-server
// for one protocol version, or none for the CLI cases).
type bridgeGroup struct {
	name  string
	setup func(t *testing.T, env *bridgeEnv)
	cases []bridgeCase
}

// runBridgeGroups runs the groups in parallel, and each group's cases in
// parallel against its environment.
func runBridgeGroups(t *testing.T, groups []bridgeGroup) {
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			env := &bridgeEnv{}
			if g.setup != nil {
				g.setup(t, env)
			}
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, env)
				})
			}
		})
	}
}

// TestBridge runs the real `bridge serve` binary with real python3 and bash
// functions behind a real restate-server 1.7.12. Each group shares one server and registers one bridge per case
// under the case's own service names; the cases of a group run in parallel.
// The server groups skip (fail under CI=true) without RESTATE_SERVER_BIN;
// the CLI group needs no server.
func TestBridge(t *testing.T) {
	requireInterpreters(t)

	groups := []bridgeGroup{
		{
			name:  "protocol v6",
			setup: func(t *testing.T, env *bridgeEnv) { env.srv = restateserver.Start(t, restateserver.Options{}) },
			cases: []bridgeCase{
				{"a Python and a Bash function return their results", testFunctionsReturnResults(6)},
				{"an idempotency-key repeat returns the same result without executing again", testIdempotencyKey},
				{"a retryable failure is retried by Restate until it succeeds", testRetryableFailureRetried},
				{"retentions and ingress_private reach restate-server; a private handler is called by services only", testRetentionsAndPrivate},
				{"a terminal failure reaches the caller and is not retried", testTerminalFailure},
				{"a timeout fails retryably and kills the worker each time", testTimeoutRetried},
				{"cancelling an invocation kills the worker and ends it with 409 cancelled", testCancelKillsWorker},
				{"REQUEST_RESPONSE mode completes in one request", testRequestResponse(6)},
				{"a bridge crash after a journaled run replays the recorded result without executing again", testCrashReplays},
				{"a bridge with identity keys rejects an unsigned restate-server with 401", testUnsignedServerRejected},
				{"SIGTERM lets an in-flight invocation finish and exits 0", testGracefulShutdown},
				{"restate-server reaching the bridge over HTTP 1.1 (use_http_11) gets the same results", testHTTP11},
				{"invocations beyond concurrency are retried with 429 and each executes once", testBusyRetried},
				{"SIGTERM closes a stream still in flight at shutdown_timeout and Restate retries it", testShutdownDeadline},
				{"a second SIGTERM ends the drain at once and Restate retries the stream", testSecondSignal},
			},
		},
		{
			name: "protocol v7",
			setup: func(t *testing.T, env *bridgeEnv) {
				env.srv = restateserver.Start(t, restateserver.Options{EnableProtocolV7: true})
			},
			cases: []bridgeCase{
				{"a Python and a Bash function return their results", testFunctionsReturnResults(7)},
				{"REQUEST_RESPONSE mode completes in one request", testRequestResponse(7)},
				{"a terminal failure reaches the caller and is not retried", testTerminalFailure},
				{"cancelling an invocation kills the worker and ends it with 409 cancelled", testCancelKillsWorker},
				{"a bridge crash after a journaled run replays the recorded result without executing again", testCrashReplays},
			},
		},
		{
			name: "request identity",
			setup: func(t *testing.T, env *bridgeEnv) {
				pemPath, pub := writeIdentityKey(t)
				env.identityKey = pub
				env.srv = restateserver.Start(t, restateserver.Options{IdentityPrivateKeyPEM: pemPath})
			},
			cases: []bridgeCase{
				{"keys configured on both sides: signed requests are verified and served", testIdentityVerified},
			},
		},
		{
			name: "cli",
			cases: []bridgeCase{
				{"bridge invoke prints the output, fails clearly, and exits by what failed", testCLIInvoke},
				{"bridge manifest prints services, documentation and retry policy", testCLIManifest},
				{"an invalid config makes bridge serve exit non-zero naming the field, listening on nothing", testInvalidConfig},
				{"SIGHUP stops serve as SIGTERM does; a SIGKILLed bridge's directories go with the next start", testHangupAndLeftovers},
			},
		},
	}
	runBridgeGroups(t, groups)
}

// callTimeout bounds one case's calls through the ingress.
const callTimeout = 60 * time.Second

func caseContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// serveAndRegister starts `bridge serve` with the workspace's config on a
// free loopback port and registers it with the group's server.
func serveAndRegister(t *testing.T, env *bridgeEnv, configPath string, extra ...string) *bridgeServe {
	t.Helper()
	b := startBridge(t, configPath, testtool.FreeAddr(t), extra...)
	env.srv.Register(t, b.URI(), false)
	return b
}

// "handler returned | run completed with the value; output = handler
// output" (docs/ARCHITECTURE.md, error classes), for both runtimes, and "Protocol v6 and
// v7": the server pins the version it was meant to negotiate.
func testFunctionsReturnResults(version int) func(*testing.T, *bridgeEnv) {
	return func(t *testing.T, env *bridgeEnv) {
		ws := newWorkspace(t, "greeter.py", "shell.sh")
		py, sh := fmt.Sprintf("Greeter_v%d", version), fmt.Sprintf("Shell_v%d", version)
		cfg := ws.config(t, fmt.Sprintf(`services:
  - name: %s
    handlers:
      - {name: greet, runtime: python, dir: fn, handler: greeter.greet, env: {GREETING: Hello}, journal_retention: 1h}
  - name: %s
    handlers:
      - {name: respond, runtime: bash, dir: fn, handler: shell.respond, journal_retention: 1h}
`, py, sh))
		b := serveAndRegister(t, env, cfg)
		ctx := caseContext(t)

		// bridge serve re-executed itself once with the runtime's sysmon
		// setting (internal/sysmon): same pid, the setting in the
		// environment it started with.
		if environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", b.pid())); err != nil {
			t.Errorf("reading the bridge's environment: %v", err)
		} else if vars := strings.Split(string(environ), "\x00"); !slices.Contains(vars, "GODEBUG="+sysmon.Setting) {
			godebug := slices.DeleteFunc(vars, func(v string) bool { return !strings.HasPrefix(v, "GODEBUG=") })
			t.Errorf("bridge serve started with %q, want GODEBUG=%s", godebug, sysmon.Setting)
		}
		// ... and kept its name, as ps, top and pgrep show it.
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", b.pid())); err != nil || strings.TrimSpace(string(comm)) != filepath.Base(bridgeBin(t)) {
			t.Errorf("bridge serve's process name is %q (%v), want %q", comm, err, filepath.Base(bridgeBin(t)))
		}

		out := callOK(ctx, t, env.srv, py, "greet", `{"name":"you"}`, nil)
		assertJSON(t, "Python output", out, `{"greeting":"Hello, you","lang":"python"}`)
		// The payload is data, never shell source.
		payload := `{"msg":"hi $(touch pwned) ; rm -rf x"}`
		out = callOK(ctx, t, env.srv, sh, "respond", payload, nil)
		assertJSON(t, "Bash output", out, `{"input":`+payload+`,"lang":"bash"}`)
		if _, err := os.Stat(filepath.Join(ws.fn, "pwned")); err == nil {
			t.Error("the Bash payload was evaluated as shell source")
		}
		for _, marker := range []string{"calls_py.log", "calls_sh.log"} {
			if n := len(ws.lines(t, marker)); n != 1 {
				t.Errorf("%s: %d executions, want 1", marker, n)
			}
		}

		t.Run(fmt.Sprintf("the invocations run on service protocol v%d", version), func(t *testing.T) {
			for _, svc := range []string{py, sh} {
				rows := invocationRows(ctx, t, env.srv, svc, "id, status, pinned_service_protocol_version")
				if len(rows) != 1 {
					t.Fatalf("%s: %d invocations, want 1: %v", svc, len(rows), rows)
				}
				r := rows[0]
				if r["status"] != "completed" || r["pinned_service_protocol_version"] != float64(version) {
					t.Errorf("%s invocation %v: status %v on protocol v%v, want completed on v%d",
						svc, r["id"], r["status"], r["pinned_service_protocol_version"], version)
				}
			}
		})
		t.Run("the journal holds the run's completion before the output", func(t *testing.T) {
			for _, svc := range []string{py, sh} {
				assertRunJournaled(ctx, t, env.srv, svc)
			}
		})
	}
}

// assertRunJournaled checks the journal of service's one invocation:
// the run "invoke" and its completion, then the Output. The bridge sends
// the Output without waiting for the run's acknowledgement
// (restate.Context.RunLast); restate-server must still journal the
// completion first.
func assertRunJournaled(ctx context.Context, t *testing.T, srv *restateserver.Server, service string) {
	t.Helper()
	rows := invocationRows(ctx, t, srv, service, "id")
	if len(rows) != 1 {
		t.Fatalf("%s: %d invocations, want 1: %v", service, len(rows), rows)
	}
	got := journalEntries(ctx, t, srv, fmt.Sprint(rows[0]["id"]))
	want := []string{"Command: Input", "Command: Run invoke", "Notification: Run", "Command: Output"}
	if !slices.Equal(got, want) {
		t.Errorf("%s journal %q, want %q", service, got, want)
	}
}

// An idempotency-key repeat "returns the same result without executing
// again"; a different key is a new invocation (which proves the marker
// counts executions at all).
func testIdempotencyKey(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "once.py")
	cfg := ws.config(t, `services:
  - name: Idempotent
    handlers:
      - {name: once, runtime: python, dir: fn, handler: once.once}
`)
	serveAndRegister(t, env, cfg)
	ctx := caseContext(t)

	first := callOK(ctx, t, env.srv, "Idempotent", "once", `{"order":"A-1"}`, map[string]string{"idempotency-key": "order-A-1"})
	again := callOK(ctx, t, env.srv, "Idempotent", "once", `{"order":"A-1"}`, map[string]string{"idempotency-key": "order-A-1"})
	if string(again) != string(first) {
		t.Errorf("repeat with the same idempotency-key returned %s, first call %s", again, first)
	}
	if n := len(ws.lines(t, "calls.log")); n != 1 {
		t.Fatalf("%d executions after an idempotent repeat, want 1", n)
	}
	other := callOK(ctx, t, env.srv, "Idempotent", "once", `{"order":"A-1"}`, map[string]string{"idempotency-key": "order-A-1-bis"})
	if string(other) == string(first) {
		t.Errorf("a new idempotency-key returned the first result %s", other)
	}
	if n := len(ws.lines(t, "calls.log")); n != 2 {
		t.Errorf("%d executions after a call with a new key, want 2", n)
	}
}

// "handler failed otherwise … ErrorMessage (500): Restate retries with its
// policy": a handler failing twice then succeeding runs exactly 3 times and
// the caller gets the success. The handler's retry_policy flows into the
// manifest and restate-server accepts it (its registration answer shows it).
func testRetryableFailureRetried(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "flaky.py")
	cfg := ws.config(t, `services:
  - name: Flaky
    handlers:
      - name: flaky
        runtime: python
        dir: fn
        handler: flaky.flaky
        retry_policy:
          initial_interval: 100ms
          max_interval: 500ms
          exponentiation_factor: 2
          max_attempts: 10
          on_max_attempts: kill
`)
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	answer := env.srv.Register(t, b.URI(), false)
	var reg struct {
		Services []struct {
			Name     string `json:"name"`
			Handlers []struct {
				Name        string         `json:"name"`
				RetryPolicy map[string]any `json:"retry_policy"`
			} `json:"handlers"`
		} `json:"services"`
	}
	if err := json.Unmarshal(answer, &reg); err != nil || len(reg.Services) != 1 || len(reg.Services[0].Handlers) != 1 {
		t.Fatalf("registration answer %s: %v", answer, err)
	}
	rp := reg.Services[0].Handlers[0].RetryPolicy
	want := map[string]any{"initial_interval": "100ms", "max_interval": "500ms", "exponentiation_factor": 2.0, "max_attempts": 10.0, "on_max_attempts": "Kill"}
	for k, v := range want {
		if rp[k] != v {
			t.Errorf("restate-server's retry_policy.%s = %v, want %v (from bridge.yaml via the manifest); all: %v", k, rp[k], v, rp)
		}
	}

	ctx := caseContext(t)
	out := callOK(ctx, t, env.srv, "Flaky", "flaky", `{"order":"B-2"}`, nil)
	assertJSON(t, "output after two retryable failures", out, `{"order":"B-2","attempt":3}`)
	if n := len(ws.lines(t, "calls.log")); n != 3 {
		t.Errorf("%d executions, want exactly 3 (two failures, one success)", n)
	}
}

// journal_retention, idempotency_retention, workflow_completion_retention
// and ingress_private flow from bridge.yaml through the manifest into
// restate-server (its registration answer shows them), and an
// ingress-private handler is refused at the ingress while another service
// still calls it (fnbridge.call from a steps function).
func testRetentionsAndPrivate(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws.fn, "private.py"), `import fnbridge

def hidden(x):
    return {"hidden": x}

def front(x):
    return fnbridge.call("Private", "hidden", x)

def run(x):
    return {"done": x}
`)
	cfg := ws.config(t, `services:
  - name: Private
    handlers:
      - {name: hidden, runtime: python, dir: fn, handler: private.hidden, ingress_private: true,
         journal_retention: 2h, idempotency_retention: 30m}
  - name: Front
    handlers:
      - {name: front, runtime: python, dir: fn, handler: private.front, durability: steps}
  - name: Done
    type: workflow
    handlers:
      - {name: run, runtime: python, dir: fn, handler: private.run, workflow_completion_retention: 48h}
`)
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	answer := env.srv.Register(t, b.URI(), false)
	var reg struct {
		Services []struct {
			Name                        string           `json:"name"`
			WorkflowCompletionRetention any              `json:"workflow_completion_retention"`
			Handlers                    []map[string]any `json:"handlers"`
		} `json:"services"`
	}
	if err := json.Unmarshal(answer, &reg); err != nil {
		t.Fatalf("registration answer %s: %v", answer, err)
	}
	for _, s := range reg.Services {
		// restate-server shows a workflow's completion retention on the
		// service: its run handler's is the workflow's.
		if s.Name == "Done" && s.WorkflowCompletionRetention != "2d" {
			t.Errorf("restate-server's Done workflow_completion_retention = %v, want 2d (the run handler's, from bridge.yaml)", s.WorkflowCompletionRetention)
		}
	}
	got := map[string]map[string]any{}
	for _, s := range reg.Services {
		for _, h := range s.Handlers {
			got[s.Name+"/"+fmt.Sprint(h["name"])] = h
		}
	}
	for _, c := range []struct {
		handler, field string
		want           any
	}{
		{"Private/hidden", "journal_retention", "2h"},
		{"Private/hidden", "idempotency_retention", "30m"},
		{"Private/hidden", "public", false},
		{"Front/front", "public", true},
	} {
		if v := got[c.handler][c.field]; v != c.want {
			t.Errorf("restate-server's %s %s = %v, want %v (from bridge.yaml via the manifest); the handler: %v", c.handler, c.field, v, c.want, got[c.handler])
		}
	}

	ctx := caseContext(t)
	status, out, err := env.srv.Call(ctx, "Private", "hidden", []byte(`{"n":1}`), nil)
	if err != nil || status < 400 || status >= 500 {
		t.Errorf("the ingress called the private handler: %d %s %v, want it refused (4xx)", status, out, err)
	}
	out = callOK(ctx, t, env.srv, "Front", "front", `{"n":2}`, nil)
	assertJSON(t, "a service calling the private handler", out, `{"hidden":{"n":2}}`)
}

// "handler signalled a terminal failure | run completed with a failure;
// invocation ends with that failure, no retry": Python's
// fnbridge.TerminalError and Bash's exit 100 reach the caller, and the
// invocation is completed (not backing off) after one execution. A
// TerminalError's own code, and Bash's fnbridge fail --code, is the caller's status.
func testTerminalFailure(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "refuse.py", "refuse.sh")
	cfg := ws.config(t, `services:
  - name: TerminalPy
    handlers:
      - {name: refuse, runtime: python, dir: fn, handler: refuse.refuse, retry_policy: {initial_interval: 100ms}}
  - name: TerminalPyCode
    handlers:
      - {name: refuse, runtime: python, dir: fn, handler: refuse.refuse_code, retry_policy: {initial_interval: 100ms}}
  - name: TerminalSh
    handlers:
      - {name: refuse, runtime: bash, dir: fn, handler: refuse.refuse, retry_policy: {initial_interval: 100ms}}
  - name: TerminalShCode
    handlers:
      - {name: refuse, runtime: bash, dir: fn, handler: refuse.refuse_code, retry_policy: {initial_interval: 100ms}}
`)
	serveAndRegister(t, env, cfg)
	ctx := caseContext(t)
	for _, c := range []struct {
		svc, handler, marker, message string
		code                          int
	}{
		{"TerminalPy", "refuse", "calls_py.log", "order C-3 not found", http.StatusInternalServerError},
		{"TerminalPyCode", "refuse", "calls_code.log", "order C-3 is gone", http.StatusGone},
		{"TerminalSh", "refuse", "calls_sh.log", "order refused by bash", http.StatusInternalServerError},
		{"TerminalShCode", "refuse", "calls_sh_code.log", "order C-3 is gone (bash)", http.StatusGone},
	} {
		status, body, err := env.srv.Call(ctx, c.svc, c.handler, []byte(`{"order":"C-3"}`), nil)
		if err != nil {
			t.Fatalf("%s/%s: %v", c.svc, c.handler, err)
		}
		// The failure's message is the handler's own, as with a Restate
		// SDK's TerminalError: nothing of the bridge around it.
		var failure struct{ Message string }
		if status != c.code || json.Unmarshal(body, &failure) != nil || failure.Message != c.message {
			t.Errorf("%s/%s: caller got %d %s, want %d with the message %q", c.svc, c.handler, status, body, c.code, c.message)
		}
		rows := invocationRows(ctx, t, env.srv, c.svc, "id, status, completion_result, completion_failure")
		if len(rows) != 1 {
			t.Fatalf("%s: %d invocations, want 1", c.svc, len(rows))
		}
		r := rows[0]
		if r["status"] != "completed" || r["completion_result"] != "failure" ||
			!strings.Contains(fmt.Sprint(r["completion_failure"]), c.message) {
			t.Errorf("%s: invocation %v is %v/%v (%v), want completed with the terminal failure", c.svc, r["id"], r["status"], r["completion_result"], r["completion_failure"])
		}
		// A completed invocation never runs again, so one execution now is
		// one execution for good.
		if n := len(ws.lines(t, c.marker)); n != 1 {
			t.Errorf("%s: %d executions of a terminal failure, want 1", c.svc, n)
		}
	}
}

// "handler … timed out (DeadlineExceeded) | ErrorMessage (504): Restate
// retries": every attempt is cut at the handler's timeout, the worker is
// killed each time (a fresh PID per attempt, none left alive), and Restate
// records the 504 and its retries; max_attempts with on_max_attempts: kill
// ends the invocation with that failure.
func testTimeoutRetried(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "hang.py")
	cfg := ws.config(t, `services:
  - name: Timeout
    handlers:
      - name: hang
        runtime: python
        dir: fn
        handler: hang.hang
        timeout: 1s
        retry_policy: {initial_interval: 100ms, max_interval: 200ms, max_attempts: 3, on_max_attempts: kill}
`)
	serveAndRegister(t, env, cfg)
	ctx := caseContext(t)
	id, err := env.srv.Send(ctx, "Timeout", "hang", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Attempts are at least 1 s apart, so the retry is seen before the end.
	testtool.Eventually(t, 30*time.Second, "Restate records a retried 504", func() (bool, string) {
		r := invocationRow(ctx, t, env.srv, id, "status, retry_count, last_failure")
		if r["status"] == "completed" {
			t.Fatalf("invocation completed before a retry was observed: %v", r)
		}
		n, _ := r["retry_count"].(float64)
		return n >= 1 && strings.Contains(fmt.Sprint(r["last_failure"]), "[504]"), fmt.Sprint(r)
	})
	waitCompleted(t, env.srv, id, 30*time.Second)
	r := invocationRow(ctx, t, env.srv, id, "completion_result, completion_failure")
	if f := fmt.Sprint(r["completion_failure"]); r["completion_result"] != "failure" || !strings.Contains(f, "[504]") || !strings.Contains(f, "timed out") {
		t.Errorf("invocation ended %v: %v, want the 504 timeout failure", r["completion_result"], f)
	}
	pids := ws.pids(t, "calls.log")
	if len(pids) != 3 {
		t.Fatalf("%d executions %v, want 3 (max_attempts)", len(pids), pids)
	}
	seen := map[int]bool{}
	for _, pid := range pids {
		if seen[pid] {
			t.Errorf("PID %d ran two attempts: the timed-out worker was not replaced", pid)
		}
		seen[pid] = true
		waitDead(t, 10*time.Second, "the timed-out worker is killed", pid)
	}
}

// "Restate CANCEL signal | in-flight invoke cancelled (worker killed),
// invocation ends with a terminal 'cancelled' failure".
func testCancelKillsWorker(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "hang.py")
	cfg := ws.config(t, `services:
  - name: Cancel
    handlers:
      - {name: hang, runtime: python, dir: fn, handler: hang.hang, timeout: 5m}
`)
	serveAndRegister(t, env, cfg)
	ctx := caseContext(t)
	id, err := env.srv.Send(ctx, "Cancel", "hang", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, 30*time.Second, "the handler starts", func() (bool, string) {
		return len(ws.lines(t, "calls.log")) == 1, fmt.Sprint(ws.lines(t, "calls.log"))
	})
	pid := ws.pids(t, "calls.log")[0]
	if !procstat.Alive(pid) {
		t.Fatalf("worker %d is not running before the cancellation", pid)
	}
	if err := env.srv.CancelInvocation(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitDead(t, 15*time.Second, "the worker is killed", pid)
	waitCompleted(t, env.srv, id, 30*time.Second)
	r := invocationRow(ctx, t, env.srv, id, "completion_result, completion_failure")
	if f := fmt.Sprint(r["completion_failure"]); r["completion_result"] != "failure" || !strings.Contains(f, "409") || !strings.Contains(f, "cancelled") {
		t.Errorf("cancelled invocation ended %v: %v, want failure 409 cancelled", r["completion_result"], f)
	}
	if status, body := invocationOutput(t, env.srv, id, 10*time.Second); status != http.StatusConflict {
		t.Errorf("output of the cancelled invocation: %d %s, want 409", status, body)
	}
	if n := len(ws.lines(t, "calls.log")); n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
}

// REQUEST_RESPONSE: the runtime cannot answer the run's proposal within
// the request, and need not: the response carries the proposal and the
// Output, and restate-server journals both, in order. One attempt, one
// execution, no suspension and no replayed second request.
func testRequestResponse(version int) func(*testing.T, *bridgeEnv) {
	return func(t *testing.T, env *bridgeEnv) {
		ws := newWorkspace(t, "square.py")
		svc := fmt.Sprintf("RequestResponse_v%d", version)
		cfg := ws.config(t, fmt.Sprintf(`protocol_mode: request_response
services:
  - name: %s
    handlers:
      - {name: square, runtime: python, dir: fn, handler: square.square, journal_retention: 1h}
`, svc))
		b := serveAndRegister(t, env, cfg)
		ctx := caseContext(t)
		out := callOK(ctx, t, env.srv, svc, "square", `{"n":7}`, nil)
		assertJSON(t, "request/response output", out, `{"square":49}`)
		if n := len(ws.lines(t, "calls.log")); n != 1 {
			t.Errorf("%d executions, want exactly 1", n)
		}
		// The bridge logs each attempt's outcome: one, that ran the
		// function and answered.
		testtool.Eventually(t, 5*time.Second, "the bridge logs the attempt", func() (bool, string) {
			return strings.Contains(b.logs(), `"outcome":"ok"`), "no ok outcome yet"
		})
		for _, o := range []string{"replayed", "suspended"} {
			if strings.Contains(b.logs(), `"outcome":"`+o+`"`) {
				t.Errorf("an attempt logged %q; want the one attempt only", o)
			}
		}
		assertRunJournaled(ctx, t, env.srv, svc)
		rows := invocationRows(ctx, t, env.srv, svc, "pinned_service_protocol_version")
		if len(rows) != 1 || rows[0]["pinned_service_protocol_version"] != float64(version) {
			t.Errorf("invocation rows %v, want one on protocol v%d", rows, version)
		}
	}
}

// The crash test: "Only a run that was never completed durably may execute
// again". The bridge is killed (SIGKILL to its group) after the run's
// completion is journaled and before the invocation's output; a new bridge
// on the same port gets the retried invocation, replays the recorded result
// and does not execute the function again. No worker of the killed bridge
// survives it.
func testCrashReplays(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "work.py")
	cfg := ws.config(t, `services:
  - name: Crash
    handlers:
      - name: work
        runtime: python
        dir: fn
        handler: work.work
        retry_policy: {initial_interval: 100ms, max_interval: 500ms}
`)
	hold := filepath.Join(ws.root, "held-invocation")
	addr := testtool.FreeAddr(t)
	first := startBridge(t, cfg, addr, "--test-hold-after-run", hold)
	env.srv.Register(t, first.URI(), false)
	ctx := caseContext(t)
	id, err := env.srv.Send(ctx, "Crash", "work", []byte(`{"order":"D-4"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, 30*time.Second, "the bridge holds after the journaled run", func() (bool, string) {
		b, _ := os.ReadFile(hold)
		return strings.TrimSpace(string(b)) == id, string(b)
	})
	pids := ws.pids(t, "calls.log")
	if len(pids) != 1 {
		t.Fatalf("%d executions before the crash, want 1", len(pids))
	}
	worker := pids[0]

	first.kill()
	if !groupGone(first.group()) {
		t.Fatalf("the killed bridge's process group %d still has members", first.group())
	}
	waitDead(t, 10*time.Second, "the worker of the killed bridge dies (Pdeathsig)", worker)
	// The worker's guardian sees its lifeline close when the bridge dies and
	// then kills the whole worker group, itself included; that takes a moment
	// after the worker's own Pdeathsig, so wait for it rather than look once.
	testtool.Eventually(t, 10*time.Second, "no process of the killed bridge's workers survives", func() (bool, string) {
		procs := procsInDir(ws.fn)
		return len(procs) == 0, fmt.Sprint(procs)
	})

	second := startBridge(t, cfg, addr)
	status, body := invocationOutput(t, env.srv, id, 60*time.Second)
	if status != http.StatusOK {
		t.Fatalf("output after the restart: %d %s", status, body)
	}
	// The recorded result names the first (killed) worker: the value came
	// from the journal, not from a new execution.
	assertJSON(t, "replayed output", body, fmt.Sprintf(`{"order":"D-4","pid":%d}`, worker))
	if n := len(ws.lines(t, "calls.log")); n != 1 {
		t.Errorf("%d executions across the crash, want exactly 1", n)
	}
	if !strings.Contains(second.logs(), `"outcome":"replayed"`) {
		t.Errorf("the restarted bridge did not log a replayed invocation")
	}
}

// "identity_keys: when set, unsigned requests get 401": registration
// through a server that does not sign fails with the bridge's 401.
func testUnsignedServerRejected(t *testing.T, env *bridgeEnv) {
	_, pub := writeIdentityKey(t)
	ws := newWorkspace(t, "greeter.py")
	cfg := ws.config(t, fmt.Sprintf(`identity_keys: [%s]
services:
  - name: Guarded
    handlers:
      - {name: greet, runtime: python, dir: fn, handler: greeter.greet, env: {GREETING: Hi}}
`, pub))
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	body, err := env.srv.TryRegister(caseContext(t), b.URI(), false)
	var he *restateserver.HTTPError
	if !errors.As(err, &he) {
		t.Fatalf("registration through an unsigned server: %s, %v; want it refused", body, err)
	}
	if !strings.Contains(he.Body, "401") {
		t.Errorf("registration error does not carry the bridge's 401: %s", he.Body)
	}
	if !strings.Contains(b.logs(), "unsigned") {
		t.Errorf("the bridge did not log why it rejected the request")
	}
}

// Keys configured on both sides: the signing server registers and invokes.
func testIdentityVerified(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "greeter.py")
	cfg := ws.config(t, fmt.Sprintf(`identity_keys: [%s]
services:
  - name: Signed
    handlers:
      - {name: greet, runtime: python, dir: fn, handler: greeter.greet, env: {GREETING: Welcome}}
`, env.identityKey))
	b := serveAndRegister(t, env, cfg)
	out := callOK(caseContext(t), t, env.srv, "Signed", "greet", `{"name":"signer"}`, nil)
	assertJSON(t, "output", out, `{"greeting":"Welcome, signer","lang":"python"}`)
	if strings.Contains(b.logs(), "request identity") {
		t.Errorf("the bridge rejected a signed request:\n%s", b.logs())
	}
}

// "SIGTERM stops serve gracefully: it stops accepting, lets in-flight
// invocations finish …, exits 0" (README): an invocation in flight at
// SIGTERM completes with one successful result, the bridge exits 0 within
// shutdown_timeout, and no worker remains.
func testGracefulShutdown(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "slow.py")
	const shutdownTimeout = 10 * time.Second
	run := termInFlight(t, env, ws, "Graceful", "slow.slow", `{"job":"E-5"}`, shutdownTimeout)
	id, worker := run.id, run.first
	exited, ok := run.b.waitExit(shutdownTimeout + 10*time.Second)
	if !ok {
		t.Fatalf("bridge serve still running %s after SIGTERM", shutdownTimeout+10*time.Second)
	}
	took := exited.at.Sub(run.sent)
	if exited.err != nil {
		t.Errorf("bridge serve exited with %v after SIGTERM, want status 0", exited.err)
	}
	if took > shutdownTimeout {
		t.Errorf("bridge serve took %s to exit, over its shutdown_timeout %s", took, shutdownTimeout)
	}
	t.Logf("bridge serve exited %s after SIGTERM", took.Round(time.Millisecond))
	waitDead(t, 5*time.Second, "the worker is gone after shutdown", worker)
	// Shutdown SIGKILLs what is left of each worker group after its grace;
	// a killed process may take a moment to disappear from /proc.
	testtool.Eventually(t, 5*time.Second, "no process left behind after shutdown", func() (bool, string) {
		procs := procsInDir(ws.fn)
		return len(procs) == 0, fmt.Sprint(procs)
	})

	// The one-second invocation is well inside shutdown_timeout: the drain
	// let it finish on the worker it started on, before the exit, and no
	// bridge is started again, so a stream cut at SIGTERM (which Restate
	// could only retry on a new bridge) fails here rather than passing
	// through a retry. testShutdownDeadline covers the cut at the deadline.
	done := 0
	for _, l := range ws.lines(t, "calls.log") {
		if strings.HasPrefix(l, "done ") {
			done++
			if l != fmt.Sprintf("done %d", worker) {
				t.Errorf("calls.log has %q, want the in-flight worker %d's", l, worker)
			}
		}
	}
	if done != 1 {
		t.Fatalf("%d successful executions when the bridge exited, want exactly 1 (the in-flight one, finished during the drain): %q", done, ws.lines(t, "calls.log"))
	}
	status, body := invocationOutput(t, env.srv, id, 30*time.Second)
	if status != http.StatusOK {
		t.Fatalf("output: %d %s", status, body)
	}
	var res struct {
		Job string `json:"job"`
		PID int    `json:"pid"`
	}
	if err := json.Unmarshal(body, &res); err != nil || res.Job != "E-5" || res.PID != worker {
		t.Fatalf("output %s (%v), want the job's result from the in-flight worker %d", body, err, worker)
	}
}

// "… or closes their streams at the deadline, and Restate retries them"
// (README): an invocation longer than shutdown_timeout does not hold the
// exit up; its worker is killed, and the invocation completes on the next
// bridge with one successful execution.
func testShutdownDeadline(t *testing.T, env *bridgeEnv) {
	// The first execution outlives the deadline; the retry is quick.
	ws := newWorkspace(t, "slowfirst.py")
	const shutdownTimeout = time.Second
	run := termInFlight(t, env, ws, "Deadline", "slowfirst.slow", `{"job":"G-7"}`, shutdownTimeout)
	cfg, addr, ctx, id, first := run.cfg, run.addr, run.ctx, run.id, run.first
	// The deadline plus the time to kill the worker (TERM, then KILL after
	// the runtime's grace) and unregister.
	const slack = 5 * time.Second
	exited, ok := run.b.waitExit(shutdownTimeout + slack)
	if !ok {
		t.Fatalf("bridge serve still running %s after SIGTERM with shutdown_timeout %s", shutdownTimeout+slack, shutdownTimeout)
	}
	t.Logf("bridge serve exited %s after SIGTERM", exited.at.Sub(run.sent).Round(time.Millisecond))
	if exited.err != nil {
		t.Errorf("bridge serve exited with %v after SIGTERM, want status 0", exited.err)
	}
	waitDead(t, 5*time.Second, "the worker is killed at the deadline", first)
	if st, err := env.srv.InvocationStatus(ctx, id); err != nil || st == "completed" {
		t.Fatalf("invocation status after the cut: %q, %v; want it pending a retry", st, err)
	}

	startBridge(t, cfg, addr)
	status, body := invocationOutput(t, env.srv, id, 30*time.Second)
	if status != http.StatusOK {
		t.Fatalf("output after the restart: %d %s", status, body)
	}
	lines := ws.lines(t, "calls.log")
	if len(lines) != 3 || !strings.HasPrefix(lines[2], "done ") {
		t.Fatalf("executions %q, want the cut one and one successful retry", lines)
	}
	retry := ws.pids(t, "calls.log")[1]
	assertJSON(t, "output", body, fmt.Sprintf(`{"job":"G-7","pid":%d}`, retry))
}

// A second stop signal during the drain ends it at once, as daemons do
// (an operator's second Ctrl-C): the bridge exits 0 well before
// shutdown_timeout, kills the worker, and Restate retries the stream on
// the next bridge, where it completes once.
func testSecondSignal(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "slowfirst.py")
	const shutdownTimeout = 2 * time.Minute
	run := termInFlight(t, env, ws, "Twice", "slowfirst.slow", `{"job":"H-8"}`, shutdownTimeout)
	// The drain has begun (and the second signal is listened for) once
	// readiness answers 503.
	testtool.Eventually(t, 10*time.Second, "readiness answers 503 while draining", func() (bool, string) {
		st := healthStatus(run.addr, "/health/ready")
		return st == http.StatusServiceUnavailable, fmt.Sprintf("HTTP %d", st)
	})
	again := time.Now()
	run.b.signal(syscall.SIGTERM)
	exited, ok := run.b.waitExit(20 * time.Second)
	if !ok {
		t.Fatalf("bridge serve still running 20s after a second SIGTERM (shutdown_timeout %s)", shutdownTimeout)
	}
	t.Logf("bridge serve exited %s after the second SIGTERM", exited.at.Sub(again).Round(time.Millisecond))
	if exited.err != nil {
		t.Errorf("bridge serve exited with %v after a second SIGTERM, want status 0", exited.err)
	}
	waitDead(t, 5*time.Second, "the worker is killed", run.first)
	startBridge(t, run.cfg, run.addr)
	status, body := invocationOutput(t, env.srv, run.id, 30*time.Second)
	if status != http.StatusOK {
		t.Fatalf("output after the restart: %d %s", status, body)
	}
	if lines := ws.lines(t, "calls.log"); len(lines) != 3 || !strings.HasPrefix(lines[2], "done ") {
		t.Fatalf("executions %q, want the cut one and one successful retry", lines)
	}
}

// inFlightAtTerm is a bridge that got SIGTERM while an invocation of a
// slow handler (in ws) was running.
type inFlightAtTerm struct {
	b         *bridgeServe
	cfg, addr string
	ctx       context.Context
	id        string    // the Restate invocation id
	first     int       // PID of the worker running it
	sent      time.Time // when SIGTERM was sent
}

// termInFlight serves ws's handler (which logs "started PID" to calls.log)
// as service/slow with shutdown_timeout, sends it input, waits until the
// handler has started and SIGTERMs the bridge: the common start of the
// shutdown tests.
func termInFlight(t *testing.T, env *bridgeEnv, ws *fnWorkspace, service, handler, input string, shutdownTimeout time.Duration) inFlightAtTerm {
	t.Helper()
	cfg := ws.config(t, fmt.Sprintf(`shutdown_timeout: %s
services:
  - name: %s
    handlers:
      - name: slow
        runtime: python
        dir: fn
        handler: %s
        retry_policy: {initial_interval: 100ms, max_interval: 500ms}
`, shutdownTimeout, service, handler))
	addr := testtool.FreeAddr(t)
	b := startBridge(t, cfg, addr)
	env.srv.Register(t, b.URI(), false)
	ctx := caseContext(t)
	id, err := env.srv.Send(ctx, service, "slow", []byte(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, 30*time.Second, "the handler starts", func() (bool, string) {
		return len(ws.lines(t, "calls.log")) >= 1, "no start yet"
	})
	first := ws.pids(t, "calls.log")[0]
	sent := time.Now()
	b.signal(syscall.SIGTERM)
	return inFlightAtTerm{b: b, cfg: cfg, addr: addr, ctx: ctx, id: id, first: first, sent: sent}
}

// restate-server 1.7.12 "with use_http_11: true speaks HTTP/1.1 and, if the
// manifest says BIDI_STREAM, still streams full duplex over HTTP/1.1";
// `bridge serve` must serve that transport as well as h2c.
func testHTTP11(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "greeter.py", "shell.sh")
	cfg := ws.config(t, `services:
  - name: Http11
    handlers:
      - {name: greet, runtime: python, dir: fn, handler: greeter.greet, env: {GREETING: Hey}}
      - {name: respond, runtime: bash, dir: fn, handler: shell.respond}
`)
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	env.srv.Register(t, b.URI(), true)
	ctx := caseContext(t)
	out := callOK(ctx, t, env.srv, "Http11", "greet", `{"name":"h1"}`, nil)
	assertJSON(t, "Python output over HTTP/1.1", out, `{"greeting":"Hey, h1","lang":"python"}`)
	out = callOK(ctx, t, env.srv, "Http11", "respond", `"h1"`, nil)
	assertJSON(t, "Bash output over HTTP/1.1", out, `{"input":"h1","lang":"bash"}`)
	if n := len(ws.lines(t, "calls_py.log")) + len(ws.lines(t, "calls_sh.log")); n != 2 {
		t.Errorf("%d executions for 2 invocations", n)
	}
}

// "ResourceExhausted (registration busy) | ErrorMessage 429: retried": with
// one warm registration and a short lease_timeout, invocations that find it
// busy fail their attempt with 429 before the function is called, are
// retried by Restate, and every invocation executes exactly once.
func testBusyRetried(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "busy.py")
	cfg := ws.config(t, `services:
  - name: Busy
    handlers:
      - name: busy
        runtime: python
        dir: fn
        handler: busy.busy
        concurrency: 1
        lease_timeout: 100ms
        retry_policy: {initial_interval: 100ms, max_interval: 300ms}
`)
	serveAndRegister(t, env, cfg)
	ctx := caseContext(t)
	const n = 3
	ids := make([]string, n)
	for i := range ids {
		id, err := env.srv.Send(ctx, "Busy", "busy", []byte(fmt.Sprintf(`{"n":%d}`, i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	// While the first holds the only registration the others are refused.
	testtool.Eventually(t, 30*time.Second, "Restate records a 429 retry", func() (bool, string) {
		rows := invocationRows(ctx, t, env.srv, "Busy", "retry_count, last_failure")
		for _, r := range rows {
			if strings.Contains(fmt.Sprint(r["last_failure"]), "[429") {
				return true, ""
			}
		}
		return false, fmt.Sprint(rows)
	})
	writeFile(t, filepath.Join(ws.fn, "release"), "")
	for i, id := range ids {
		status, body := invocationOutput(t, env.srv, id, 30*time.Second)
		if status != http.StatusOK {
			t.Fatalf("invocation %d: %d %s", i, status, body)
		}
		assertJSON(t, fmt.Sprintf("output %d", i), body, fmt.Sprintf(`{"n":%d}`, i))
	}
	count := map[string]int{}
	for _, l := range ws.lines(t, "calls.log") {
		count[l]++
	}
	for i := range n {
		if c := count[strconv.Itoa(i)]; c != 1 {
			t.Errorf("invocation %d executed %d times, want exactly 1 (busy attempts must not run the function)", i, c)
		}
	}
}

// `bridge invoke --config FILE Service/handler 'JSON'`: "run one function
// once, locally, without Restate": the output on stdout, exit 0; a terminal
// failure is a clear message and exit 100, any other failure exit 1, and
// bad arguments exit 2 without running anything.
func testCLIInvoke(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "greeter.py", "shell.sh", "refuse.py")
	cfg := ws.config(t, `services:
  - name: Cli
    handlers:
      - {name: greet, runtime: python, dir: fn, handler: greeter.greet, env: {GREETING: Howdy}}
      - {name: respond, runtime: bash, dir: fn, handler: shell.respond}
      - {name: refuse, runtime: python, dir: fn, handler: refuse.refuse}
      - {name: plain, runtime: bash, dir: fn, handler: shell.respond, input_content_type: text/plain, output_content_type: text/plain}
`)
	stdout, stderr, code := runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Cli/greet", `{"name":"cli"}`)
	if code != 0 {
		t.Fatalf("bridge invoke Cli/greet: exit %d\n%s", code, stderr)
	}
	if !strings.HasSuffix(stdout, "\n") {
		t.Errorf("stdout %q does not end with a newline", stdout)
	}
	assertJSON(t, "bridge invoke Cli/greet stdout", []byte(stdout), `{"greeting":"Howdy, cli","lang":"python"}`)
	if !strings.Contains(stderr, "greeted=cli") {
		t.Errorf("stderr does not show the outputs (greeted=cli):\n%s", stderr)
	}

	stdout, stderr, code = runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Cli/respond", `[1,2]`)
	if code != 0 {
		t.Fatalf("bridge invoke Cli/respond: exit %d\n%s", code, stderr)
	}
	assertJSON(t, "bridge invoke Cli/respond stdout", []byte(stdout), `{"input":[1,2],"lang":"bash"}`)
	// A negative number is an input like any other, not a flag.
	stdout, stderr, code = runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Cli/respond", `-5`)
	if code != 0 {
		t.Fatalf("bridge invoke Cli/respond -5: exit %d\n%s", code, stderr)
	}
	assertJSON(t, "bridge invoke Cli/respond -5 stdout", []byte(stdout), `{"input":-5,"lang":"bash"}`)

	stdout, stderr, code = runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Cli/refuse", `{"order":"F-6"}`)
	if code == 0 {
		t.Fatalf("bridge invoke of a terminal failure exited 0 (stdout %q)", stdout)
	}
	if stdout != "" {
		t.Errorf("a failed invoke printed output %q", stdout)
	}
	last := lastLine(stderr)
	if !strings.Contains(last, "order F-6 not found") || !strings.Contains(last, "terminal") {
		t.Errorf("the failure's last stderr line %q does not say it is terminal and why", last)
	}
	if code != 100 {
		t.Errorf("a terminal failure exited %d, want 100", code)
	}

	// A failure Restate would retry (greet of a list: a TypeError).
	_, stderr, code = runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Cli/greet", `[1]`)
	if code != 1 || !strings.Contains(lastLine(stderr), "TypeError") {
		t.Errorf("a retryable failure: exit %d (want 1), last line %q", code, lastLine(stderr))
	}

	// The input from standard input.
	stdout, stderr, code = runWithInput(t, 60*time.Second, `{"name":"stdin"}`, bridgeBin(t), "invoke", "--config", cfg, "Cli/greet", "-")
	if code != 0 {
		t.Fatalf("bridge invoke Cli/greet -: exit %d\n%s", code, stderr)
	}
	assertJSON(t, "bridge invoke Cli/greet - stdout", []byte(stdout), `{"greeting":"Howdy, stdin","lang":"python"}`)

	// A handler whose input is not JSON gets the bytes as they are; without
	// an input argument, a function gets none, as from a caller posting no
	// body.
	for _, tc := range []struct{ args []string }{{[]string{"Cli/plain", "hello, {world"}}, {[]string{"Cli/plain"}}} {
		stdout, stderr, code = runBridge(t, 60*time.Second, append([]string{"invoke", "--config", cfg}, tc.args...)...)
		input := ""
		if len(tc.args) == 2 {
			input = tc.args[1]
		}
		if want := `{"input":` + input + `,"lang":"bash"}` + "\n"; code != 0 || stdout != want {
			t.Errorf("bridge invoke %q: exit %d, stdout %q, want 0 and %q\n%s", tc.args, code, stdout, want, stderr)
		}
	}

	// Nothing runs for a name not configured, a surplus argument, bad JSON
	// on stdin or as the argument of a JSON handler: exit 2, naming what is
	// wrong; no runtime starts for them either (its log says when one shut
	// down).
	calls := len(ws.lines(t, "calls_py.log"))
	for _, tc := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"cli/greet", "{}"}, "", "no handler cli/greet in the configuration, did you mean Cli/greet?"},
		{[]string{"Cli/greet", "{}", "{}"}, "", "want Service/handler and its JSON input"},
		{[]string{"Cli/greet", "-"}, "{not json", "the input on standard input (9 bytes) is not valid JSON (the input_content_type of Cli/greet is application/json)"},
		{[]string{"Cli/greet", "{not json"}, "", `input "{not json" is not valid JSON`},
	} {
		_, stderr, code := runWithInput(t, 60*time.Second, tc.stdin, bridgeBin(t), append([]string{"invoke", "--config", cfg}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("bridge invoke %v: exit %d (want 2), stderr without %q:\n%s", tc.args, code, tc.want, stderr)
		}
		if strings.Contains(stderr, "function runtime server") {
			t.Errorf("bridge invoke %v started a runtime for nothing:\n%s", tc.args, stderr)
		}
	}
	if n := len(ws.lines(t, "calls_py.log")); n != calls {
		t.Errorf("refused invokes ran the function %d times", n-calls)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// `bridge manifest --config FILE` prints the discovery manifest: services,
// documentation and the per-handler retry policy and timeouts.
func testCLIManifest(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "greeter.py", "shell.sh")
	cfg := ws.config(t, `services:
  - name: Documented
    documentation: Greets people in Python.
    handlers:
      - name: greet
        documentation: Says hello.
        runtime: python
        dir: fn
        handler: greeter.greet
        inactivity_timeout: 90s
        retry_policy:
          initial_interval: 250ms
          max_interval: 4s
          exponentiation_factor: 1.5
          max_attempts: 7
          on_max_attempts: pause
  - name: ShellToo
    documentation: Echoes in Bash.
    handlers:
      - {name: respond, runtime: bash, dir: fn, handler: shell.respond}
`)
	stdout, stderr, code := runBridge(t, 30*time.Second, "manifest", "--config", cfg)
	if code != 0 {
		t.Fatalf("bridge manifest: exit %d\n%s", code, stderr)
	}
	var m struct {
		ProtocolMode string `json:"protocolMode"`
		Services     []struct {
			Name          string           `json:"name"`
			Documentation string           `json:"documentation"`
			Handlers      []map[string]any `json:"handlers"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("manifest is not JSON: %v\n%s", err, stdout)
	}
	if m.ProtocolMode != "BIDI_STREAM" || len(m.Services) != 2 {
		t.Fatalf("manifest = %s", stdout)
	}
	docs := map[string]string{}
	for _, s := range m.Services {
		docs[s.Name] = s.Documentation
	}
	if docs["Documented"] != "Greets people in Python." || docs["ShellToo"] != "Echoes in Bash." {
		t.Errorf("service documentation = %v", docs)
	}
	var greet map[string]any
	for _, s := range m.Services {
		if s.Name == "Documented" && len(s.Handlers) == 1 {
			greet = s.Handlers[0]
		}
	}
	if greet == nil {
		t.Fatalf("no Documented/greet handler in %s", stdout)
	}
	want := map[string]any{
		"name":                            "greet",
		"documentation":                   "Says hello.",
		"inactivityTimeout":               90000.0,
		"retryPolicyInitialInterval":      250.0,
		"retryPolicyMaxInterval":          4000.0,
		"retryPolicyExponentiationFactor": 1.5,
		"retryPolicyMaxAttempts":          7.0,
		"retryPolicyOnMaxAttempts":        "PAUSE",
	}
	for k, v := range want {
		if greet[k] != v {
			t.Errorf("handler field %s = %v, want %v", k, greet[k], v)
		}
	}
}

// "Unknown fields and invalid values fail at start with the field path and
// what is allowed, before anything starts" (README): nothing listens.
func testInvalidConfig(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "greeter.rb")
	cfg := ws.config(t, `services:
  - name: Ruby
    handlers:
      - {name: greet, runtime: ruby, dir: fn, handler: greeter.greet}
`)
	addr := testtool.FreeAddr(t)
	start := time.Now()
	_, stderr, code := runBridge(t, 30*time.Second, "serve", "--config", cfg, "--listen", addr)
	took := time.Since(start)
	if code == 0 {
		t.Fatalf("bridge serve with runtime: ruby exited 0\n%s", stderr)
	}
	if took > 10*time.Second {
		t.Errorf("bridge serve took %s to reject the config", took)
	}
	if !strings.Contains(stderr, "services[0].handlers[0].runtime") || !strings.Contains(stderr, `"ruby"`) {
		t.Errorf("stderr does not name the field and the bad value:\n%s", stderr)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("something listens on %s after a rejected config", addr)
	}
	if procs := procsInDir(ws.fn); len(procs) != 0 {
		t.Errorf("processes started for a rejected config: %v", procs)
	}
}

// Closing the terminal of `bridge serve` (SIGHUP) stops it gracefully, as
// SIGTERM does: exit 0, its workers' scratch directories and its context
// endpoint's socket directory removed. A SIGKILLed bridge cannot remove
// them; the next bridge to start removes those of dead bridges.
func testHangupAndLeftovers(t *testing.T, _ *bridgeEnv) {
	ws := newWorkspace(t, "steps_sleep.py")
	cfg := ws.config(t, `services:
  - name: Hup
    handlers:
      - {name: nap, runtime: python, dir: fn, handler: steps_sleep.nap, durability: steps, min_warm: 1}
`)
	// Short: the context socket's path must fit a socket address.
	tmp, err := os.MkdirTemp("/tmp", "hup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	b := newBridgeServe(t, cfg, testtool.FreeAddr(t), "debug")
	b.env = []string{"TMPDIR=" + tmp}
	dirsOf := func(pid int) []string {
		m, _ := filepath.Glob(filepath.Join(tmp, fmt.Sprintf("fnbridge-*-%d-*", pid)))
		return m
	}
	b.start()
	killed := b.pid()
	if d := dirsOf(killed); len(d) != 2 {
		t.Fatalf("directories of bridge %d: %v, want its context endpoint's and its worker's", killed, d)
	}
	b.kill()
	if d := dirsOf(killed); len(d) != 2 {
		t.Fatalf("after SIGKILL: %v, want both left behind", d)
	}
	b.start()
	if d := dirsOf(killed); len(d) != 0 {
		t.Errorf("the next bridge left the dead one's directories: %v", d)
	}
	hup := b.pid()
	b.signal(syscall.SIGHUP)
	e, ok := b.waitExit(30 * time.Second)
	if !ok || e.err != nil {
		t.Fatalf("bridge serve after SIGHUP: exited %v (%v), want exit 0", ok, e.err)
	}
	if d := dirsOf(hup); len(d) != 0 {
		t.Errorf("after SIGHUP: %v left behind", d)
	}
}
