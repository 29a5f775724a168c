package e2e

// durability: steps end to end: functions that take their own durable
// steps (Python's fnbridge module, Bash's fnbridge command) behind a real
// restate-server on protocol v6 and v7, and under `bridge invoke`.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// TestSteps runs the durable-steps rules against the real `bridge serve`,
// python3, bash and restate-server 1.7.12. The two protocol groups run in
// parallel, each with its own server, and so do the cases of a group (one
// bridge each); the 30 s durable sleep is the floor of the whole test.
func TestSteps(t *testing.T) {
	requireInterpreters(t)
	serverCases := func(version int) []bridgeCase {
		return []bridgeCase{
			{"a bridge SIGKILLed during step 3 resumes: steps 1-2 never run again, the output is right", testStepsCrash(version)},
			{"a 30 s durable sleep suspends and frees the registration; a 1 s sleep does not suspend", testStepsSleep},
			{"durable calls, sends, futures, terminal failures, thread and stale-token refusals", testStepsCalls},
			{"a changed script replaying a journaled invocation gets a 570 journal mismatch", testStepsJournalMismatch},
			{"request/response mode completes a multi-step function with each step executed once", testStepsRequestResponse},
			{"a wait given up by `timeout` suspends until it completes, so no attempt journals the path of an incomplete wait", testStepsGiveUp},
		}
	}
	groups := []bridgeGroup{
		{
			name:  "protocol v6",
			setup: func(t *testing.T, env *bridgeEnv) { env.srv = restateserver.Start(t, restateserver.Options{}) },
			cases: serverCases(6),
		},
		{
			name: "protocol v7",
			setup: func(t *testing.T, env *bridgeEnv) {
				env.srv = restateserver.Start(t, restateserver.Options{EnableProtocolV7: true})
			},
			cases: serverCases(7),
		},
		{
			name: "cli",
			cases: []bridgeCase{
				{"bridge invoke runs a steps-mode Python and Bash function once; calls need Restate", testStepsInvoke},
				{"a renamed bridge binary still gives Bash steps the fnbridge command", testStepsRenamedBinary},
			},
		},
	}
	runBridgeGroups(t, groups)
}

// stepsRetry is the retry policy of the steps handlers: a retried attempt
// comes quickly.
const stepsRetry = `{initial_interval: 100ms, max_interval: 500ms}`

// stepLines counts the executions of each step in a marker file whose
// lines are "stepN PID", and returns the PIDs by step.
func stepLines(t *testing.T, ws *fnWorkspace, marker string) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, l := range ws.lines(t, marker) {
		f := strings.Fields(l)
		pid, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 2 || err != nil {
			t.Fatalf("%s: line %q is not \"stepN PID\"", marker, l)
		}
		out[f[0]] = append(out[f[0]], pid)
	}
	return out
}

// invocationLogs returns the bridge's "invocation" log records (one per
// attempt of a steps-mode handler, with its outcome) of invocation id.
func invocationLogs(b *bridgeChild, id string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(b.logs(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		if rec["restate_invocation_id"] == id && rec["outcome"] != nil && rec["durability"] == "steps" {
			out = append(out, rec)
		}
	}
	return out
}

// serveOneHandler starts a bridge serving ws's one service svc with one
// handler (its configuration as a YAML flow mapping) and registers it with
// env's restate-server.
func serveOneHandler(t *testing.T, env *bridgeEnv, ws *fnWorkspace, svc, handler string) *bridgeServe {
	t.Helper()
	b := startBridge(t, ws.config(t, "services:\n  - name: "+svc+"\n    handlers:\n      - "+handler+"\n"), testtool.FreeAddr(t))
	env.srv.Register(t, b.URI(), false)
	return b
}

// suspendedThenOK waits for the bridge's records of invocation id's
// attempts to end with one that completed ("ok", the second or later),
// and fails the test unless the first suspended.
func suspendedThenOK(t *testing.T, b *bridgeChild, id, what string) {
	t.Helper()
	var attempts []string
	testtool.Eventually(t, 5*time.Second, "the bridge logs "+what+"'s attempts", func() (bool, string) {
		attempts = outcomes(invocationLogs(b, id))
		return len(attempts) >= 2 && attempts[len(attempts)-1] == "ok", fmt.Sprint(attempts)
	})
	if attempts[0] != "suspended" {
		t.Errorf("%s: attempts %v, want the first suspended", what, attempts)
	}
}

func outcomes(recs []map[string]any) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprint(r["outcome"]))
	}
	return out
}

