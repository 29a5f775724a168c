package e2e

// Keyed services, smoke test: a Bash virtual object and a Python
// awakeable behind the real restate-server 1.7.12, on protocol v6 and v7.
// (The full proof of keyed services lives in keyed_test.go.)

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

func TestKeyedSmoke(t *testing.T) {
	requireInterpreters(t)
	cases := func(version int) []bridgeCase {
		return []bridgeCase{
			{"a Bash virtual object: exclusive add, shared get and its refused write, the state in Restate", testKeyedCounterSmoke(version)},
			{"a suspended Python function resumes when its awakeable is resolved through the ingress", testAwakeableIngressSmoke(version)},
		}
	}
	runBridgeGroups(t, []bridgeGroup{
		{name: "protocol v6", setup: func(t *testing.T, env *bridgeEnv) { env.srv = restateserver.Start(t, restateserver.Options{}) }, cases: cases(6)},
		{name: "protocol v7", setup: func(t *testing.T, env *bridgeEnv) {
			env.srv = restateserver.Start(t, restateserver.Options{EnableProtocolV7: true})
		}, cases: cases(7)},
	})
}

// counterSh is a Bash virtual object: add (exclusive) adds its input to
// the state key count and prints the key and the new count; get (shared)
// prints count; tamper (shared) tries to write it.
const counterSh = `add() {
	local n
	n=$(fnbridge state get count) || n=0
	n=$((n + $1))
	fnbridge state set count "$n" || exit
	printf '{"key":"%s","count":%d}\n' "$(fnbridge key)" "$n"
}

get() {
	fnbridge state get count || echo 0
}

tamper() {
	fnbridge state set count 0 2>&1
	echo "status $?"
}
`

// Rule (issue 12): a virtual object keeps one durable state per key; the
// exclusive handler changes it, a shared one reads it, and "a state-writing
// call from a shared handler" fails with a clear terminal error (Bash:
// exit 100, the reason naming the handler as shared) and changes nothing.
// The state is read back from Restate's own state table.
func testKeyedCounterSmoke(version int) func(*testing.T, *bridgeEnv) {
	return func(t *testing.T, env *bridgeEnv) {
		svc := fmt.Sprintf("CounterV%d", version)
		ws := newWorkspace(t)
		writeFile(t, filepath.Join(ws.fn, "counter.sh"), counterSh)
		cfg := ws.config(t, fmt.Sprintf(`services:
  - name: %s
    type: virtual_object
    handlers:
      - {name: add, runtime: bash, dir: fn, handler: counter.add, durability: steps}
      - {name: get, runtime: bash, dir: fn, handler: counter.get, durability: steps, shared: true}
      - {name: tamper, runtime: bash, dir: fn, handler: counter.tamper, durability: steps, shared: true}
`, svc))
		serveAndRegister(t, env, cfg)
		ctx := caseContext(t)
		call := func(key, handler, input string) string {
			t.Helper()
			status, body, err := env.srv.Call(ctx, svc+"/"+key, handler, []byte(input), nil)
			if err != nil || status != http.StatusOK {
				t.Fatalf("%s/%s/%s: %d %s %v", svc, key, handler, status, body, err)
			}
			return string(body)
		}
		assertJSON(t, "add 5 to k1", []byte(call("k1", "add", "5")), `{"key":"k1","count":5}`)
		assertJSON(t, "add 7 to k1", []byte(call("k1", "add", "7")), `{"key":"k1","count":12}`)
		assertJSON(t, "add 1 to k-2", []byte(call("k-2", "add", "1")), `{"key":"k-2","count":1}`)
		if got := call("k1", "get", ""); got != "12" {
			t.Fatalf("shared get of k1 = %q, want 12", got)
		}
		got := call("k1", "tamper", "")
		if !strings.Contains(got, "state set refused: "+svc+"/tamper is a shared handler") || !strings.HasSuffix(got, "status 100") {
			t.Fatalf("the shared handler's write: %q, want the refusal naming it shared and status 100", got)
		}
		rows, err := env.srv.Query(ctx, "SELECT service_key, key, value_utf8 FROM state WHERE service_name = '"+svc+"' ORDER BY service_key")
		if err != nil {
			t.Fatal(err)
		}
		var state []string
		for _, r := range rows {
			state = append(state, fmt.Sprintf("%v %v=%v", r["service_key"], r["key"], r["value_utf8"]))
		}
		if want := []string{"k-2 count=1", "k1 count=12"}; fmt.Sprint(state) != fmt.Sprint(want) {
			t.Fatalf("Restate's state table: %v, want %v", state, want)
		}
	}
}

// approvalPy waits for an awakeable whose id it publishes in a file of
// its working directory (inside a step, so once).
const approvalPy = `import fnbridge

def publish(aid):
    with open("awakeable-id", "w") as f:
        f.write(aid)
    return aid

def wait(event):
    aid, fut = fnbridge.awakeable()
    fnbridge.run("publish", publish, aid)
    return {"approved": fut.result(), "id": aid}
`

// Rule (issue 12): "Awakeables resolved through Restate's ingress (POST
// /restate/awakeables/{id}/resolve) must resume a suspended function". The
// function waits past suspend_after, Restate shows it suspended, the
// ingress resolves the id the function published, and a new attempt
// returns the value: the bridge logs the suspended attempt, then ok.
func testAwakeableIngressSmoke(version int) func(*testing.T, *bridgeEnv) {
	return func(t *testing.T, env *bridgeEnv) {
		svc := fmt.Sprintf("ApprovalV%d", version)
		ws := newWorkspace(t)
		writeFile(t, filepath.Join(ws.fn, "approval.py"), approvalPy)
		cfg := ws.config(t, fmt.Sprintf(`services:
  - name: %s
    handlers:
      - {name: wait, runtime: python, dir: fn, handler: approval.wait, durability: steps, suspend_after: 1s}
`, svc))
		b := serveAndRegister(t, env, cfg)
		ctx := caseContext(t)
		id, err := env.srv.Send(ctx, svc, "wait", []byte(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		var aid string
		testtool.Eventually(t, 30*time.Second, "the function publishes its awakeable id", func() (bool, string) {
			b, err := os.ReadFile(filepath.Join(ws.fn, "awakeable-id"))
			aid = string(b)
			return err == nil && aid != "", fmt.Sprint(err)
		})
		if !strings.HasPrefix(aid, "sign_1") {
			t.Fatalf("awakeable id %q, want sign_1...", aid)
		}
		testtool.Eventually(t, 30*time.Second, "Restate shows the waiting invocation suspended", func() (bool, string) {
			st, err := env.srv.InvocationStatus(ctx, id)
			if err != nil {
				return false, err.Error()
			}
			return st == "suspended", st
		})
		resp, err := http.Post(env.srv.IngressURL()+"/restate/awakeables/"+aid+"/resolve", "application/json", bytes.NewReader([]byte(`{"by":"ops"}`)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("resolving through the ingress: %d %s", resp.StatusCode, body)
		}
		status, out := invocationOutput(t, env.srv, id, 30*time.Second)
		if status != http.StatusOK {
			t.Fatalf("output: %d %s", status, out)
		}
		assertJSON(t, "the resumed function's output", out, fmt.Sprintf(`{"approved":{"by":"ops"},"id":%q}`, aid))
		suspendedThenOK(t, b.bridgeChild, id, "the awakeable's waiter")
	}
}
