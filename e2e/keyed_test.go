package e2e

// Keyed services end to end (issue 12): virtual objects with durable
// state, shared handlers, workflows with durable promises, awakeables and
// lazy state, for Python and Bash functions behind a real restate-server
// on protocol v6 and v7. The handlers are in testdata/keyed/.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// TestKeyed runs the keyed-service rules against the real `bridge serve`,
// python3, bash, restate-server 1.7.12 and its `restate` CLI. Like
// TestSteps, the two protocol groups run in parallel, each with its own
// server, and so do the cases of a group (one bridge each).
func TestKeyed(t *testing.T) {
	requireInterpreters(t)
	cases := func(version int) []bridgeCase {
		return []bridgeCase{
			{"a Bash counter object keeps exact totals over 200 concurrent adds while the bridge is SIGKILLed twice", testKeyedCounter(version)},
			{"a shared handler reads state while the exclusive one waits, and may not write it", testKeyedShared},
			{"a Python workflow waits on a promise a shared handler resolves; attach returns its result, a second run does not start", testKeyedWorkflow},
			{"an awakeable resolved or rejected through the ingress resumes a suspended Python and Bash function", testKeyedAwakeables},
			{"with lazy_state the reads go through GetLazyState and still return the right values", testKeyedLazyState},
			{"fnbridge cancel of a suspended invocation fails its wait with TerminalError 409 (Python) and exit 100 (Bash)", testKeyedCancel},
			{"cancelling an invocation cancels the calls it made: a Python caller's Bash callee and a Bash caller's Python callee end cancelled", testKeyedCancelCalls},
		}
	}
	runBridgeGroups(t, []bridgeGroup{
		{
			name:  "protocol v6",
			setup: func(t *testing.T, env *bridgeEnv) { env.srv = restateserver.Start(t, restateserver.Options{}) },
			cases: cases(6),
		},
		{
			name: "protocol v7",
			setup: func(t *testing.T, env *bridgeEnv) {
				env.srv = restateserver.Start(t, restateserver.Options{EnableProtocolV7: true})
			},
			cases: cases(7),
		},
		{
			name: "cli",
			cases: []bridgeCase{
				{"the keyed examples' manifest types Counter and Signup; shared on a plain service and a workflow without run are refused", testKeyedManifest},
			},
		},
	})
}

// keyedDir is where newWorkspace puts the testdata/keyed/ handlers: the
// handlers' dir, where they write their marker files.
const keyedDir = "fn/keyed"

// keyedHandler is one handler line of a test's bridge.yaml; extra is
// appended inside the flow mapping (", shared: true").
func keyedHandler(name, runtime, handler, extra string) string {
	return fmt.Sprintf("      - {name: %s, runtime: %s, dir: %s, handler: %s, retry_policy: %s%s}\n",
		name, runtime, keyedDir, handler, stepsRetry, extra)
}

// keyedService is one service of a test's bridge.yaml: its name, its
// service-level fields ("type: virtual_object") and its handler lines
// (keyedHandler).
func keyedService(name string, fields []string, handlers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n", name)
	for _, f := range fields {
		fmt.Fprintf(&b, "    %s\n", f)
	}
	b.WriteString("    handlers:\n")
	for _, h := range handlers {
		b.WriteString(h)
	}
	return b.String()
}

// keyedServe writes the workspace's bridge.yaml with the services
// (keyedService), serves it and registers it with the group's server.
func keyedServe(t *testing.T, env *bridgeEnv, ws *fnWorkspace, services ...string) *bridgeServe {
	t.Helper()
	return serveAndRegister(t, env, ws.config(t, "services:\n"+strings.Join(services, "")))
}

// virtualObject are the fields of a virtual object.
var virtualObject = []string{"type: virtual_object"}

// keyedSteps is the extra of a durability: steps handler whose waits
// suspend after a second, so a test sees suspensions quickly.
const keyedSteps = ", durability: steps, timeout: 20s, suspend_after: 1s"

// keyedAdd is the answer of counter.add: the key's count before and
// after this add.
type keyedAdd struct {
	Key     string `json:"key"`
	Before  int    `json:"before"`
	After   int    `json:"after"`
	Runtime string `json:"runtime"`
}

// checkAddChain checks that the adds of one key, each of its own amount,
// applied one after the other, each exactly once: sorted by the count they
// saw, each starts where the previous one ended, the first at 0, and the
// last ends at the sum of the amounts. A lost update (two adds seeing the
// same count) or an add applied twice breaks the chain. It returns the
// final count.
func checkAddChain(t *testing.T, key string, adds []keyedAdd, amounts []int) int {
	t.Helper()
	sum := 0
	for _, a := range amounts {
		sum += a
	}
	sorted := append([]keyedAdd(nil), adds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Before < sorted[j].Before })
	at := 0
	for i, a := range sorted {
		if a.Before != at {
			t.Errorf("key %s: add %d of %d saw count %d, want %d (the previous add ended there): adds %v", key, i+1, len(sorted), a.Before, at, sorted)
			return at
		}
		at = a.After
	}
	if at != sum {
		t.Errorf("key %s: the adds end at %d, want the sum of their amounts %d", key, at, sum)
	}
	return at
}