// The proof of the issue: "steps 1-2 never run again". A 4-step Python
// function and a 4-step Bash script append each step's execution to a
// marker file; step 3 blocks until the test has seen its line, the test
// SIGKILLs the bridge's process group and restarts it on the same address.
// Restate retries the invocation on the new bridge, which replays steps 1
// and 2 from the journal (their recorded values name the killed workers'
// processes), may run step 3 again, runs step 4 once, and the output holds
// all four values.
func testStepsCrash(version int) func(*testing.T, *bridgeEnv) {
	return func(t *testing.T, env *bridgeEnv) {
		ws := newWorkspace(t, "steps_crash.py", "steps_crash.sh")
		cfg := ws.config(t, fmt.Sprintf(`services:
  - name: StepsCrashPy
    handlers:
      - {name: four, runtime: python, dir: fn, handler: steps_crash.four, durability: steps, retry_policy: %[1]s}
  - name: StepsCrashSh
    handlers:
      - {name: four, runtime: bash, dir: fn, handler: steps_crash.four, durability: steps, retry_policy: %[1]s}
`, stepsRetry))
		b := startBridge(t, cfg, testtool.FreeAddr(t))
		env.srv.Register(t, b.URI(), false)
		ctx := caseContext(t)

		type lang struct{ svc, marker, input string }
		langs := []lang{
			{"StepsCrashPy", "steps_py.log", `{"order":"S-1"}`},
			{"StepsCrashSh", "steps_sh.log", `{"order":"S-2"}`},
		}
		ids := map[string]string{}
		for _, l := range langs {
			id, err := env.srv.Send(ctx, l.svc, "four", []byte(l.input), nil)
			if err != nil {
				t.Fatal(err)
			}
			ids[l.svc] = id
		}
		for _, l := range langs {
			testtool.Eventually(t, 30*time.Second, l.svc+" reaches step 3", func() (bool, string) {
				return len(stepLines(t, ws, l.marker)["step3"]) == 1, fmt.Sprint(ws.lines(t, l.marker))
			})
		}
		before := map[string]map[string][]int{}
		for _, l := range langs {
			before[l.svc] = stepLines(t, ws, l.marker)
			if got := before[l.svc]; len(got["step1"]) != 1 || len(got["step2"]) != 1 || len(got["step4"]) != 0 {
				t.Fatalf("%s before the crash: %v, want steps 1-3 once each", l.svc, got)
			}
		}

		b.kill()
		if !groupGone(b.group()) {
			t.Fatalf("the killed bridge's process group %d still has members", b.group())
		}
		// Nothing of the killed bridge (the blocked step 3 included) may
		// still run when step 3 is released.
		testtool.Eventually(t, 15*time.Second, "no process of the killed bridge's workers survives", func() (bool, string) {
			procs := procsInDir(ws.fn)
			return len(procs) == 0, fmt.Sprint(procs)
		})
		writeFile(t, filepath.Join(ws.fn, "release"), "")
		b.start()

		for _, l := range langs {
			status, body := invocationOutput(t, env.srv, ids[l.svc], 60*time.Second)
			if status != http.StatusOK {
				t.Fatalf("%s output after the restart: %d %s", l.svc, status, body)
			}
			var out struct {
				Steps []string `json:"steps"`
			}
			if err := json.Unmarshal(body, &out); err != nil || len(out.Steps) != 4 {
				t.Fatalf("%s output %s (%v), want four step values", l.svc, body, err)
			}
			after := stepLines(t, ws, l.marker)
			t.Logf("%s: output %s; executions %v", l.svc, body, after)
			if len(after["step1"]) != 1 || len(after["step2"]) != 1 {
				t.Errorf("%s: steps 1-2 ran again after the crash: %v", l.svc, after)
			}
			if n := len(after["step3"]); n < 1 || n > 2 {
				t.Errorf("%s: step 3 ran %d times, want 1 or 2 (it was cut by the crash)", l.svc, n)
			}
			if len(after["step4"]) != 1 {
				t.Errorf("%s: step 4 ran %d times, want 1", l.svc, len(after["step4"]))
			}
			// Each value names the process that executed its step: steps 1
			// and 2 come from the journal (the killed bridge's processes),
			// step 3 from its last execution, step 4 from its only one.
			want := []int{before[l.svc]["step1"][0], before[l.svc]["step2"][0], 0, 0}
			if s3 := after["step3"]; len(s3) > 0 {
				want[2] = s3[len(s3)-1]
			}
			if s4 := after["step4"]; len(s4) > 0 {
				want[3] = s4[0]
			}
			for i, v := range out.Steps {
				if !strings.HasSuffix(v, "-"+strconv.Itoa(want[i])) {
					t.Errorf("%s: step %d's value %q is not from PID %d (output %s)", l.svc, i+1, v, want[i], body)
				}
			}
			if l.svc == "StepsCrashPy" && !strings.HasPrefix(out.Steps[0], "S-1-1-") {
				t.Errorf("%s: step 1's value %q does not carry the input", l.svc, out.Steps[0])
			}
			rows := invocationRows(ctx, t, env.srv, l.svc, "status, pinned_service_protocol_version")
			if len(rows) != 1 || rows[0]["status"] != "completed" || rows[0]["pinned_service_protocol_version"] != float64(version) {
				t.Errorf("%s invocation rows %v, want one completed on protocol v%d", l.svc, rows, version)
			}
		}
	}
}

