package e2e

// "Results that can never be misattributed": worker-level trust cases the
// adapter packages test against one worker (functionruntime/python
// trust_ext_test.go, functionruntime/bash trust_ext_test.go), here through
// `bridge serve` and restate-server. Each case asserts what Restate
// records (the invocation's output, its journaled run record, its
// failure and retry state in sys_invocation) and that a bystander
// registration in the same bridge serves during and after the case.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

const trustWorkersConfig = `services:
  - name: TrustWorkers
    handlers:
      - {name: fork, runtime: python, dir: fn, handler: trust_workers.fork}
      - name: forge
        runtime: python
        dir: fn
        handler: trust_workers.forge
        # Retries come quickly and evenly, so the test sees the failure
        # Restate records and the retry after the gate opens without waiting
        # out an exponential backoff.
        retry_policy: {initial_interval: 100ms, max_interval: 200ms}
      - {name: late, runtime: python, dir: fn, handler: trust_workers.late_outputs}
      - {name: pyecho, runtime: python, dir: fn, handler: trust_workers.echo}
      - {name: unserializable, runtime: python, dir: fn, handler: trust_workers.unserializable}
      - name: shlate
        runtime: bash
        dir: fn
        handler: trust_workers.run
        retry_policy: {initial_interval: 100ms, max_interval: 200ms}
      - {name: payload, runtime: bash, dir: fn, handler: trust_workers.payload}
  - name: TrustWorkersBystander
    handlers:
      - {name: echo, runtime: python, dir: fn, handler: echo.echo}
`

// workersFixture is one restate-server and one bridge serving
// trustWorkersConfig.
type workersFixture struct {
	srv *restateserver.Server
	b   *bridgeServe
	ws  *fnWorkspace
	ctx context.Context
	n   int
}

// call invokes TrustWorkers/handler and returns the status and body.
func (f *workersFixture) call(t *testing.T, handler, body string) (int, []byte) {
	t.Helper()
	status, out, err := f.srv.Call(f.ctx, "TrustWorkers", handler, []byte(body), nil)
	if err != nil {
		t.Fatalf("call TrustWorkers/%s: %v", handler, err)
	}
	return status, out
}

// bystander is the "other registration keeps serving" check after a case.
func (f *workersFixture) bystander(t *testing.T) {
	t.Helper()
	f.n++
	out := callOK(f.ctx, t, f.srv, "TrustWorkersBystander", "echo", fmt.Sprintf(`{"n":%d}`, f.n), nil)
	assertJSON(t, "bystander", out, fmt.Sprintf(`{"echo":{"n":%d}}`, f.n))
}

// alongside runs the case fn while the bystander is invoked over and over
// on another goroutine, and fails unless every bystander call answered
// its own input and at least one completed while fn ran; then the
// bystander is called once more.
func (f *workersFixture) alongside(t *testing.T, fn func()) {
	t.Helper()
	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []string
		served   int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			in := fmt.Sprintf(`{"during":%d}`, i)
			status, out, err := f.srv.Call(f.ctx, "TrustWorkersBystander", "echo", []byte(in), nil)
			mu.Lock()
			if err != nil || status != http.StatusOK || !jsonEqual(out, `{"echo":`+in+`}`) {
				problems = append(problems, fmt.Sprintf("%d %s %v", status, out, err))
			} else {
				served++
			}
			mu.Unlock()
			if err != nil {
				return
			}
			time.Sleep(pollEvery) // pacing, not synchronisation
		}
	}()
	fn()
	mu.Lock()
	n := served
	mu.Unlock()
	close(stop)
	wg.Wait()
	if len(problems) > 0 {
		t.Errorf("the bystander failed while the case ran: %v", problems)
	}
	if n == 0 {
		t.Errorf("no bystander invocation completed while the case ran")
	}
	f.bystander(t)
}

func jsonEqual(got []byte, want string) bool {
	var g, w any
	return json.Unmarshal(got, &g) == nil && json.Unmarshal([]byte(want), &w) == nil && reflect.DeepEqual(g, w)
}

// runRecord is the fnbridge record journaled as the value of an
// invocation's "invoke" run (README, "What Restate sees").
type runRecord struct {
	Output  json.RawMessage   `json:"output"`
	Outputs map[string]string `json:"outputs"`
}