// The proof of the issue: "A Bash counter object: 200 concurrent POST
// /Counter/{key}/add over 5 keys end with exactly the right totals in
// restate state get, while the bridge is SIGKILLed and restarted twice
// during the run." Each add carries its own amount (1 to 7) and an
// idempotency key, and the client retries the same key after anything but
// a 200 until it has the add's answer. Each answer names the count the add
// saw and left, so besides the totals (the `restate` CLI, the admin SQL
// state table and the object's shared get handler all read them) every
// key's adds must chain from 0 to the total: exclusive per key, each
// applied exactly once. Each kill comes while an add is held between its
// state read and its write (the classic lost update), and every add so cut
// must have run again in a new attempt. The key also reaches function-mode
// handlers (Bash and Python), whose state calls fail saying they need
// durability: steps.
func testKeyedCounter(version int) func(*testing.T, *bridgeEnv) {
	return func(t *testing.T, env *bridgeEnv) {
		cli := testtool.Require(t, "RESTATE_CLI_BIN", "restate", "to read the counter's state with restate state get")
		ws := newWorkspace(t, "keyed/counter.sh", "keyed/counter.py")
		b := keyedServe(t, env, ws, keyedService("Counter", virtualObject,
			keyedHandler("add", "bash", "counter.add", keyedSteps+", concurrency: 5"),
			keyedHandler("get", "bash", "counter.get", keyedSteps+", shared: true"),
			keyedHandler("whoami", "bash", "counter.whoami", ""),
			keyedHandler("whoamipy", "python", "counter.whoami", ", shared: true")))

		const n, keys = 200, 5
		amount := func(i int) int { return 1 + i%7 }
		key := func(i int) string { return fmt.Sprintf("k%d", i%keys) }
		run := fmt.Sprintf("%d", time.Now().UnixNano())
		answers := make([]keyedAdd, n)
		failures := make([]string, n)
		var (
			done    atomic.Int64
			wg      sync.WaitGroup
			retryMu sync.Mutex
			retries = map[string]int{}
		)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer done.Add(1)
				headers := map[string]string{"idempotency-key": "add-" + run + "-" + fmt.Sprint(i)}
				body, err := keyedCallUntilOK(ctx, env.srv, "Counter/"+key(i), "add", fmt.Sprint(amount(i)), headers, func(reason string) {
					retryMu.Lock()
					retries[reason]++
					retryMu.Unlock()
				})
				if err != nil {
					failures[i] = err.Error()
					return
				}
				if err := json.Unmarshal(body, &answers[i]); err != nil || answers[i].Key != key(i) || answers[i].After-answers[i].Before != amount(i) {
					failures[i] = fmt.Sprintf("answer %s (%v), want key %s and an add of %d", body, err, key(i), amount(i))
				}
			}()
		}
		// Two crashes in the middle of adds: once enough adds are answered
		// the file "block" holds the next ones between their read and
		// their write; when one is held, the bridge's whole process group
		// (workers included) is SIGKILLed, and a new bridge starts on the
		// same address, which Restate's retries reach.
		block := filepath.Join(ws.fn, "keyed", "block")
		var killedAt []int64
		cut := map[string]bool{} // invocation ids of the adds held at a kill
		for _, at := range []int64{n / 4, n * 11 / 20} {
			testtool.Eventually(t, 2*time.Minute, fmt.Sprintf("%d of %d adds answered", at, n), func() (bool, string) {
				return done.Load() >= at, fmt.Sprint(done.Load())
			})
			writeFile(t, block, "")
			testtool.Eventually(t, time.Minute, "an add is held between its read and its write", func() (bool, string) {
				held := 0
				for _, l := range ws.lines(t, "keyed/add.attempts") {
					if id, ok := strings.CutPrefix(l, "between "); ok && !cut[id] {
						held++
					}
				}
				return held > 0, fmt.Sprintf("%d answered", done.Load())
			})
			killedAt = append(killedAt, done.Load())
			b.kill()
			for _, l := range ws.lines(t, "keyed/add.attempts") {
				if id, ok := strings.CutPrefix(l, "between "); ok {
					cut[id] = true
				}
			}
			if err := os.Remove(block); err != nil {
				t.Fatal(err)
			}
			b.start()
		}
		wg.Wait()
		retryMu.Lock()
		t.Logf("bridge SIGKILLed with %v of %d adds answered; client retries by reason: %v", killedAt, n, retries)
		retryMu.Unlock()
		for i, f := range failures {
			if f != "" {
				t.Errorf("add %d (key %s): %s", i, key(i), f)
			}
		}
		if t.Failed() {
			t.FailNow()
		}

		want := map[string]int{}
		for k := range keys {
			k := fmt.Sprintf("k%d", k)
			var adds []keyedAdd
			var amounts []int
			for i := range n {
				if key(i) == k {
					adds = append(adds, answers[i])
					amounts = append(amounts, amount(i))
				}
			}
			want[k] = checkAddChain(t, k, adds, amounts)
		}
		for k, total := range want {
			state := cliState(t, cli, env.srv, "Counter", k)
			if got := strings.TrimSpace(state["count"]); got != fmt.Sprint(total) {
				t.Errorf("restate state get Counter %s: count %q, want %d (all state: %v)", k, got, total, state)
			}
			out := callOK(caseContext(t), t, env.srv, "Counter/"+k, "get", "null", nil)
			assertJSON(t, "Counter/"+k+"/get", out, fmt.Sprintf(`{"key":%q,"count":%d}`, k, total))
		}
		ctx = caseContext(t)
		sqlTotals := map[string]string{}
		for _, r := range stateRows(ctx, t, env.srv, "Counter") {
			if r["key"] == "count" {
				sqlTotals[fmt.Sprint(r["service_key"])] = strings.TrimSpace(fmt.Sprint(r["value_utf8"]))
			}
		}
		for k, total := range want {
			if sqlTotals[k] != fmt.Sprint(total) {
				t.Errorf("the state table's count of %s is %q, want %d (all: %v)", k, sqlTotals[k], total, sqlTotals)
			}
		}
		if len(sqlTotals) != keys {
			t.Errorf("the state table has counts for %d keys, want %d: %v", len(sqlTotals), keys, sqlTotals)
		}
		// Each idempotency key is one invocation, however often the client
		// retried it; all of them completed on the protocol the group pins.
		rows := invocationRows(ctx, t, env.srv, "Counter", "target_handler_name, status, pinned_service_protocol_version")
		adds := 0
		for _, r := range rows {
			if r["target_handler_name"] != "add" {
				continue
			}
			adds++
			if r["status"] != "completed" || r["pinned_service_protocol_version"] != float64(version) {
				t.Errorf("an add invocation is %v, want completed on protocol v%d", r, version)
			}
		}
		if adds != n {
			t.Errorf("restate has %d add invocations, want %d (one per idempotency key)", adds, n)
		}
		// Each add the kills cut between its read and its write ran again
		// in a new attempt, which replayed the journaled read, and still
		// added once (the chains above).
		attempts := map[string]int{}
		for _, l := range ws.lines(t, "keyed/add.attempts") {
			if id, ok := strings.CutPrefix(l, "attempt "); ok {
				attempts[id]++
			}
		}
		t.Logf("%d adds cut between their read and write by the kills; %d adds ran in all", len(cut), len(attempts))
		if len(attempts) != n {
			t.Errorf("%d adds ran, want %d", len(attempts), n)
		}
		for id := range cut {
			if attempts[id] < 2 {
				t.Errorf("add %s, killed between its read and its write, ran %d attempt(s), want 2 or more", id, attempts[id])
			}
		}

		// durability: function: the key, and a clear error for anything else.
		var who struct {
			Env, Command, Module string
			StateStatus          int    `json:"state_status"`
			StateError           string `json:"state_error"`
		}
		out := callOK(ctx, t, env.srv, "Counter/who-1", "whoami", "null", nil)
		if err := json.Unmarshal(out, &who); err != nil || who.Env != "who-1" || who.Command != "who-1" {
			t.Errorf("Bash function-mode whoami of who-1: %s (%v), want the key from $FNBRIDGE_KEY and fnbridge key", out, err)
		}
		if who.StateStatus == 0 || !strings.Contains(who.StateError, "durability: steps") {
			t.Errorf("Bash function-mode fnbridge state get: exit %d, %q; want a failure saying it needs durability: steps", who.StateStatus, who.StateError)
		}
		who.StateError = ""
		out = callOK(ctx, t, env.srv, "Counter/who-2", "whoamipy", "null", nil)
		if err := json.Unmarshal(out, &who); err != nil || who.Env != "who-2" || who.Module != "who-2" {
			t.Errorf("Python function-mode whoami of who-2: %s (%v), want the key from FNBRIDGE_KEY and fnbridge.key()", out, err)
		}
		if !strings.Contains(who.StateError, "durability: steps") {
			t.Errorf("Python function-mode fnbridge.state.get raised %q, want an error saying it needs durability: steps", who.StateError)
		}
	}
}