// A Bash function that gives up a durable wait (`timeout 1 fnbridge
// sleep 3`) goes on as if the wait were incomplete; a replay, which finds
// it complete, would take the other path. So giving it up suspends the
// invocation: the first attempt journals nothing after the wait, and the
// attempt that resumes once the sleep completed sees it complete and
// journals that path. Before, the first attempt journaled "gave-up" and a
// later replay taking "complete" failed with 570 for good.
func testStepsGiveUp(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "steps_giveup.sh")
	b := serveOneHandler(t, env, ws, "StepsGiveUp", "{name: giveup, runtime: bash, dir: fn, handler: steps_giveup.giveup, durability: steps, retry_policy: "+stepsRetry+"}")
	ctx := caseContext(t)
	id, err := env.srv.Send(ctx, "StepsGiveUp", "giveup", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	status, body := invocationOutput(t, env.srv, id, 60*time.Second)
	if status != http.StatusOK {
		t.Fatalf("the invocation: %d %s", status, body)
	}
	assertJSON(t, "the path after the given-up wait", body, `{"branch":"complete"}`)
	if lines := ws.lines(t, "giveup.log"); len(lines) != 1 || lines[0] != "complete" {
		t.Errorf("giveup.log %q, want the one step \"complete\" executed once", lines)
	}
	suspendedThenOK(t, b.bridgeChild, id, "the function that gave its wait up")
}