// journaledRecord reads the run record of invocation id from sys_journal.
func journaledRecord(ctx context.Context, t *testing.T, srv *restateserver.Server, id string) runRecord {
	t.Helper()
	rows, err := srv.Query(ctx, fmt.Sprintf("SELECT entry_type, name, entry_json FROM sys_journal WHERE id = '%s' ORDER BY index", id))
	if err != nil {
		t.Fatalf("query sys_journal for %s: %v", id, err)
	}
	for _, r := range rows {
		if fmt.Sprint(r["entry_type"]) != "Notification: Run" {
			continue
		}
		raw := findValue(fmt.Sprint(r["entry_json"]))
		if raw == nil {
			continue
		}
		var rec runRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatalf("journaled run value of %s is not an fnbridge record: %v: %s", id, err, raw)
		}
		return rec
	}
	t.Fatalf("no journaled run value for %s in %v", id, rows)
	return runRecord{}
}

// findValue digs the run's value out of an entry_json: the first string
// that is base64 of a JSON object holding "output" or "outputs".
func findValue(entryJSON string) []byte {
	var v any
	if json.Unmarshal([]byte(entryJSON), &v) != nil {
		return nil
	}
	var found []byte
	var walk func(any)
	walk = func(x any) {
		if found != nil {
			return
		}
		switch x := x.(type) {
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			// A byte array, as sys_journal writes a run's value.
			b := make([]byte, 0, len(x))
			for _, e := range x {
				n, ok := e.(float64)
				if !ok || n < 0 || n > 255 {
					for _, e := range x {
						walk(e)
					}
					return
				}
				b = append(b, byte(n))
			}
			var rec map[string]json.RawMessage
			if json.Unmarshal(b, &rec) == nil && (rec["outputs"] != nil || rec["output"] != nil) {
				found = b
			}
		case string:
			for _, dec := range []func(string) ([]byte, error){base64.StdEncoding.DecodeString, func(s string) ([]byte, error) { return []byte(s), nil }} {
				b, err := dec(x)
				var rec map[string]json.RawMessage
				if err == nil && json.Unmarshal(b, &rec) == nil && (rec["outputs"] != nil || rec["output"] != nil) {
					found = b
					return
				}
			}
		}
	}
	walk(v)
	return found
}