// keyedCallUntilOK calls service/handler until the ingress answers 200 and
// returns that body, retrying the same request (with its idempotency key)
// after a transport error or another status, as a client of a crashing
// deployment does; retried is told why. It gives up when ctx ends.
func keyedCallUntilOK(ctx context.Context, srv *restateserver.Server, service, handler, body string, headers map[string]string, retried func(reason string)) ([]byte, error) {
	for calls := 1; ; calls++ {
		status, out, err := srv.Call(ctx, service, handler, []byte(body), headers)
		if err == nil && status == http.StatusOK {
			return out, nil
		}
		reason := fmt.Sprintf("HTTP %d", status)
		if err != nil {
			reason = "transport error: " + chaosErrClass(err)
		}
		retried(reason)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s/%s: no 200 after %d calls; last: %s %s", service, handler, calls, reason, out)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cliState is `restate state get --plain SERVICE KEY` through the CLI
// (RESTATE_CLI_BIN) against srv's admin API: the object's state, each
// value as the CLI prints it (UTF-8 text).
func cliState(t *testing.T, cli string, srv *restateserver.Server, service, key string) map[string]string {
	t.Helper()
	stdout, stderr, code := run(t, 30*time.Second, "/usr/bin/env", "RESTATE_ADMIN_URL="+srv.AdminURL(), "CI=true",
		cli, "state", "get", "--plain", service, key)
	if code != 0 {
		t.Fatalf("restate state get %s %s: exit %d\n%s", service, key, code, stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("restate state get --plain %s %s printed %q, not a JSON object: %v", service, key, stdout, err)
	}
	out := map[string]string{}
	for k, v := range raw {
		if s, ok := v.(string); ok {
			out[k] = s
		} else {
			b, _ := json.Marshal(v)
			out[k] = string(b)
		}
	}
	return out
}

// stateRows is the admin SQL state table of one service: service_key,
// key and value_utf8 of every entry.
func stateRows(ctx context.Context, t *testing.T, srv *restateserver.Server, service string) []map[string]any {
	t.Helper()
	rows, err := srv.Query(ctx, fmt.Sprintf("SELECT service_key, key, value_utf8 FROM state WHERE service_name = '%s'", service))
	if err != nil {
		t.Fatalf("query the state of %s: %v", service, err)
	}
	return rows
}

// journalEntries is the journal of one invocation as sys_journal has it:
// "entry_type name" per entry, in index order.
func journalEntries(ctx context.Context, t *testing.T, srv *restateserver.Server, id string) []string {
	t.Helper()
	rows, err := srv.Query(ctx, fmt.Sprintf("SELECT index, entry_type, name FROM sys_journal WHERE id = '%s' ORDER BY index", id))
	if err != nil {
		t.Fatalf("query the journal of %s: %v", id, err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		e := fmt.Sprint(r["entry_type"])
		if name, _ := r["name"].(string); name != "" {
			e += " " + name
		}
		out = append(out, e)
	}
	return out
}

// countEntries counts the journal entries of journalEntries that are of
// one of the types ("Command: SetState").
func countEntries(entries []string, types ...string) int {
	n := 0
	for _, e := range entries {
		for _, typ := range types {
			if e == typ || strings.HasPrefix(e, typ+" ") {
				n++
			}
		}
	}
	return n
}

// invocationOf returns the id of the one invocation of service/handler
// for key.
func invocationOf(ctx context.Context, t *testing.T, srv *restateserver.Server, service, key, handler string) string {
	t.Helper()
	rows, err := srv.Query(ctx, fmt.Sprintf("SELECT id FROM sys_invocation WHERE target_service_name = '%s' AND target_service_key = '%s' AND target_handler_name = '%s'", service, key, handler))
	if err != nil {
		t.Fatalf("query sys_invocation for %s/%s/%s: %v", service, key, handler, err)
	}
	if len(rows) != 1 {
		t.Fatalf("sys_invocation has %d invocations of %s/%s/%s, want 1: %v", len(rows), service, key, handler, rows)
	}
	return fmt.Sprint(rows[0]["id"])
}

// ingress sends one request to srv's ingress at path (e.g.
// /restate/awakeables/ID/resolve) and returns the status and body.
func ingress(ctx context.Context, t *testing.T, srv *restateserver.Server, method, path, contentType, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, srv.IngressURL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("content-type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp.StatusCode, out
}

// "Shared: concurrent, reads state, cannot write it", for a Bash and a
// Python object. hold (exclusive) writes phase "holding" and an
// awakeable's id to the key's state, then waits on that awakeable (and
// suspends). The shared peek answers meanwhile with both, so it ran while
// hold held the key, and by ordering, not timing: hold can only go on once
// the test resolves the awakeable, whose id the test has only from peek's
// answer. The shared poke's state write fails terminally, naming the
// handler as shared, and journals nothing: peek still sees "holding", and
// poke's journal has no state write. Resolved, hold writes "released".
func testKeyedShared(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "keyed/gate.sh", "keyed/gate.py")
	var services []string
	for _, svc := range []struct{ name, runtime string }{{"GateSh", "bash"}, {"GatePy", "python"}} {
		services = append(services, keyedService(svc.name, virtualObject,
			keyedHandler("hold", svc.runtime, "gate.hold", keyedSteps),
			keyedHandler("peek", svc.runtime, "gate.peek", keyedSteps+", shared: true"),
			keyedHandler("poke", svc.runtime, "gate.poke", keyedSteps+", shared: true")))
	}
	keyedServe(t, env, ws, services...)
	ctx := caseContext(t)

	type peek struct {
		Phase *string `json:"phase"`
		Gate  *string `json:"gate"`
	}
	peekOf := func(t *testing.T, svc string) peek {
		t.Helper()
		var p peek
		out := callOK(ctx, t, env.srv, svc+"/g1", "peek", "null", nil)
		if err := json.Unmarshal(out, &p); err != nil {
			t.Fatalf("%s/g1/peek answered %s: %v", svc, out, err)
		}
		return p
	}
	str := func(s *string) string {
		if s == nil {
			return "<absent>"
		}
		return *s
	}
	for _, svc := range []string{"GateSh", "GatePy"} {
		t.Run(svc, func(t *testing.T) {
			holdID, err := env.srv.Send(ctx, svc+"/g1", "hold", []byte("null"), nil)
			if err != nil {
				t.Fatal(err)
			}
			var p peek
			testtool.Eventually(t, 30*time.Second, svc+": the shared peek sees the state hold wrote", func() (bool, string) {
				p = peekOf(t, svc)
				return str(p.Phase) == "holding" && strings.HasPrefix(str(p.Gate), "sign_1"), fmt.Sprintf("phase %s, gate %s", str(p.Phase), str(p.Gate))
			})
			if st, err := env.srv.InvocationStatus(ctx, holdID); err != nil || st == "completed" {
				t.Fatalf("hold is %q (%v) after peek answered; it cannot end before its awakeable is resolved", st, err)
			}

			out := callOK(ctx, t, env.srv, svc+"/g1", "poke", "null", nil)
			t.Logf("%s: the shared poke's write got %s", svc, out)
			var poke struct {
				Status  *int    `json:"status"`  // Bash: fnbridge's exit status
				Message string  `json:"message"` // Bash: its stderr
				Error   *string `json:"error"`   // Python: the exception's message
				Type    string  `json:"type"`
			}
			if err := json.Unmarshal(out, &poke); err != nil {
				t.Fatalf("poke answered %s: %v", out, err)
			}
			msg := poke.Message
			if svc == "GateSh" {
				if poke.Status == nil || *poke.Status != 100 {
					t.Errorf("Bash: fnbridge state set from the shared handler exited %v, want 100 (terminal)", poke.Status)
				}
			} else {
				if poke.Error == nil || poke.Type != "TerminalError" {
					t.Fatalf("Python: state.set from the shared handler raised %q %v, want TerminalError", poke.Type, poke.Error)
				}
				msg = *poke.Error
			}
			if !strings.Contains(msg, "poke") || !strings.Contains(msg, "shared") {
				t.Errorf("the refusal %q does not name the handler (poke) as shared", msg)
			}
			pokeID := invocationOf(ctx, t, env.srv, svc, "g1", "poke")
			if entries := journalEntries(ctx, t, env.srv, pokeID); countEntries(entries, "Command: SetState", "Command: ClearState", "Command: ClearAllState") > 0 {
				t.Errorf("poke's journal has a state entry: %v", entries)
			}
			if p = peekOf(t, svc); str(p.Phase) != "holding" {
				t.Errorf("after poke, phase is %s, want holding (the refused write changed it)", str(p.Phase))
			}

			value := fmt.Sprintf(`{"by":"test-%s"}`, svc)
			status, body := ingress(ctx, t, env.srv, http.MethodPost, "/restate/awakeables/"+url.PathEscape(*p.Gate)+"/resolve", "application/json", value)
			if status/100 != 2 {
				t.Fatalf("resolving %s through the ingress: %d %s", *p.Gate, status, body)
			}
			status, body = invocationOutput(t, env.srv, holdID, 30*time.Second)
			if status != http.StatusOK {
				t.Fatalf("hold after the resolution: %d %s", status, body)
			}
			assertJSON(t, svc+" hold", body, fmt.Sprintf(`{"released_with":%s}`, value))
			if p = peekOf(t, svc); str(p.Phase) != "released" {
				t.Errorf("after hold, phase is %s, want released", str(p.Phase))
			}
		})
	}
}

// "A Python workflow: POST /Signup/{id}/run/send waits on a promise; a
// shared handler resolves it; attaching to the workflow's output returns
// the result; a second run for the same id gets Restate's answer for an
// existing workflow." run (Python) writes its stage and waits on the
// promise "approval", suspending; the shared status (Python) peeks at the
// promise (absent: null) and the shared approve (Bash) resolves it. GET
// /restate/workflow/Signup/{id}/attach (restate-server 1.7.12's ingress
// path) then returns run's result, and so does .../output. A second
// /run/send for the id is answered with the first run's invocation id and
// status "PreviouslyAccepted", and a second /run call (which would wait
// for a result) with 409 "the workflow method was already invoked": run
// executes once per id. A rejected promise (the shared deny)
// raises TerminalError in run, which fails the workflow with its message.
func testKeyedWorkflow(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "keyed/signup.py", "keyed/signup.sh")
	keyedServe(t, env, ws, keyedService("Signup", []string{"type: workflow"},
		keyedHandler("run", "python", "signup.run", keyedSteps),
		keyedHandler("status", "python", "signup.status", keyedSteps),
		keyedHandler("approve", "bash", "signup.approve", keyedSteps),
		keyedHandler("deny", "bash", "signup.deny", keyedSteps)))
	ctx := caseContext(t)

	type submission struct {
		InvocationID string `json:"invocationId"`
		Status       string `json:"status"`
	}
	submit := func(id string) (int, submission, []byte) {
		t.Helper()
		status, body := ingress(ctx, t, env.srv, http.MethodPost, "/Signup/"+id+"/run/send", "application/json", fmt.Sprintf(`{"email":"%s@example.com"}`, id))
		var s submission
		_ = json.Unmarshal(body, &s)
		return status, s, body
	}
	waitWaiting := func(id string) {
		t.Helper()
		testtool.Eventually(t, 30*time.Second, id+": run waits on the approval promise", func() (bool, string) {
			out := callOK(ctx, t, env.srv, "Signup/"+id, "status", "null", nil)
			var s struct {
				Stage    *string         `json:"stage"`
				Approval json.RawMessage `json:"approval"`
			}
			_ = json.Unmarshal(out, &s)
			return s.Stage != nil && *s.Stage == "waiting" && string(s.Approval) == "null", string(out)
		})
	}

	status, first, body := submit("ada")
	if status/100 != 2 || !strings.HasPrefix(first.InvocationID, "inv_") {
		t.Fatalf("POST /Signup/ada/run/send: %d %s", status, body)
	}
	t.Logf("the first run/send: %d %s", status, body)
	waitWaiting("ada")
	// promise.get() outlasts suspend_after: the workflow suspends until
	// the promise is completed.
	waitStatus(ctx, t, env.srv, first.InvocationID, "suspended")

	out := callOK(ctx, t, env.srv, "Signup/ada", "approve", `{"by":"ops"}`, nil)
	assertJSON(t, "approve", out, `{"resolved":true}`)
	want := `{"id":"ada","email":"ada@example.com","approved_by":"ops"}`
	status, body = ingress(ctx, t, env.srv, http.MethodGet, "/restate/workflow/Signup/ada/attach", "", "")
	if status != http.StatusOK {
		t.Fatalf("attach to Signup/ada: %d %s", status, body)
	}
	assertJSON(t, "the workflow's result through attach", body, want)
	status, body = ingress(ctx, t, env.srv, http.MethodGet, "/restate/workflow/Signup/ada/output", "", "")
	if status != http.StatusOK {
		t.Fatalf("output of Signup/ada: %d %s", status, body)
	}
	assertJSON(t, "the workflow's result through output", body, want)
	out = callOK(ctx, t, env.srv, "Signup/ada", "status", "null", nil)
	assertJSON(t, "status after the run", out, `{"stage":"done","approval":{"by":"ops"}}`)

	// A workflow runs once per id.
	status, again, body := submit("ada")
	t.Logf("a second run/send for ada: %d %s", status, body)
	if status/100 != 2 || again.InvocationID != first.InvocationID || again.Status != "PreviouslyAccepted" {
		t.Errorf("a second run/send for ada answered %d %s, want the first run's invocation id %s with status PreviouslyAccepted", status, body, first.InvocationID)
	}
	status, body = ingress(ctx, t, env.srv, http.MethodPost, "/Signup/ada/run", "application/json", `{"email":"other@example.com"}`)
	t.Logf("a second run call for ada: %d %s", status, body)
	if status != http.StatusConflict || !strings.Contains(string(body), "already invoked") {
		t.Errorf("a second run call for ada answered %d %s, want 409: the workflow method was already invoked", status, body)
	}
	runs := 0
	for _, r := range invocationRows(ctx, t, env.srv, "Signup", "target_handler_name, target_service_key") {
		if r["target_handler_name"] == "run" && r["target_service_key"] == "ada" {
			runs++
		}
	}
	if runs != 1 {
		t.Errorf("restate has %d run invocations of Signup/ada, want 1", runs)
	}

	// A rejected promise fails the workflow terminally with its reason.
	status, denied, body := submit("bob")
	if status/100 != 2 {
		t.Fatalf("POST /Signup/bob/run/send: %d %s", status, body)
	}
	waitWaiting("bob")
	out = callOK(ctx, t, env.srv, "Signup/bob", "deny", "null", nil)
	assertJSON(t, "deny", out, `{"rejected":true}`)
	status, body = ingress(ctx, t, env.srv, http.MethodGet, "/restate/workflow/Signup/bob/attach", "", "")
	if status == http.StatusOK || !strings.Contains(string(body), "not on the guest list") || !strings.Contains(string(body), "denied") {
		t.Errorf("attach to the denied Signup/bob: %d %s, want a failure carrying the rejection", status, body)
	}
	row := invocationRow(ctx, t, env.srv, denied.InvocationID, "status, completion_result, completion_failure")
	if row["status"] != "completed" || row["completion_result"] != "failure" {
		t.Errorf("the denied workflow ended %v, want completed with a failure", row)
	}
}

// "An awakeable resolved through Restate's ingress (POST
// /restate/awakeables/{id}/resolve) resumes a suspended Bash and a
// suspended Python function; rejection (.../reject) raises in Python
// (TerminalError) and exits 100 in Bash." Each function announces its
// awakeable's id in a step and waits on it; the test sees Restate show
// the invocation suspended before it resolves or rejects the awakeable.
// That the function resumed in a new attempt which replayed the journal
// shows three ways: its code outside steps ran again (two attempt lines
// or more), the announce step did not (one id line), and the bridge logged
// the first attempt as suspended and the last as ok.
func testKeyedAwakeables(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "keyed/wake.py", "keyed/wake.sh")
	b := keyedServe(t, env, ws, keyedService("Wake", nil,
		keyedHandler("py", "python", "wake.park", keyedSteps+", concurrency: 2"),
		keyedHandler("sh", "bash", "wake.park", keyedSteps+", concurrency: 2")))
	ctx := caseContext(t)

	type waiter struct {
		handler, tag, verb string
		invocation, id     string
	}
	var waiters []*waiter
	for _, h := range []string{"py", "sh"} {
		for _, verb := range []string{"resolve", "reject"} {
			w := &waiter{handler: h, tag: h + "-" + verb, verb: verb}
			id, err := env.srv.Send(ctx, "Wake", h, []byte(fmt.Sprintf(`{"tag":%q}`, w.tag)), nil)
			if err != nil {
				t.Fatal(err)
			}
			w.invocation = id
			waiters = append(waiters, w)
		}
	}
	for _, w := range waiters {
		waitStatus(ctx, t, env.srv, w.invocation, "suspended")
		ids := ws.lines(t, "keyed/"+w.tag+".id")
		if len(ids) != 1 || !strings.HasPrefix(ids[0], "sign_1") {
			t.Fatalf("%s announced the awakeable ids %q, want one sign_1… id", w.tag, ids)
		}
		w.id = ids[0]
	}
	for _, w := range waiters {
		path := "/restate/awakeables/" + url.PathEscape(w.id) + "/" + w.verb
		var status int
		var body []byte
		if w.verb == "resolve" {
			status, body = ingress(ctx, t, env.srv, http.MethodPost, path, "application/json", fmt.Sprintf(`{"ok":%q}`, w.tag))
		} else {
			status, body = ingress(ctx, t, env.srv, http.MethodPost, path, "text/plain", "no for "+w.tag)
		}
		if status/100 != 2 {
			t.Fatalf("POST %s: %d %s", path, status, body)
		}
	}
	for _, w := range waiters {
		status, body := invocationOutput(t, env.srv, w.invocation, 30*time.Second)
		if status != http.StatusOK {
			t.Errorf("%s: %d %s", w.tag, status, body)
			continue
		}
		switch {
		case w.verb == "resolve":
			assertJSON(t, w.tag, body, fmt.Sprintf(`{"value":{"ok":%q}}`, w.tag))
		case w.handler == "py":
			var got struct{ Rejected, Type string }
			if err := json.Unmarshal(body, &got); err != nil || got.Type != "TerminalError" || !strings.Contains(got.Rejected, "no for "+w.tag) {
				t.Errorf("%s answered %s (%v), want the TerminalError carrying the rejection", w.tag, body, err)
			}
		default:
			assertJSON(t, w.tag, body, `{"rejected":true,"status":100}`)
			if errs := strings.Join(ws.lines(t, "keyed/"+w.tag+".err"), "\n"); !strings.Contains(errs, "no for "+w.tag) {
				t.Errorf("%s: fnbridge await's stderr %q does not carry the rejection", w.tag, errs)
			}
		}
		if n := len(ws.lines(t, "keyed/"+w.tag+".attempts")); n < 2 {
			t.Errorf("%s ran %d attempt(s), want 2 or more (suspended, then resumed)", w.tag, n)
		}
		if n := len(ws.lines(t, "keyed/"+w.tag+".id")); n != 1 {
			t.Errorf("%s: the announce step ran %d times, want 1 (replayed on resumption)", w.tag, n)
		}
		suspendedThenOK(t, b.bridgeChild, w.invocation, w.tag)
	}
}

// "Cancellation: fnbridge.cancel(invocation_id); a cancelled invocation's
// pending futures raise TerminalError with code 409." A Python and a Bash
// function wait, suspended, on an awakeable nobody resolves; a Bash stop
// handler cancels the Python one (fnbridge cancel) and a Python stop
// handler the Bash one (fnbridge.cancel). Each resumes with its wait
// failed: Python's future.result() raises TerminalError with code 409,
// Bash's fnbridge await exits 100; both answer, and end, normally.
func testKeyedCancel(t *testing.T, env *bridgeEnv) {
	ws := serveParks(t, env, "Stop", "stop", "wake.stop")
	ctx := caseContext(t)

	waiters := map[string]string{}
	for _, h := range []string{"py", "sh"} {
		id, err := env.srv.Send(ctx, "Stop", h, []byte(fmt.Sprintf(`{"tag":"cancel-%s"}`, h)), nil)
		if err != nil {
			t.Fatal(err)
		}
		waiters[h] = id
		waitStatus(ctx, t, env.srv, id, "suspended")
	}
	// Each runtime cancels the other's waiter.
	out := callOK(ctx, t, env.srv, "Stop", "stop_sh", fmt.Sprintf(`{"id":%q}`, waiters["py"]), nil)
	assertJSON(t, "Bash stop", out, fmt.Sprintf(`{"cancelled":%q}`, waiters["py"]))
	out = callOK(ctx, t, env.srv, "Stop", "stop_py", fmt.Sprintf(`{"id":%q}`, waiters["sh"]), nil)
	assertJSON(t, "Python stop", out, fmt.Sprintf(`{"cancelled":%q}`, waiters["sh"]))

	status, body := invocationOutput(t, env.srv, waiters["py"], 30*time.Second)
	var py struct {
		Type string `json:"type"`
		Code *int   `json:"code"`
	}
	if err := json.Unmarshal(body, &py); status != http.StatusOK || err != nil || py.Type != "TerminalError" || py.Code == nil || *py.Code != 409 {
		t.Errorf("the cancelled Python waiter answered %d %s, want its wait to raise TerminalError with code 409", status, body)
	}
	status, body = invocationOutput(t, env.srv, waiters["sh"], 30*time.Second)
	if status != http.StatusOK {
		t.Fatalf("the cancelled Bash waiter: %d %s", status, body)
	}
	assertJSON(t, "the cancelled Bash waiter", body, `{"rejected":true,"status":100}`)
	t.Logf("the cancelled Bash wait said: %q", ws.lines(t, "keyed/cancel-sh.err"))
}

// As the Restate SDKs do (implicit cancellation of calls): a cancelled
// invocation that takes its cancellation cancels the invocations it
// called. A Python caller waits on a Bash park and a Bash caller on a
// Python park, each park suspended on an awakeable nobody resolves; the
// callers are cancelled through the admin API. Each caller answers with
// its cancellation, and each callee, cancelled in turn, answers with its
// own (without the propagation the callees would wait forever).
func testKeyedCancelCalls(t *testing.T, env *bridgeEnv) {
	// Its own service name: the cases of a group share a restate-server,
	// where the latest deployment of a service decides its handlers.
	serveParks(t, env, "Hang", "call", "wake.call_park")
	ctx := caseContext(t)
	for _, c := range []struct{ caller, tag, callerWant, calleeWant string }{
		{"call_py", "cc-py", `{"parent":"cancelled","code":409}`, `{"rejected":true,"status":100}`},
		{"call_sh", "cc-sh", `{"parent":"cancelled","status":100}`, `{"rejected":"cancelled","type":"TerminalError","code":409}`},
	} {
		caller, err := env.srv.Send(ctx, "Hang", c.caller, []byte(fmt.Sprintf(`{"tag":%q,"service":"Hang"}`, c.tag)), nil)
		if err != nil {
			t.Fatal(err)
		}
		callee := calleeOf(ctx, t, env.srv, caller)
		waitStatus(ctx, t, env.srv, callee, "suspended")
		if err := env.srv.CancelInvocation(ctx, caller); err != nil {
			t.Fatal(err)
		}
		status, body := invocationOutput(t, env.srv, caller, 30*time.Second)
		if status != http.StatusOK {
			t.Fatalf("the cancelled caller %s: %d %s", c.caller, status, body)
		}
		assertJSON(t, "the cancelled caller "+c.caller, body, c.callerWant)
		status, body = invocationOutput(t, env.srv, callee, 30*time.Second)
		if status != http.StatusOK {
			t.Fatalf("the callee of %s: %d %s, want it cancelled and answered", c.caller, status, body)
		}
		assertJSON(t, "the callee of "+c.caller, body, c.calleeWant)
	}
}

// serveParks serves service of keyed/wake.py and keyed/wake.sh: py and
// sh park on an awakeable, and PREFIX_py and PREFIX_sh run the function
// fn of the Python and the Bash file.
func serveParks(t *testing.T, env *bridgeEnv, service, prefix, fn string) *fnWorkspace {
	t.Helper()
	ws := newWorkspace(t, "keyed/wake.py", "keyed/wake.sh")
	keyedServe(t, env, ws, keyedService(service, nil,
		keyedHandler("py", "python", "wake.park", keyedSteps),
		keyedHandler("sh", "bash", "wake.park", keyedSteps),
		keyedHandler(prefix+"_py", "python", fn, keyedSteps),
		keyedHandler(prefix+"_sh", "bash", fn, keyedSteps)))
	return ws
}

// calleeOf waits for the invocation that caller called and returns its id.
func calleeOf(ctx context.Context, t *testing.T, srv *restateserver.Server, caller string) string {
	t.Helper()
	for {
		rows, err := srv.Query(ctx, fmt.Sprintf(`SELECT id FROM sys_invocation WHERE invoked_by_id = '%s'`, caller))
		if err == nil && len(rows) == 1 {
			if id, _ := rows[0]["id"].(string); id != "" {
				return id
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no invocation called by %s: %v %v", caller, rows, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// "Lazy state: with enableLazyState in the manifest, reads go through
// GetLazyState and still return the right values." The same handlers serve
// LazyBag (lazy_state: true) and EagerBag: fill writes three entries; the
// Python read reads them, a missing one (its default), one it writes
// itself in the same attempt, and the keys; the Bash read_sh reads two,
// an absent one (exit 1, nothing printed) and the keys. Both objects give
// the same answers. LazyBag's journals show the lazy path ran: a
// GetLazyState command for each name read before this attempt wrote it and
// GetLazyStateKeys for the keys, where EagerBag's have GetEagerState and
// GetEagerStateKeys; a name read after the attempt wrote it is answered
// from the local view (GetEagerState) on both, the spec's eager-state rule.
func testKeyedLazyState(t *testing.T, env *bridgeEnv) {
	ws := newWorkspace(t, "keyed/bag.py", "keyed/bag.sh")
	var services []string
	for _, svc := range []struct {
		name   string
		fields []string
	}{{"LazyBag", append(virtualObject, "lazy_state: true")}, {"EagerBag", virtualObject}} {
		services = append(services, keyedService(svc.name, svc.fields,
			keyedHandler("fill", "python", "bag.fill", keyedSteps),
			keyedHandler("read", "python", "bag.read", keyedSteps),
			keyedHandler("read_sh", "bash", "bag.read_sh", keyedSteps+", shared: true")))
	}
	keyedServe(t, env, ws, services...)
	ctx := caseContext(t)

	for _, svc := range []string{"LazyBag", "EagerBag"} {
		callOK(ctx, t, env.srv, svc+"/b1", "fill", `{"alpha":1,"beta":"two","gamma":[3]}`, nil)
		out := callOK(ctx, t, env.srv, svc+"/b1", "read", "null", nil)
		assertJSON(t, svc+" read", out, `{"values":{"alpha":1,"beta":"two","gamma":[3],"missing":"default","delta":{"late":true}},"keys":["alpha","beta","delta","gamma"]}`)
		out = callOK(ctx, t, env.srv, svc+"/b1", "read_sh", "null", nil)
		assertJSON(t, svc+" read_sh", out, `{"alpha":1,"gamma":[3],"missing_status":1,"keys":["alpha","beta","delta","gamma"]}`)

		// read reads four names it has not written (alpha, beta, gamma,
		// missing), then delta after writing it, then the keys; read_sh
		// reads three names and the keys.
		for _, c := range []struct {
			handler                         string
			unwritten, afterWrite, keyLists int
		}{{"read", 4, 1, 1}, {"read_sh", 3, 0, 1}} {
			entries := journalEntries(ctx, t, env.srv, invocationOf(ctx, t, env.srv, svc, "b1", c.handler))
			t.Logf("%s/%s journal: %v", svc, c.handler, entries)
			got := map[string]int{}
			for _, typ := range []string{"GetLazyState", "GetLazyStateKeys", "GetEagerState", "GetEagerStateKeys"} {
				got[typ] = countEntries(entries, "Command: "+typ)
			}
			want := map[string]int{"GetLazyState": 0, "GetLazyStateKeys": 0, "GetEagerState": c.unwritten + c.afterWrite, "GetEagerStateKeys": c.keyLists}
			if svc == "LazyBag" {
				// Without eager state every read of a name goes to Restate,
				// except one this attempt wrote: the local view answers it.
				want = map[string]int{"GetLazyState": c.unwritten, "GetLazyStateKeys": c.keyLists, "GetEagerState": c.afterWrite, "GetEagerStateKeys": 0}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s/%s journaled the state reads %v, want %v", svc, c.handler, got, want)
			}
		}
	}
}

// The examples the README and `make demo` use stay loadable: `bridge
// manifest` of examples/bridge.yaml types Counter as a virtual object
// (add exclusive, get shared) and Signup as a workflow (run the workflow,
// status shared). And the configuration refuses, naming the field, a
// shared handler on a plain service and a workflow without run.
func testKeyedManifest(t *testing.T, env *bridgeEnv) {
	stdout, stderr, code := runBridge(t, 30*time.Second, "manifest", "--config", filepath.Join("..", "examples", "bridge.yaml"))
	if code != 0 {
		t.Fatalf("bridge manifest of examples/bridge.yaml: exit %d\n%s", code, stderr)
	}
	var m struct {
		Services []struct {
			Name     string `json:"name"`
			Ty       string `json:"ty"`
			Handlers []struct {
				Name string `json:"name"`
				Ty   string `json:"ty"`
			} `json:"handlers"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("manifest is not JSON: %v\n%s", err, stdout)
	}
	got := map[string]string{}
	for _, s := range m.Services {
		got[s.Name] = s.Ty
		for _, h := range s.Handlers {
			got[s.Name+"/"+h.Name] = h.Ty
		}
	}
	for k, want := range map[string]string{
		"Counter": "VIRTUAL_OBJECT", "Counter/add": "EXCLUSIVE", "Counter/get": "SHARED",
		"Signup": "WORKFLOW", "Signup/run": "WORKFLOW", "Signup/status": "SHARED",
		"Greeter": "SERVICE",
	} {
		if got[k] != want {
			t.Errorf("the examples' manifest types %s as %q, want %s (all: %v)", k, got[k], want, got)
		}
	}

	ws := newWorkspace(t, "keyed/counter.sh")
	for _, c := range []struct{ yaml, field, what string }{
		{"services:\n" + keyedService("Plain", nil, keyedHandler("get", "bash", "counter.get", keyedSteps+", shared: true")),
			"services[0].handlers[0].shared", "shared"},
		{"services:\n" + keyedService("NoRun", []string{"type: workflow"}, keyedHandler("status", "bash", "counter.get", keyedSteps)),
			"services[0]", "run"},
	} {
		cfg := ws.config(t, c.yaml)
		stdout, stderr, code := runBridge(t, 30*time.Second, "manifest", "--config", cfg)
		if code == 0 {
			t.Errorf("bridge manifest accepted\n%s\nand printed %s", c.yaml, stdout)
			continue
		}
		if !strings.Contains(stderr, c.field) || !strings.Contains(stderr, c.what) {
			t.Errorf("the refusal of\n%s\nis %q; want it to name %s and say %q", c.yaml, stderr, c.field, c.what)
		}
	}
}