// "A wait not complete within suspend_after suspends: Suspension sent,
// registration released": with concurrency 1 a second invocation of the
// same handler runs to completion while the first sleeps 30 s, and the
// first completes after at least 30 s. A 1 s sleep (under suspend_after,
// 5 s by default) completes on the open stream: the bridge logs exactly
// one attempt for it, with outcome ok, where the 30 s sleep has a
// "suspended" attempt before its "ok" one (so the log line is shown to
// record suspensions). Restate shows the long one as suspended.
func testStepsSleep(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "steps_sleep.py")
	b := serveOneHandler(t, env, ws, "StepsSleep", "{name: nap, runtime: python, dir: fn, handler: steps_sleep.nap, durability: steps, concurrency: 1, retry_policy: "+stepsRetry+"}")
	ctx := caseContext(t)

	const long = 30 * time.Second
	sent := time.Now()
	longID, err := env.srv.Send(ctx, "StepsSleep", "nap", []byte(`{"tag":"long","seconds":30}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, 20*time.Second, "Restate shows the 30 s sleeper suspended", func() (bool, string) {
		st, err := env.srv.InvocationStatus(ctx, longID)
		if err != nil {
			return false, err.Error()
		}
		return st == "suspended", st
	})

	shortID, err := env.srv.Send(ctx, "StepsSleep", "nap", []byte(`{"tag":"short","seconds":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	status, body := invocationOutput(t, env.srv, shortID, 20*time.Second)
	if status != http.StatusOK {
		t.Fatalf("the 1 s sleeper: %d %s", status, body)
	}
	if time.Since(sent) >= long {
		t.Fatalf("the 1 s sleeper finished %s after the 30 s one started: it did not run while the first slept", time.Since(sent).Round(time.Millisecond))
	}
	if st, err := env.srv.InvocationStatus(ctx, longID); err != nil || st == "completed" {
		t.Fatalf("the 30 s sleeper is %q (%v) when the 1 s one finished", st, err)
	}
	var short struct {
		Slept float64 `json:"slept"`
	}
	if err := json.Unmarshal(body, &short); err != nil || short.Slept < 1 {
		t.Errorf("the 1 s sleeper's output %s (%v): slept under 1 s", body, err)
	}

	status, body = invocationOutput(t, env.srv, longID, long+30*time.Second)
	took := time.Since(sent)
	if status != http.StatusOK {
		t.Fatalf("the 30 s sleeper: %d %s", status, body)
	}
	if took < long {
		t.Errorf("the 30 s sleeper completed %s after the call, before its sleep ended", took.Round(time.Millisecond))
	}
	t.Logf("the 30 s sleeper completed %s after the call", took.Round(time.Millisecond))
	var slept struct {
		Slept float64 `json:"slept"`
	}
	if err := json.Unmarshal(body, &slept); err != nil || slept.Slept < long.Seconds() {
		t.Errorf("the 30 s sleeper's output %s (%v): its steps are under 30 s apart", body, err)
	}
	count := map[string]int{}
	for _, l := range ws.lines(t, "sleep.log") {
		count[l]++
	}
	for _, l := range []string{"long before", "long after", "short before", "short after"} {
		if count[l] != 1 {
			t.Errorf("step %q executed %d times, want 1 (all: %v)", l, count[l], count)
		}
	}

	// The bridge logs one record per attempt, after its answer: the 30 s
	// sleeper has at least two (the suspended one, the one that completed),
	// which shows the records count attempts; the 1 s sleeper has exactly
	// one, ok: it never suspended.
	suspendedThenOK(t, b.bridgeChild, longID, "the 30 s sleeper")
	// An attempt refused with 429 before the function ran (its
	// registration still busy) is no suspension; it is checked below.
	var ran, busy []string
	for _, r := range invocationLogs(b.bridgeChild, shortID) {
		if e := fmt.Sprint(r["error"]); strings.Contains(e, "429") && strings.Contains(e, "busy with invocation "+longID) {
			busy = append(busy, e)
			continue
		}
		ran = append(ran, fmt.Sprint(r["outcome"]))
	}
	if len(ran) != 1 || ran[0] != "ok" {
		t.Errorf("the 1 s sleeper's attempts ended %v, want one attempt, ok (no suspension)", ran)
	}
	// "Suspension sent, registration released": once Restate shows the
	// first invocation suspended, its registration is free for the next.
	if len(busy) > 0 {
		t.Errorf("the 1 s sleeper, sent after Restate showed the 30 s one suspended, was refused %d time(s) because the registration was still busy with the suspended invocation: %v", len(busy), busy)
	}
}

// Calls between handlers, each a journaled step of the caller: Python
// calls Bash and Bash calls Python; a send with a delay is delivered after
// it; call_async with wait_any/wait_all (and Bash's --async and await);
// a callee's terminal failure ends the caller terminally with the callee's
// message; a context call from a second Python thread is refused with a
// clear error; a background process of a finished invocation is refused
// with 403.
func testStepsCalls(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "steps_calls.py", "steps_calls.sh")
	var hs strings.Builder
	for _, svc := range []struct {
		name, runtime string
		handlers      []string
	}{
		{"StepsPy", "python", []string{"square", "call_sh", "refuse", "through", "send_later", "stamp", "fanout", "threads"}},
		{"StepsSh", "bash", []string{"double", "call_py", "refuse", "through", "fanout", "stale"}},
	} {
		fmt.Fprintf(&hs, "  - name: %s\n    handlers:\n", svc.name)
		for _, h := range svc.handlers {
			fmt.Fprintf(&hs, "      - {name: %s, runtime: %s, dir: fn, handler: steps_calls.%s, durability: steps, retry_policy: %s}\n", h, svc.runtime, h, stepsRetry)
		}
	}
	cfg := ws.config(t, "services:\n"+hs.String())
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	env.srv.Register(t, b.URI(), false)
	ctx := caseContext(t)

	t.Run("Python calls Bash and Bash calls Python", func(t *testing.T) {
		out := callOK(ctx, t, env.srv, "StepsPy", "call_sh", `{"peer":"StepsSh","n":21}`, nil)
		assertJSON(t, "Python→Bash", out, `{"from_bash":{"double":42,"lang":"bash"}}`)
		out = callOK(ctx, t, env.srv, "StepsSh", "call_py", `{"peer":"StepsPy","n":9}`, nil)
		assertJSON(t, "Bash→Python", out, `{"from_python":{"square":81,"lang":"python"}}`)
	})

	t.Run("a send with a delay runs the callee after the delay", func(t *testing.T) {
		const delay = 2.0
		out := callOK(ctx, t, env.srv, "StepsPy", "send_later", fmt.Sprintf(`{"peer":"StepsPy","tag":"later","delay":%g}`, delay), nil)
		var sent struct {
			T0     float64 `json:"t0"`
			Callee string  `json:"callee"`
		}
		if err := json.Unmarshal(out, &sent); err != nil || !strings.HasPrefix(sent.Callee, "inv_") {
			t.Fatalf("send_later output %s (%v), want the callee's invocation id", out, err)
		}
		status, body := invocationOutput(t, env.srv, sent.Callee, 30*time.Second)
		if status != http.StatusOK {
			t.Fatalf("the sent invocation: %d %s", status, body)
		}
		var ran struct {
			Tag string  `json:"tag"`
			At  float64 `json:"at"`
		}
		if err := json.Unmarshal(body, &ran); err != nil || ran.Tag != "later" {
			t.Fatalf("the sent invocation's output %s (%v)", body, err)
		}
		if d := ran.At - sent.T0; d < delay {
			t.Errorf("the callee ran %.3f s after the send, under its %g s delay", d, delay)
		}
		if n := len(ws.lines(t, "stamp.log")); n != 1 {
			t.Errorf("the sent handler ran %d times, want 1", n)
		}
	})

	t.Run("call_async with wait_any and wait_all; Bash --async with await", func(t *testing.T) {
		out := callOK(ctx, t, env.srv, "StepsPy", "fanout", `{"peer":"StepsSh","self":"StepsPy"}`, nil)
		assertJSON(t, "Python fanout", out,
			`{"first":"call","first_value":{"double":10,"lang":"bash"},"all":[{"double":10,"lang":"bash"},{"square":16,"lang":"python"}]}`)
		out = callOK(ctx, t, env.srv, "StepsSh", "fanout", `{"peer":"StepsPy"}`, nil)
		assertJSON(t, "Bash fanout", out,
			`{"first":"call","first_value":{"square":36,"lang":"python"},"all":{"square":36,"lang":"python"}}`)
	})

	t.Run("a callee's terminal failure ends the caller terminally with its message", func(t *testing.T) {
		for _, c := range []struct{ caller, callee, marker, message string }{
			{"StepsPy", "StepsSh", "calls_sh.log", "bash refuses order T-1"},
			{"StepsSh", "StepsPy", "calls_py.log", "python refuses order T-1"},
		} {
			before := countLines(ws.lines(t, c.marker), "refuse")
			status, body, err := env.srv.Call(ctx, c.caller, "through", []byte(fmt.Sprintf(`{"peer":%q,"order":"T-1"}`, c.callee)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if status == http.StatusOK || !strings.Contains(string(body), c.message) {
				t.Errorf("%s→%s: the caller got %d %s, want a failure carrying %q", c.caller, c.callee, status, body, c.message)
			}
			rows := invocationRows(ctx, t, env.srv, c.caller, "target_handler_name, status, completion_result, completion_failure")
			found := false
			for _, r := range rows {
				if r["target_handler_name"] != "through" {
					continue
				}
				found = true
				if r["status"] != "completed" || r["completion_result"] != "failure" || !strings.Contains(fmt.Sprint(r["completion_failure"]), c.message) {
					t.Errorf("%s/through ended %v/%v (%v), want completed with the callee's terminal failure %q", c.caller, r["status"], r["completion_result"], r["completion_failure"], c.message)
				}
			}
			if !found {
				t.Errorf("no %s/through invocation in %v", c.caller, rows)
			}
			if n := countLines(ws.lines(t, c.marker), "refuse") - before; n != 1 {
				t.Errorf("%s/refuse ran %d times, want 1 (a terminal failure is not retried)", c.callee, n)
			}
		}
	})

	t.Run("a context call from a second Python thread is refused clearly", func(t *testing.T) {
		out := callOK(ctx, t, env.srv, "StepsPy", "threads", `{}`, nil)
		var res struct {
			Error *string `json:"error"`
		}
		if err := json.Unmarshal(out, &res); err != nil || res.Error == nil {
			t.Fatalf("threads output %s (%v): the second thread's call was not refused", out, err)
		}
		t.Logf("the second thread got: %q", *res.Error)
		if !strings.Contains(*res.Error, "one at a time") || !strings.Contains(*res.Error, "thread") {
			t.Errorf("the second thread got %q, want the error saying calls are made one at a time", *res.Error)
		}
	})

	t.Run("a background process of a finished invocation is refused with 403", func(t *testing.T) {
		out := callOK(ctx, t, env.srv, "StepsSh", "stale", `{}`, nil)
		assertJSON(t, "stale output", out, `{"ok":true}`)
		// However the test ends, the background process then exits by
		// itself (it is also in the worker's process group, killed with
		// the bridge).
		t.Cleanup(func() { _ = os.WriteFile(filepath.Join(ws.fn, "stale-go"), nil, 0o644) })
		writeFile(t, filepath.Join(ws.fn, "stale-go"), "")
		var got string
		testtool.Eventually(t, 30*time.Second, "the background process tries its stale token", func() (bool, string) {
			b, _ := os.ReadFile(filepath.Join(ws.fn, "stale.out"))
			got = string(b)
			return strings.Contains(got, "exit="), got
		})
		t.Logf("the stale call: %q", got)
		if !strings.Contains(got, "403") || !strings.Contains(got, "attempt that has ended") || !strings.Contains(got, "exit=3") {
			t.Errorf("the stale call got %q, want the 403 refusal (token of an ended attempt) and exit 3", got)
		}
	})
}

func countLines(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// "divergence is a 570 journal mismatch": an invocation whose step 1 is
// journaled (its attempts then fail retryably) replays against a changed
// script whose step 1 has another name; the attempt fails with 570, which
// Restate records, and the renamed step never executes.
func testStepsJournalMismatch(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "steps_change.sh")
	writeFile(t, filepath.Join(ws.fn, "fail-after-first"), "")
	b := serveOneHandler(t, env, ws, "StepsChange", "{name: change, runtime: bash, dir: fn, handler: steps_change.change, durability: steps, retry_policy: "+stepsRetry+"}")
	ctx := caseContext(t)
	id, err := env.srv.Send(ctx, "StepsChange", "change", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Two failed attempts: the second replayed step 1 (journaled).
	testtool.Eventually(t, 30*time.Second, "the invocation is retried after step 1", func() (bool, string) {
		r := invocationRow(ctx, t, env.srv, id, "status, retry_count, last_failure")
		n, _ := r["retry_count"].(float64)
		return n >= 2 && strings.Contains(fmt.Sprint(r["last_failure"]), "failing after step 1"), fmt.Sprint(r)
	})
	if lines := ws.lines(t, "change.log"); len(lines) != 1 || lines[0] != "first" {
		t.Fatalf("executions %q across retries, want step 1 once (journaled, then replayed)", lines)
	}

	b.kill()
	copyTestdata(t, "steps_change_renamed.sh", filepath.Join(ws.fn, "steps_change.sh"))
	if err := os.Remove(filepath.Join(ws.fn, "fail-after-first")); err != nil {
		t.Fatal(err)
	}
	b.start()
	testtool.Eventually(t, 30*time.Second, "Restate records the journal mismatch", func() (bool, string) {
		r := invocationRow(ctx, t, env.srv, id, "status, last_failure")
		f := strings.ToLower(fmt.Sprint(r["last_failure"]))
		return strings.Contains(f, "570") || strings.Contains(f, "journal mismatch"), fmt.Sprint(r)
	})
	t.Logf("Restate records: %v", invocationRow(ctx, t, env.srv, id, "status, retry_count, last_failure"))
	if st, err := env.srv.InvocationStatus(ctx, id); err != nil || st == "completed" {
		t.Errorf("the mismatched invocation is %q (%v), want it failing (not completed)", st, err)
	}
	if lines := ws.lines(t, "change.log"); len(lines) != 1 {
		t.Errorf("executions %q: a step of the changed script ran against the old journal", lines)
	}
	if err := env.srv.CancelInvocation(ctx, id); err != nil {
		t.Logf("cancelling the mismatched invocation: %v", err)
	}
}

// protocol_mode: request_response: every step's completion reaches the
// function in a new request that replays the journal; the 4-step Python
// and Bash functions complete with each step executed exactly once.
func testStepsRequestResponse(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "steps_crash.py", "steps_crash.sh")
	writeFile(t, filepath.Join(ws.fn, "release"), "") // step 3 does not block
	cfg := ws.config(t, fmt.Sprintf(`protocol_mode: request_response
services:
  - name: StepsRRPy
    handlers:
      - {name: four, runtime: python, dir: fn, handler: steps_crash.four, durability: steps, retry_policy: %[1]s}
  - name: StepsRRSh
    handlers:
      - {name: four, runtime: bash, dir: fn, handler: steps_crash.four, durability: steps, retry_policy: %[1]s}
`, stepsRetry))
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	env.srv.Register(t, b.URI(), false)
	ctx := caseContext(t)
	for _, c := range []struct{ svc, marker, input, first string }{
		{"StepsRRPy", "steps_py.log", `{"order":"R-1"}`, "R-1-1-"},
		{"StepsRRSh", "steps_sh.log", `{"order":"R-2"}`, "one-"},
	} {
		out := callOK(ctx, t, env.srv, c.svc, "four", c.input, nil)
		var res struct {
			Steps []string `json:"steps"`
		}
		if err := json.Unmarshal(out, &res); err != nil || len(res.Steps) != 4 || !strings.HasPrefix(res.Steps[0], c.first) {
			t.Fatalf("%s output %s (%v), want four step values", c.svc, out, err)
		}
		got := stepLines(t, ws, c.marker)
		t.Logf("%s: output %s; executions %v", c.svc, out, got)
		for i, s := range []string{"step1", "step2", "step3", "step4"} {
			if len(got[s]) != 1 {
				t.Errorf("%s: %s executed %d times, want 1 (all: %v)", c.svc, s, len(got[s]), got)
				continue
			}
			if !strings.HasSuffix(res.Steps[i], "-"+strconv.Itoa(got[s][0])) {
				t.Errorf("%s: %s's value %q is not from its execution (PID %d)", c.svc, s, res.Steps[i], got[s][0])
			}
		}
	}
}

// `bridge invoke` of steps-mode handlers (no Restate): every step executes
// once, against a local journal; a durable call fails clearly, naming what
// needs Restate.
// checkFourStepsOnce checks the answer of a four-step function of
// steps_crash (stdout, its {"steps": [...]}) against its marker file: each
// step executed once, and each value is the one its execution returned.
func checkFourStepsOnce(t *testing.T, ws *fnWorkspace, handler, marker, first, stdout string) {
	t.Helper()
	var res struct {
		Steps []string `json:"steps"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || len(res.Steps) != 4 || !strings.HasPrefix(res.Steps[0], first) {
		t.Fatalf("bridge invoke Local/%s printed %q (%v), want four step values", handler, stdout, err)
	}
	got := stepLines(t, ws, marker)
	for i, s := range []string{"step1", "step2", "step3", "step4"} {
		if len(got[s]) != 1 {
			t.Errorf("%s: %s executed %d times, want 1 (all: %v)", handler, s, len(got[s]), got)
			continue
		}
		if !strings.HasSuffix(res.Steps[i], "-"+strconv.Itoa(got[s][0])) {
			t.Errorf("%s: %s's value %q is not from its execution (PID %d)", handler, s, res.Steps[i], got[s][0])
		}
	}
}

// testStepsRenamedBinary: the bridge installed under another name (as a
// release download or a package may name it) still gives Bash steps their
// fnbridge command. Before functionruntime.DeclareContextCommand only the
// names bridge and fnbridge did, and the first step of every attempt
// failed with "fnbridge: command not found".
func testStepsRenamedBinary(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "steps_crash.sh")
	writeFile(t, filepath.Join(ws.fn, "release"), "") // step 3 does not block
	cfg := ws.config(t, `services:
  - name: Local
    handlers:
      - {name: foursh, runtime: bash, dir: fn, handler: steps_crash.four, durability: steps}
`)
	bin, err := os.ReadFile(bridgeBin(t))
	if err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(t.TempDir(), "fnbridge-linux-amd64")
	if err := os.WriteFile(renamed, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, 60*time.Second, renamed, "invoke", "--config", cfg, "Local/foursh", `{"order":"R-1"}`)
	if code != 0 {
		t.Fatalf("%s invoke Local/foursh: exit %d\n%s", filepath.Base(renamed), code, stderr)
	}
	checkFourStepsOnce(t, ws, "foursh", "steps_sh.log", "one-", stdout)
}

func testStepsInvoke(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "steps_crash.py", "steps_crash.sh", "steps_calls.py", "steps_calls.sh")
	writeFile(t, filepath.Join(ws.fn, "release"), "") // step 3 does not block
	cfg := ws.config(t, `services:
  - name: Local
    handlers:
      - {name: fourpy, runtime: python, dir: fn, handler: steps_crash.four, durability: steps}
      - {name: foursh, runtime: bash, dir: fn, handler: steps_crash.four, durability: steps}
      - {name: callpy, runtime: python, dir: fn, handler: steps_calls.call_sh, durability: steps}
      - {name: callsh, runtime: bash, dir: fn, handler: steps_calls.call_py, durability: steps}
`)
	for _, c := range []struct{ handler, marker, input, first string }{
		{"fourpy", "steps_py.log", `{"order":"L-1"}`, "L-1-1-"},
		{"foursh", "steps_sh.log", `{"order":"L-2"}`, "one-"},
	} {
		stdout, stderr, code := runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Local/"+c.handler, c.input)
		if code != 0 {
			t.Fatalf("bridge invoke Local/%s: exit %d\n%s", c.handler, code, stderr)
		}
		checkFourStepsOnce(t, ws, c.handler, c.marker, c.first, stdout)
	}
	for _, h := range []string{"callpy", "callsh"} {
		stdout, stderr, code := runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Local/"+h, `{"peer":"Other","n":2}`)
		if code != 1 {
			t.Fatalf("bridge invoke Local/%s of a durable call exited %d, want 1 (stdout %q)", h, code, stdout)
		}
		if stdout != "" {
			t.Errorf("bridge invoke Local/%s printed output %q", h, stdout)
		}
		if last := lastLine(stderr); !strings.HasPrefix(last, "bridge: a durable call (fnbridge.call in Python, fnbridge call in Bash) needs Restate") {
			t.Errorf("bridge invoke Local/%s: the last stderr line %q does not say a durable call needs Restate, in both spellings\n%s", h, last, stderr)
		}
	}
}
