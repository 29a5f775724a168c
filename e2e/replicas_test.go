package e2e

// Replicas: several `bridge serve` processes of one configuration. Their
// instance identity (--instance, FNBRIDGE_INSTANCE, instance:, the
// hostname) is the first part of every run UID, so two replicas sharing a
// remote `bridge runtime serve` never share a registration; and SIGTERM
// drains a replica for its load balancer: readiness answers 503 while the
// invocations in flight finish.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// invocationRecords are the bridge's "invocation" log records (one per
// attempt, with its outcome), without the runtime's "invocation ..." lines
// logRecords' prefix match also finds.
func invocationRecords(b *bridgeChild) []map[string]any {
	var out []map[string]any
	for _, rec := range logRecords(b.logs(), "invocation") {
		if rec["message"] == "invocation" {
			out = append(out, rec)
		}
	}
	return out
}

// replicaLoad is what one replica's clients saw.
type replicaLoad struct {
	pids        map[int]bool // workers that answered
	failures    []string
	first, last time.Time // when the first call was sent, the last answered
}

// loadReplica runs n invocations of Replica/work through srv, c at a time,
// each holding its registration for hold.
func loadReplica(ctx context.Context, srv *restateserver.Server, tag string, n, c int, hold time.Duration) replicaLoad {
	res := replicaLoad{pids: map[int]bool{}, first: time.Now()}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next = make(chan int, n)
	)
	for i := range n {
		next <- i
	}
	close(next)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				body := fmt.Sprintf(`{"n":%d,"sleep":%g}`, i, hold.Seconds())
				status, out, err := srv.Call(ctx, "Replica", "work", []byte(body), nil)
				var got struct{ N, PID int }
				jerr := json.Unmarshal(out, &got)
				mu.Lock()
				switch {
				case err != nil || status != http.StatusOK || jerr != nil || got.N != i:
					res.failures = append(res.failures, fmt.Sprintf("%s %d: %d %s %v", tag, i, status, out, err))
				default:
					res.pids[got.PID] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.last = time.Now()
	return res
}