func TestTrustWorkers(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{})
	ws := newWorkspace(t, "trust_workers.py", "trust_workers.sh", "echo.py")
	b := startBridge(t, ws.config(t, trustWorkersConfig), testtool.FreeAddr(t))
	srv.Register(t, b.URI(), false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := &workersFixture{srv: srv, b: b, ws: ws, ctx: ctx}
	f.bystander(t)

	// README: a child made with os.fork() exits if it returns from the
	// handler; the invocation's output is the parent's.
	t.Run("a Python os.fork() child that returns never answers", func(t *testing.T) {
		f.alongside(t, func() {
			status, out := f.call(t, "fork", `"fork"`)
			if status != http.StatusOK {
				t.Fatalf("fork: %d %s", status, out)
			}
			assertJSON(t, "forking invocation's output", out, `{"in":"fork","from":"parent"}`)
			for _, in := range []string{"a", "b"} {
				_, out := f.call(t, "fork", `"`+in+`"`)
				var got struct{ In string }
				if err := json.Unmarshal(out, &got); err != nil || got.In != in {
					t.Fatalf("invocation %q after the fork answered %s", in, out)
				}
			}
		})
	})

	// README: bytes written straight to the worker's pipes never become a
	// result; the invocation in flight fails (retryably: Restate records
	// the failure and retries) on a fresh worker.
	t.Run("a Python frame forged on the worker's pipe via /proc/self/fd fails the invocation retryably", func(t *testing.T) {
		gate := filepath.Join(ws.fn, "forge-gate")
		writeFile(t, gate, "")
		var id string
		f.alongside(t, func() {
			var err error
			if id, err = srv.Send(ctx, "TrustWorkers", "forge", []byte(`"guess"`), nil); err != nil {
				t.Fatal(err)
			}
			var row map[string]any
			testtool.Eventually(t, 20*time.Second, "Restate records the forged frame's failure and retries", func() (bool, string) {
				row = invocationRow(ctx, t, srv, id, "status, retry_count, last_failure, last_failure_error_code")
				n, _ := row["retry_count"].(float64)
				return n >= 1 && strings.Contains(fmt.Sprint(row["last_failure"]), "forged or stray frame"), fmt.Sprint(row)
			})
			t.Logf("while forging: %v", row)
			for _, w := range []string{"[500 Internal] invocation " + id + ": worker crashed: python worker died during the invocation",
				"response frame 'R' names request id ", "forged or stray frame on the response pipe; worker ended", "the next invocation starts a fresh worker"} {
				if !strings.Contains(fmt.Sprint(row["last_failure"]), w) {
					t.Errorf("last_failure %q does not hold %q", row["last_failure"], w)
				}
			}
			if row["status"] != "backing-off" && row["status"] != "running" {
				t.Errorf("status %v, want the invocation retried (backing-off or running)", row["status"])
			}
		})
		if err := os.Remove(gate); err != nil {
			t.Fatal(err)
		}
		status, out := invocationOutput(t, srv, id, 20*time.Second)
		var got struct {
			In  string
			Pid int
		}
		if status != http.StatusOK || json.Unmarshal(out, &got) != nil || got.In != "guess" {
			t.Fatalf("output of the forging invocation after the gate opened: %d %s, want its own answer", status, out)
		}
		for _, pid := range ws.pids(t, "forge-attempts") {
			if pid == got.Pid {
				t.Errorf("the answer came from worker %d, which forged a frame: it should have been ended", pid)
			}
		}
		// Another input: its own result.
		_, out = f.call(t, "forge", `"another"`)
		if json.Unmarshal(out, &got) != nil || got.In != "another" {
			t.Fatalf("the next invocation answered %s, want its own result", out)
		}
		f.bystander(t)
	})

	// README: set_output raises RuntimeError from any other thread; a
	// thread left over from invocation 1 never puts outputs into
	// invocation 2, whose journaled record holds its own outputs only.
	t.Run("a Python thread's set_output after its invocation ended never lands in a later one", func(t *testing.T) {
		f.alongside(t, func() {
			id1, err := srv.Send(ctx, "TrustWorkers", "late", []byte(`"start"`), nil)
			if err != nil {
				t.Fatal(err)
			}
			if status, out := invocationOutput(t, srv, id1, 20*time.Second); status != http.StatusOK || string(out) != `"started"` {
				t.Fatalf("invocation 1: %d %s", status, out)
			}
			if rec := journaledRecord(ctx, t, srv, id1); !reflect.DeepEqual(rec.Outputs, map[string]string{"own_start": "1"}) {
				t.Fatalf("invocation 1's journaled outputs = %v", rec.Outputs)
			}
			id2, err := srv.Send(ctx, "TrustWorkers", "late", []byte(`"trigger"`), nil)
			if err != nil {
				t.Fatal(err)
			}
			status, out := invocationOutput(t, srv, id2, 20*time.Second)
			if status != http.StatusOK || !strings.Contains(string(out), "called outside its invocation") {
				t.Fatalf("invocation 2: %d %s, want the late thread's set_output refused with RuntimeError", status, out)
			}
			rec := journaledRecord(ctx, t, srv, id2)
			if want := map[string]string{"own_trigger": "1"}; !reflect.DeepEqual(rec.Outputs, want) {
				t.Fatalf("invocation 2's journaled outputs = %v, want only %v: a late thread's outputs landed in a later invocation", rec.Outputs, want)
			}
		})
	})

	// README (Python): input that nests too deeply and a return value JSON
	// cannot encode are terminal: the invocation completes with the
	// failure, never retried.
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for _, c := range []struct {
		name, handler, input, want string
		code                       int
	}{
		// Bad input is the caller's: 400; a bad result the function's: 500.
		{"input nesting 100000 deep (RecursionError while decoding) is terminal", "pyecho", deep, "input nests too deeply", http.StatusBadRequest},
		{"a non-JSON-serialisable return value is terminal", "unserializable", `{}`, "return value is not JSON-serializable: TypeError: Object of type set", http.StatusInternalServerError},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.alongside(t, func() {
				id, err := srv.Send(ctx, "TrustWorkers", c.handler, []byte(c.input), nil)
				if err != nil {
					t.Fatal(err)
				}
				status, out := invocationOutput(t, srv, id, 20*time.Second)
				if status != c.code || !strings.Contains(string(out), c.want) {
					t.Errorf("output: %d %s, want a %d naming %q", status, out, c.code, c.want)
				}
				row := invocationRow(ctx, t, srv, id, "status, completion_result, completion_failure, retry_count")
				t.Logf("sys_invocation: %v", row)
				if row["status"] != "completed" || row["completion_result"] != "failure" || !strings.Contains(fmt.Sprint(row["completion_failure"]), c.want) {
					t.Errorf("sys_invocation %v: want completed with the terminal failure %q", row, c.want)
				}
				if n, _ := row["retry_count"].(float64); n != 0 {
					t.Errorf("retry_count %v: a terminal failure was retried", row["retry_count"])
				}
			})
		})
	}
	if got := ws.lines(t, "unserializable-calls"); len(got) != 1 {
		t.Errorf("the unserializable handler ran %d times, want once (a terminal failure is not retried)", len(got))
	}

	// README (Bash): a line on the worker's protocol pipes the worker did
	// not write for this invocation fails it retryably, and a background
	// job never changes this invocation's output, outputs or status.
	for _, c := range []struct{ name, arm string }{
		{"a Bash background job forging status lines during a later invocation", "arm_status"},
		{"a Bash background job writing into an earlier invocation's files during a later one", "arm_files"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tag := c.arm
			f.alongside(t, func() {
				if _, out := f.call(t, "shlate", `"`+c.arm+` `+tag+`"`); string(out) != `"armed"` {
					t.Fatalf("invocation 1 answered %s", out)
				}
				id, err := srv.Send(ctx, "TrustWorkers", "shlate", []byte(`"victim `+tag+`"`), nil)
				if err != nil {
					t.Fatal(err)
				}
				status, out := invocationOutput(t, srv, id, 30*time.Second)
				if status != http.StatusOK || !jsonEqual(out, `{"victim":"`+tag+`"}`) {
					t.Fatalf("invocation 2: %d %s, want its own output", status, out)
				}
				rec := journaledRecord(ctx, t, srv, id)
				if want := map[string]string{"mine": "2"}; !reflect.DeepEqual(rec.Outputs, want) {
					t.Fatalf("invocation 2's journaled outputs = %v, want only %v", rec.Outputs, want)
				}
				attempts := 0
				for _, l := range ws.lines(t, "victim-attempts") {
					if strings.HasPrefix(l, tag+" ") {
						attempts++
					}
				}
				t.Logf("invocation 2 ran %d time(s)", attempts)
				if c.arm == "arm_files" && attempts != 1 {
					t.Errorf("invocation 2 ran %d times: writes into an earlier invocation's files failed it", attempts)
				}
				if _, out := f.call(t, "shlate", `"plain 3"`); !jsonEqual(out, `{"plain":"plain 3"}`) {
					t.Fatalf("invocation 3 answered %s, want its own output", out)
				}
			})
		})
	}

	// README (Bash): $1 is the payload byte for byte, of any size; external
	// commands get it through $FNBRIDGE_INPUT_FILE.
	t.Run("a 1 MiB payload reaches a Bash function intact as $1 and via FNBRIDGE_INPUT_FILE", func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
		big := make([]byte, 1<<20)
		big[0], big[len(big)-1] = '"', '"'
		for i := 1; i < len(big)-1; i++ {
			big[i] = letters[r.IntN(len(letters))]
		}
		sum := sha256.Sum256(big)
		f.alongside(t, func() {
			status, out := f.call(t, "payload", string(big))
			want := fmt.Sprintf(`{"arg_bytes":%d,"file_bytes":%d,"sha256":"%s"}`, len(big), len(big), hex.EncodeToString(sum[:]))
			if status != http.StatusOK || !jsonEqual(out, want) {
				t.Fatalf("payload: %d %s, want %s", status, out, want)
			}
		})
	})

	// Configuration refusals: the bridge does not start, and says which
	// field is wrong and why; the running bridge is unaffected.
	t.Run("a Bash handler named like a special builtin and env BASH_ENV are refused at start", func(t *testing.T) {
		bad := newWorkspace(t, "trust_workers.sh")
		for _, c := range []struct {
			name, handler, env, want string
		}{
			{"x.eval", "trust_workers.eval", "", `services[0].handlers[0].handler: bash handler "trust_workers.eval": function "eval" is a bash special builtin or reserved word, which bash may run in place of a function of that name: choose another name`},
			{"BASH_ENV", "trust_workers.run", `, env: {BASH_ENV: /tmp/evil.sh}`, "services[0].handlers[0].env.BASH_ENV: BASH_ENV changes how the interpreter or the dynamic loader starts or runs the worker, so a registration may not set it"},
		} {
			cfg := filepath.Join(bad.root, c.name+".yaml")
			writeFile(t, cfg, fmt.Sprintf("services:\n  - name: S\n    handlers:\n      - {name: h, runtime: bash, dir: fn, handler: %s%s}\n", c.handler, c.env))
			stdout, stderr, code := runBridge(t, 30*time.Second, "serve", "--config", cfg, "--listen", testtool.FreeAddr(t))
			if code != 2 {
				t.Fatalf("%s: exit %d, want 2\nstdout: %s\nstderr: %s", c.name, code, stdout, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("%s: stderr does not hold %q:\n%s", c.name, c.want, stderr)
			}
			t.Logf("%s: %s", c.name, strings.TrimSpace(stderr))
		}
		f.bystander(t)
	})

	if e, ok := b.waitExit(0); ok {
		t.Fatalf("the bridge exited: %v", e)
	}
}