// TestReplicasShareARuntime: "two bridges on one `bridge runtime serve`,
// both under load, no cross-talk". Two replicas of one configuration (the
// Python kind on one remote runtime, concurrency 4) serve two
// restate-servers; replica-a takes its identity from --instance,
// replica-b from FNBRIDGE_INSTANCE. Both are loaded at once at
// concurrency 4 each, which both pools hold. Before instances, both used
// the run UIDs replica-work-0..3: they shared 4 registrations, so half the
// attempts found theirs busy (429). Now:
//
//   - the runtime registered exactly 8 run UIDs, 4 with each instance's
//     prefix, each once at attempt 1 (no superseding), and unregistered
//     none;
//   - every invocation succeeded in one attempt: each replica logged one
//     "invocation" record per invocation, outcome ok, with a run UID of
//     its own instance (so zero 429s), and the two replicas' workers are
//     different processes;
//   - replica-a, SIGKILLed and started again with the same instance,
//     resumes its registrations: the runtime registers nothing new and the
//     same warm workers answer.
func TestReplicasShareARuntime(t *testing.T) {
	restateserver.Binary(t)
	requireInterpreters(t)
	ws := newWorkspace(t, "replica.py")
	rtAddr := testtool.FreeAddr(t)
	rt := startRuntimeServe(t, "python", rtAddr, "passthrough:///"+rtAddr)
	const perReplica = 4
	cfg := ws.config(t, fmt.Sprintf(`runtimes: {python: %q}
services:
  - name: Replica
    handlers:
      - {name: work, runtime: python, dir: fn, handler: replica.work, concurrency: %d, lease_timeout: 5s,
         retry_policy: {initial_interval: 50ms, max_interval: 500ms}}
`, rtAddr, perReplica))
	srvA := restateserver.Start(t, restateserver.Options{})
	srvB := restateserver.Start(t, restateserver.Options{})
	a := newBridgeServe(t, cfg, testtool.FreeAddr(t), "info", "--instance", "Replica-A")
	a.start()
	b := newBridgeServe(t, cfg, testtool.FreeAddr(t), "info")
	b.env = []string{"FNBRIDGE_INSTANCE=replica-b"}
	b.start()
	srvA.Register(t, a.URI(), false)
	srvB.Register(t, b.URI(), false)
	for _, r := range []struct {
		b    *bridgeServe
		want string
	}{{a, "--instance"}, {b, "FNBRIDGE_INSTANCE"}} {
		recs := logRecords(r.b.logs(), "serving Restate endpoint")
		if len(recs) != 1 || recs[0]["instance_from"] != r.want {
			t.Fatalf("start-up record %v: want the instance from %s", recs, r.want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n, hold = 32, 150 * time.Millisecond
	var loadA, loadB replicaLoad
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); loadA = loadReplica(ctx, srvA, "replica-a", n, perReplica, hold) }()
	go func() { defer wg.Done(); loadB = loadReplica(ctx, srvB, "replica-b", n, perReplica, hold) }()
	wg.Wait()
	if f := append(loadA.failures, loadB.failures...); len(f) > 0 {
		t.Fatalf("%d invocations failed, e.g. %v", len(f), f[:min(len(f), 5)])
	}
	// Both under load at once: each load takes n/c holds, and they overlap
	// for most of that.
	end, begin := loadA.last, loadA.first
	if loadB.last.Before(end) {
		end = loadB.last
	}
	if loadB.first.After(begin) {
		begin = loadB.first
	}
	overlap := end.Sub(begin)
	if want := time.Duration(n/perReplica) * hold / 2; overlap < want {
		t.Fatalf("the two loads overlapped for %s only, want at least %s", overlap, want)
	}
	for id := range loadA.pids {
		if loadB.pids[id] {
			t.Errorf("worker %d answered both replicas: they share a registration", id)
		}
	}

	registered := func() map[string][]string {
		out := map[string][]string{}
		for _, rec := range logRecords(rt.logs(), "registering function") {
			uid := fmt.Sprint(rec["run_uid"])
			out[uid] = append(out[uid], fmt.Sprint(rec["registration_attempt"]))
		}
		return out
	}
	regs := registered()
	var uids []string
	for uid, attempts := range regs {
		uids = append(uids, uid)
		if len(attempts) != 1 || attempts[0] != "1" {
			t.Errorf("run UID %s registered at attempts %v, want once at attempt 1", uid, attempts)
		}
	}
	sort.Strings(uids)
	var want []string
	for _, inst := range []string{"replica-a", "replica-b"} {
		for i := range perReplica {
			want = append(want, fmt.Sprintf("%s-replica-work-%d", inst, i))
		}
	}
	if strings.Join(uids, " ") != strings.Join(want, " ") {
		t.Errorf("the runtime registered run UIDs %v, want %v", uids, want)
	}
	if u := logRecords(rt.logs(), "unregistering"); len(u) > 0 {
		t.Errorf("the runtime unregistered %d registrations under load: %v", len(u), u)
	}
	for _, r := range []struct {
		b    *bridgeServe
		inst string
	}{{a, "replica-a"}, {b, "replica-b"}} {
		recs := invocationRecords(r.b.bridgeChild)
		bad := 0
		for _, rec := range recs {
			if rec["outcome"] != "ok" || !strings.HasPrefix(fmt.Sprint(rec["run_uid"]), r.inst+"-") {
				bad++
				if bad <= 5 {
					t.Errorf("%s: invocation record %v, want outcome ok on a run UID of its own", r.inst, rec)
				}
			}
		}
		if len(recs) != n || bad > 0 {
			t.Errorf("%s logged %d invocation attempts (%d not ok on its own run UIDs) for %d invocations, want one ok attempt each (no 429)", r.inst, len(recs), bad, n)
		}
	}

	// A crash and a restart with the same identity: the runtime still
	// holds replica-a's registrations and the new incarnation resumes them.
	a.killLeader()
	a.start()
	again := loadReplica(ctx, srvA, "replica-a again", perReplica, perReplica, hold)
	if len(again.failures) > 0 {
		t.Fatalf("after the restart: %v", again.failures)
	}
	for id := range again.pids {
		if !loadA.pids[id] {
			t.Errorf("after the restart worker %d answered, not one of replica-a's warm workers %v", id, loadA.pids)
		}
	}
	if after := registered(); len(after) != len(regs) || fmt.Sprint(after) != fmt.Sprint(regs) {
		t.Errorf("the restarted replica registered anew (%v before, %v after), want its registrations resumed", regs, after)
	}

	// `bridge invoke` of the same configuration with replica-a's identity
	// runs on a registration of its own and unregisters only that one.
	oneOff := filepath.Join(ws.root, "invoke.yaml")
	writeFile(t, oneOff, "instance: replica-a\n"+readFile(t, cfg))
	if out, errOut, code := runBridge(t, time.Minute, "invoke", "--config", oneOff, "Replica/work", `{"n":7,"sleep":0}`); code != 0 || !strings.Contains(out, `"n": 7`) && !strings.Contains(out, `"n":7`) {
		t.Fatalf("bridge invoke: exit %d, %q\n%s", code, out, errOut)
	}
	var unregistered []string
	for _, rec := range logRecords(rt.logs(), "unregistering") {
		unregistered = append(unregistered, fmt.Sprint(rec["run_uid"]))
	}
	if len(unregistered) != 1 || !strings.HasPrefix(unregistered[0], "replica-a-invoke-") {
		t.Errorf("after bridge invoke the runtime unregistered %v, want only the one-off run's own registration", unregistered)
	}
	if final := loadReplica(ctx, srvA, "replica-a after invoke", perReplica, perReplica, hold); len(final.failures) > 0 {
		t.Errorf("replica-a after bridge invoke: %v", final.failures)
	} else {
		for id := range final.pids {
			if !loadA.pids[id] {
				t.Errorf("after bridge invoke worker %d answered replica-a, not one of its warm workers", id)
			}
		}
	}
}

// readFile returns a file's content or fails the test.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// healthStatus is the status of GET addr path (0: no answer).
func healthStatus(addr, path string) int {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReplicaDrainsOnSIGTERM: "readiness flips to 503 on SIGTERM while an
// in-flight invocation completes". A gated Python invocation is running
// when the bridge gets SIGTERM. While it is still held: /health/ready
// answers 503 and /health/live 200 on the same listener, and a new
// invocation stream is refused with 503 and Retry-After (restate-server
// retries it elsewhere), also one restate-server opens on the held
// invocation's own connection (the same virtual object key: the same
// partition). Released, the invocation completes once with its result,
// and the bridge exits 0. (A GOAWAY sent with that refusal made
// restate-server fail the held stream: "broken pipe", then a retry.)
func TestReplicaDrainsOnSIGTERM(t *testing.T) {
	restateserver.Binary(t)
	requireInterpreters(t)
	ws := newWorkspace(t, "trust_workers_gate.py")
	gate := filepath.Join(ws.fn, "gate")
	writeFile(t, gate, "")
	cfg := ws.config(t, `shutdown_timeout: 60s
services:
  - name: Drain
    type: virtual_object
    handlers:
      - {name: gated, runtime: python, dir: fn, handler: trust_workers_gate.gated, shared: true, concurrency: 2}
`)
	srv := restateserver.Start(t, restateserver.Options{})
	addr := testtool.FreeAddr(t)
	b := startBridge(t, cfg, addr)
	srv.Register(t, b.URI(), false)
	if st := healthStatus(addr, "/health/ready"); st != http.StatusOK {
		t.Fatalf("ready before SIGTERM: HTTP %d, want 200", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := srv.Send(ctx, "Drain/k", "gated", []byte(`"held"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, 30*time.Second, "the invocation starts", func() (bool, string) {
		_, err := os.Stat(filepath.Join(ws.fn, "started-held"))
		return err == nil, fmt.Sprint(err)
	})

	b.signal(syscall.SIGTERM)
	testtool.Eventually(t, 10*time.Second, "readiness answers 503 while draining", func() (bool, string) {
		st := healthStatus(addr, "/health/ready")
		return st == http.StatusServiceUnavailable, fmt.Sprintf("HTTP %d", st)
	})
	if st := healthStatus(addr, "/health/live"); st != http.StatusOK {
		t.Errorf("live while draining: HTTP %d, want 200", st)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URI()+"/invoke/Drain/gated", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/vnd.restate.invocation.v6")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a new invocation stream while draining: HTTP %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	late, err := srv.Send(ctx, "Drain/k", "gated", []byte(`"late"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Refused twice: restate-server's retry, a second after the first
	// refusal, opens its stream on the held invocation's connection (the
	// moment a GOAWAY made it fail that connection's streams).
	testtool.Eventually(t, 30*time.Second, "restate-server retries the refused invocation", func() (bool, string) {
		rows, err := srv.Query(ctx, "SELECT status, retry_count FROM sys_invocation WHERE id = '"+late+"'")
		if err != nil || len(rows) == 0 {
			return false, fmt.Sprint(rows, err)
		}
		n, _ := rows[0]["retry_count"].(float64)
		return rows[0]["status"] == "backing-off" && n >= 2, fmt.Sprint(rows[0])
	})
	if _, done := b.waitExit(0); done {
		t.Fatal("the bridge exited with an invocation in flight")
	}
	if st, err := srv.InvocationStatus(ctx, id); err != nil || st == "completed" {
		t.Fatalf("invocation status while held: %q, %v; want it still running", st, err)
	}

	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	status, body := invocationOutput(t, srv, id, 30*time.Second)
	if status != http.StatusOK {
		t.Fatalf("output: %d %s", status, body)
	}
	assertJSON(t, "output", body, `{"gated":"held"}`)
	exited, ok := b.waitExit(30 * time.Second)
	if !ok || exited.err != nil {
		t.Fatalf("bridge after the drain: exited %v, %v; want status 0", ok, exited.err)
	}
	attempts := 0
	for _, rec := range invocationRecords(b.bridgeChild) {
		if rec["restate_invocation_id"] == id {
			attempts++
			if rec["outcome"] != "ok" {
				t.Errorf("attempt %v, want ok", rec)
			}
		}
	}
	if attempts != 1 {
		t.Errorf("%d attempts of the drained invocation, want the one in flight only", attempts)
	}
}
