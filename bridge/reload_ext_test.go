package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/bridge/telemetry"
	"github.com/fnbridge/fnbridge/bridge/telemetry/telemetrytest"
	"github.com/fnbridge/fnbridge/internal/procstat"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/discovery"
	"github.com/fnbridge/fnbridge/restate/restatetest"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// The reload tests run real python3 and bash workers on the embedded
// runtimes and drive the Live endpoint with the in-memory Restate
// runtime over loopback h2c.

// pySource is a Python handler returning its version and its worker's PID.
// Called with {"gate": true} it writes its PID to the FIFO started and
// then blocks until the FIFO gate is written: an invocation held in
// flight, without the test sleeping.
func pySource(version int) string {
	return fmt.Sprintf(`import os

def f(x):
    if isinstance(x, dict) and x.get("gate"):
        with open("started", "w") as w:
            w.write(str(os.getpid()))
        with open("gate") as r:
            r.read()
    return {"v": %d, "pid": os.getpid()}
`, version)
}

// shSource is the Bash twin of pySource (without the gate); $$ is the
// worker's PID, not the invocation subshell's.
func shSource(version int) string {
	return fmt.Sprintf("f() {\n  printf '{\"v\":%d,\"pid\":%%d}' \"$$\"\n}\n", version)
}

const liveConfig = `
services:
  - name: Py
    handlers:
      - {name: f, runtime: python, dir: fn, handler: py.f, timeout: 20s}
  - name: Sh
    handlers:
      - {name: f, runtime: bash, dir: fn, handler: sh.f}
`

// liveHarness is one Live bridge serving a workspace: bridge.yaml at its
// root, the functions in fn/.
type liveHarness struct {
	t    *testing.T
	root string
	live *bridge.Live
	url  string
	n    atomic.Int64 // invocation ids
}

func newLiveHarness(t *testing.T, config string) *liveHarness {
	t.Helper()
	return newLiveHarnessWith(t, config, bridge.Options{})
}

// newLiveHarnessWith is newLiveHarness with the bridge's options.
func newLiveHarnessWith(t *testing.T, config string, opts bridge.Options) *liveHarness {
	t.Helper()
	for _, bin := range []string{"python3", "bash"} {
		testtool.Require(t, "", bin, "to run the functions")
	}
	root := t.TempDir()
	lh := &liveHarness{t: t, root: root}
	lh.write("fn/py.py", pySource(1))
	lh.write("fn/sh.sh", shSource(1))
	lh.write("bridge.yaml", config)
	lh.live, lh.url = serveLive(t, lh.config(), opts, func(err error) {
		if err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return lh
}

// serveLive starts a Live on cfg and serves its endpoint over loopback
// h2c, returning it and the endpoint's URL. The test's cleanup closes the
// server and then the Live, handing Close's error to closed.
func serveLive(t *testing.T, cfg *bridge.Config, opts bridge.Options, closed func(error)) (*bridge.Live, string) {
	t.Helper()
	live, err := bridge.NewLive(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := restate.NewHTTPServer(ln.Addr().String(), live.Handler())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed(live.Close(ctx))
	})
	return live, "http://" + ln.Addr().String()
}

func (lh *liveHarness) write(rel, content string) {
	lh.t.Helper()
	path := filepath.Join(lh.root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		lh.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		lh.t.Fatal(err)
	}
}

// config reads bridge.yaml as the dev command does.
func (lh *liveHarness) config() *bridge.Config {
	lh.t.Helper()
	cfg, err := bridge.LoadConfig(filepath.Join(lh.root, "bridge.yaml"))
	if err != nil {
		lh.t.Fatal(err)
	}
	return cfg
}

func (lh *liveHarness) reload() *bridge.ReloadReport {
	lh.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := lh.live.Reload(ctx, lh.config())
	if err != nil {
		lh.t.Fatalf("reload: %v", err)
	}
	return rep
}

// result is what the test functions return.
type result struct {
	V   int `json:"v"`
	PID int `json:"pid"`
}

// call runs one fresh invocation and returns the handler's output.
func (lh *liveHarness) call(service, handler, input string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := restatetest.Open(ctx, restatetest.NewH2CClient(), restatetest.InvokeURL(lh.url, service, handler), 6)
	defer s.Close()
	id := fmt.Sprintf("inv_live%d", lh.n.Add(1))
	frames, err := s.Play([]any{restatetest.Start(id, 1), restatetest.Input([]byte(input))}, nil)
	if err != nil {
		return result{}, err
	}
	for _, f := range frames {
		if o, ok := restatetest.Message[*servicev1.OutputCommandMessage](f); ok && o.GetValue() != nil {
			var r result
			err := json.Unmarshal(o.GetValue().GetContent(), &r)
			return r, err
		}
	}
	return result{}, fmt.Errorf("no output in %v", frames)
}

func (lh *liveHarness) callOK(service, handler string) result {
	lh.t.Helper()
	r, err := lh.call(service, handler, `{}`)
	if err != nil {
		lh.t.Fatalf("%s/%s: %v", service, handler, err)
	}
	return r
}

// waitDead polls until pid has exited (a zombie counts).
func waitDead(t *testing.T, what string, pid int) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); procstat.Alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (PID %d) still runs", what, pid)
		}
	}
}

func TestLiveReloadServesTheEditedSourceAndKeepsTheOthers(t *testing.T) {
	lh := newLiveHarness(t, liveConfig)
	py1, sh1 := lh.callOK("Py", "f"), lh.callOK("Sh", "f")
	if py1.V != 1 || sh1.V != 1 {
		t.Fatalf("first versions: py %+v, sh %+v", py1, sh1)
	}
	manifest := lh.live.Manifest()

	lh.write("fn/py.py", pySource(2))
	rep := lh.reload()
	if !slices.Equal(rep.Reloaded, []string{"Py/f"}) || len(rep.Added)+len(rep.Removed)+len(rep.Failed) != 0 || rep.ManifestChanged {
		t.Fatalf("report %+v, want only Py/f reloaded and the manifest unchanged", rep)
	}
	if py := lh.callOK("Py", "f"); py.V != 2 || py.PID == py1.PID {
		t.Errorf("after the edit Py/f = %+v, want version 2 on a new worker (was PID %d)", py, py1.PID)
	}
	if sh := lh.callOK("Sh", "f"); sh != sh1 {
		t.Errorf("Sh/f = %+v, want %+v: an unchanged handler keeps its registration and worker", sh, sh1)
	}
	waitDead(t, "the replaced Python worker", py1.PID)
	if !reflect.DeepEqual(lh.live.Manifest(), manifest) {
		t.Errorf("manifest changed by a source edit")
	}

	lh.write("fn/sh.sh", shSource(2))
	if rep := lh.reload(); !slices.Equal(rep.Reloaded, []string{"Sh/f"}) {
		t.Fatalf("report %+v, want Sh/f reloaded", rep)
	}
	if sh := lh.callOK("Sh", "f"); sh.V != 2 {
		t.Errorf("after the edit Sh/f = %+v, want version 2", sh)
	}
	if rep := lh.reload(); rep.Changed() || len(rep.Failed) != 0 {
		t.Errorf("a reload without changes reported %+v", rep)
	}
}

// A handler whose run UIDs are at run_uid's 128-byte bound (long names
// are cut and end in a digest) reloads too: the new version's run UIDs,
// which carry the generation, are fitted to the bound as well.
func TestLiveReloadOfAHandlerWithLongNames(t *testing.T) {
	svc, h := "S"+strings.Repeat("x", 60), "h"+strings.Repeat("y", 60)
	lh := newLiveHarness(t, fmt.Sprintf("instance: inst\nservices:\n  - name: %s\n    handlers:\n      - {name: %s, runtime: python, dir: fn, handler: py.f, timeout: 20s}\n", svc, h))
	if v := lh.callOK(svc, h); v.V != 1 {
		t.Fatalf("first version: %+v", v)
	}
	lh.write("fn/py.py", pySource(2))
	if rep := lh.reload(); !slices.Equal(rep.Reloaded, []string{svc + "/" + h}) || len(rep.Failed) != 0 {
		t.Fatalf("report %+v, want %s/%s reloaded", rep, svc, h)
	}
	if v := lh.callOK(svc, h); v.V != 2 {
		t.Fatalf("after the edit: %+v, want version 2", v)
	}
}

// A reload that brings in a runtime kind no handler used before does not
// write the set of runtimes the serving version's readiness probe reads
// (go test -race: the probe's read and the reload's write are unordered).
func TestLiveReloadAddingARuntimeKindBesideReadinessProbes(t *testing.T) {
	bridge.NoReadyCache(t)
	lh := newLiveHarness(t, "services:\n  - name: Py\n    handlers:\n      - {name: f, runtime: python, dir: fn, handler: py.f, timeout: 20s}\n")
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := http.Get(lh.url + "/health/ready"); err == nil {
				resp.Body.Close()
			}
		}
	}()
	lh.write("bridge.yaml", liveConfig)
	rep := lh.reload()
	close(stop)
	<-done
	if !slices.Equal(rep.Added, []string{"Sh/f"}) {
		t.Fatalf("report %+v, want Sh/f added", rep)
	}
	if sh := lh.callOK("Sh", "f"); sh.V != 1 {
		t.Fatalf("Sh/f = %+v", sh)
	}
}

func TestLiveReloadKeepsTheOldVersionWhileTheNewOneFails(t *testing.T) {
	lh := newLiveHarness(t, liveConfig)
	py1, sh1 := lh.callOK("Py", "f"), lh.callOK("Sh", "f")

	lh.write("fn/py.py", "def f(x):\n    return {'v': 2\n")
	lh.write("fn/sh.sh", "f() {\n  if then\n}\n")
	rep := lh.reload()
	if len(rep.Reloaded) != 0 || !strings.Contains(rep.Failed["Py/f"], "SyntaxError") || !strings.Contains(rep.Failed["Sh/f"], "syntax error") {
		t.Fatalf("report %+v, want both handlers failed with their syntax errors", rep)
	}
	if rep.Err() == nil || !strings.Contains(rep.Err().Error(), "Py/f: ") {
		t.Errorf("Err() = %v, want the failures named by handler", rep.Err())
	}
	if py, sh := lh.callOK("Py", "f"), lh.callOK("Sh", "f"); py != py1 || sh != sh1 {
		t.Fatalf("after broken edits Py/f = %+v, Sh/f = %+v; want the old versions %+v, %+v still serving", py, sh, py1, sh1)
	}
	// Every reload tries a failed version again: it still fails.
	if rep := lh.reload(); len(rep.Failed) != 2 {
		t.Fatalf("second reload %+v, want both still failing", rep)
	}

	lh.write("fn/py.py", pySource(3))
	lh.write("fn/sh.sh", shSource(3))
	rep = lh.reload()
	if !slices.Equal(rep.Reloaded, []string{"Py/f", "Sh/f"}) || len(rep.Failed) != 0 {
		t.Fatalf("report %+v after the fix, want both reloaded", rep)
	}
	if py, sh := lh.callOK("Py", "f"), lh.callOK("Sh", "f"); py.V != 3 || sh.V != 3 {
		t.Fatalf("after the fix Py/f = %+v, Sh/f = %+v, want version 3", py, sh)
	}
}

// An invocation in flight when its handler is reloaded finishes on the
// registration (and code) that accepted it, while new invocations already
// run the new version; the old registration goes once it is free.
func TestLiveReloadLetsInFlightInvocationsFinishOnTheOldVersion(t *testing.T) {
	// The waiting invocation must still be waiting when the reload (which
	// starts a Python worker) replaces it: not a 5 s lease_timeout's 429.
	lh := newLiveHarness(t, strings.Replace(liveConfig, "timeout: 20s}", "timeout: 20s, lease_timeout: 1m}", 1))
	for _, name := range []string{"started", "gate"} {
		if err := syscall.Mkfifo(filepath.Join(lh.root, "fn", name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		r   result
		err error
	}
	held := make(chan answer, 1)
	go func() {
		r, err := lh.call("Py", "f", `{"gate": true}`)
		held <- answer{r, err}
	}()
	oldPID := readFIFO(t, filepath.Join(lh.root, "fn", "started"))
	// Another invocation reaches the old version while its only
	// registration is held: it waits for a lease, before its RunCommand is
	// flushed (so no frame tells; the endpoint counts it in flight).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waiting := restatetest.Open(ctx, restatetest.NewH2CClient(), restatetest.InvokeURL(lh.url, "Py", "f"), 6)
	defer waiting.Close()
	if err := waiting.Send(restatetest.Start("inv_waiting", 1), restatetest.Input([]byte(`{}`))); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, 5*time.Second, "the second invocation in flight", func() (bool, string) {
		n := lh.live.InFlight()
		return n == 2, fmt.Sprintf("%d invocations in flight", n)
	})

	lh.write("fn/py.py", pySource(2))
	if rep := lh.reload(); !slices.Equal(rep.Reloaded, []string{"Py/f"}) {
		t.Fatalf("report %+v, want Py/f reloaded", rep)
	}
	// Replaced, the old version stops waiting for its registration: 503,
	// which Restate retries at once (on the new version), not the 429 of
	// a lease timeout.
	for {
		f, err := waiting.Next()
		if err != nil {
			t.Fatalf("waiting invocation: %v", err)
		}
		if restatetest.Terminal(f.Type()) {
			if e, ok := restatetest.Message[*servicev1.ErrorMessage](f); !ok || e.GetCode() != 503 {
				t.Fatalf("waiting invocation ended with %v, want ErrorMessage 503", f)
			}
			break
		}
	}
	// concurrency 1 on both versions: the new one does not wait for the
	// registration still held by the old one.
	if py := lh.callOK("Py", "f"); py.V != 2 || py.PID == oldPID {
		t.Fatalf("during the held invocation Py/f = %+v, want version 2 on another worker than %d", py, oldPID)
	}
	if !procstat.Alive(oldPID) {
		t.Fatalf("the old worker %d ended while its invocation was in flight", oldPID)
	}
	if err := os.WriteFile(filepath.Join(lh.root, "fn", "gate"), []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-held:
		if a.err != nil || a.r.V != 1 || a.r.PID != oldPID {
			t.Fatalf("held invocation = %+v, %v; want version 1 from worker %d", a.r, a.err, oldPID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held invocation did not finish after its gate opened")
	}
	waitDead(t, "the replaced worker, once its invocation finished", oldPID)
}

// readFIFO opens a FIFO for reading (which waits for its writer) and
// returns the integer written, failing after a deadline.
func readFIFO(t *testing.T, path string) int {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(path)
		if err != nil {
			b = []byte(err.Error())
		}
		got <- string(b)
	}()
	select {
	case s := <-got:
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil {
			t.Fatalf("%s: %q is not a PID", path, s)
		}
		return n
	case <-time.After(20 * time.Second):
		t.Fatalf("nothing wrote %s", path)
		return 0
	}
}

func TestLiveReloadAppliesConfigurationChanges(t *testing.T) {
	lh := newLiveHarness(t, liveConfig)
	py1, sh1 := lh.callOK("Py", "f"), lh.callOK("Sh", "f")

	// Add a handler in a new service, and one to an existing service. Its
	// script has a dir of its own: a new script under fn would be a new
	// version of Sh/f (a file it may source).
	lh.write("more/more.sh", "g() {\n  printf '{\"v\":7,\"pid\":%d}' \"$$\"\n}\n")
	lh.write("bridge.yaml", liveConfig+`      - {name: g, runtime: bash, dir: more, handler: more.g}
  - name: More
    handlers:
      - {name: g, runtime: bash, dir: more, handler: more.g}
`)
	rep := lh.reload()
	if !slices.Equal(rep.Added, []string{"More/g", "Sh/g"}) || len(rep.Reloaded)+len(rep.Removed)+len(rep.Failed) != 0 || !rep.ManifestChanged {
		t.Fatalf("report %+v, want More/g and Sh/g added and the manifest changed", rep)
	}
	if !manifestHas(lh.live.Manifest(), "More", "g") || !manifestHas(lh.live.Manifest(), "Sh", "g") {
		t.Fatalf("manifest %+v lacks the added handlers", lh.live.Manifest())
	}
	if r := lh.callOK("More", "g"); r.V != 7 {
		t.Fatalf("More/g = %+v", r)
	}
	if py, sh := lh.callOK("Py", "f"), lh.callOK("Sh", "f"); py != py1 || sh != sh1 {
		t.Fatalf("handlers the change did not touch were restarted: Py/f %+v (was %+v), Sh/f %+v (was %+v)", py, py1, sh, sh1)
	}

	// Remove Py (its service), give Sh/f an env: Sh/f is reloaded.
	lh.write("bridge.yaml", `
services:
  - name: Sh
    handlers:
      - {name: f, runtime: bash, dir: fn, handler: sh.f, env: {X: "1"}}
`)
	rep = lh.reload()
	if !slices.Equal(rep.Removed, []string{"More/g", "Py/f", "Sh/g"}) || !slices.Equal(rep.Reloaded, []string{"Sh/f"}) || !rep.ManifestChanged {
		t.Fatalf("report %+v, want Py/f, More/g, Sh/g removed and Sh/f reloaded", rep)
	}
	if _, err := lh.call("Py", "f", `{}`); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("a removed handler answered %v, want 404", err)
	}
	if manifestHas(lh.live.Manifest(), "Py", "f") {
		t.Fatalf("manifest still has the removed Py/f")
	}
	if sh := lh.callOK("Sh", "f"); sh.PID == sh1.PID {
		t.Fatalf("Sh/f kept worker %d although its env changed", sh.PID)
	}
	waitDead(t, "the removed handler's worker", py1.PID)
}

func manifestHas(m discovery.Manifest, service, handler string) bool {
	for _, s := range m.Services {
		for _, h := range s.Handlers {
			if s.Name == service && h.Name == handler {
				return true
			}
		}
	}
	return false
}

// A handler added with broken code is not served (Restate must not be told
// about it) until a reload finds it fixed.
func TestLiveReloadAddsABrokenHandlerOnceItIsFixed(t *testing.T) {
	lh := newLiveHarness(t, liveConfig)
	lh.write("fn/added.py", "def g(x)\n    return 1\n")
	lh.write("bridge.yaml", liveConfig+`  - name: Added
    handlers:
      - {name: g, runtime: python, dir: fn, handler: added.g}
`)
	rep := lh.reload()
	if len(rep.Added) != 0 || !strings.Contains(rep.Failed["Added/g"], "SyntaxError") || rep.ManifestChanged {
		t.Fatalf("report %+v, want Added/g failed and the manifest unchanged", rep)
	}
	if manifestHas(lh.live.Manifest(), "Added", "g") {
		t.Fatal("the broken handler is in the manifest")
	}
	lh.write("fn/added.py", "def g(x):\n    return {'v': 5, 'pid': 0}\n")
	if rep := lh.reload(); !slices.Equal(rep.Added, []string{"Added/g"}) || !rep.ManifestChanged {
		t.Fatalf("report %+v after the fix, want Added/g added", rep)
	}
	if r := lh.callOK("Added", "g"); r.V != 5 {
		t.Fatalf("Added/g = %+v", r)
	}
}

func TestLiveReloadRefusesProcessSettings(t *testing.T) {
	lh := newLiveHarness(t, liveConfig)
	py1 := lh.callOK("Py", "f")
	lh.write("fn/py.py", pySource(2))
	lh.write("bridge.yaml", "listen: 127.0.0.1:1\nshutdown_timeout: 3s\n"+liveConfig)
	_, err := lh.live.Reload(context.Background(), lh.config())
	var re *bridge.RestartRequiredError
	if !errors.As(err, &re) || !slices.Equal(re.Fields, []string{"listen", "shutdown_timeout"}) || !strings.Contains(err.Error(), "listen, shutdown_timeout changed, which takes a restart") {
		t.Fatalf("err = %v, want a restart-required error naming listen and shutdown_timeout", err)
	}
	if py := lh.callOK("Py", "f"); py != py1 {
		t.Fatalf("a refused reload changed Py/f: %+v, was %+v", py, py1)
	}
}

// The metrics listener and the span exporter start once with the process:
// a reload that changes them is refused rather than reported as applied.
func TestLiveReloadRefusesTelemetrySettings(t *testing.T) {
	lh := newLiveHarness(t, liveConfig)
	for _, tc := range []struct{ yaml, field string }{
		{"metrics_listen: 127.0.0.1:1\n", "metrics_listen"},
		{"tracing:\n  otlp_endpoint: http://127.0.0.1:1\n", "tracing"},
		{"tracing:\n  service_name: other\n", "tracing"},
	} {
		lh.write("bridge.yaml", tc.yaml+liveConfig)
		_, err := lh.live.Reload(context.Background(), lh.config())
		var re *bridge.RestartRequiredError
		if !errors.As(err, &re) || !slices.Equal(re.Fields, []string{tc.field}) {
			t.Errorf("reload with %q: err = %v, want a restart-required error naming %s", tc.yaml, err, tc.field)
		}
	}
}

// A steps-mode handler added by a reload gets the context endpoint (started
// by the successor when none ran) and keeps it across later reloads.
func TestLiveReloadServesDurableStepsHandlers(t *testing.T) {
	lh := newLiveHarness(t, liveConfig)
	steps := func(v int) string {
		return fmt.Sprintf("import fnbridge\n\ndef s(x):\n    return fnbridge.run('step', lambda: {'v': %d, 'pid': 0})\n", v)
	}
	lh.write("steps/steps.py", steps(1))
	lh.write("bridge.yaml", liveConfig+`  - name: Steps
    handlers:
      - {name: s, runtime: python, dir: steps, handler: steps.s, durability: steps}
`)
	if rep := lh.reload(); !slices.Equal(rep.Added, []string{"Steps/s"}) {
		t.Fatalf("report %+v, want Steps/s added", rep)
	}
	if r := lh.callOK("Steps", "s"); r.V != 1 {
		t.Fatalf("Steps/s = %+v, want the step's value 1", r)
	}
	lh.write("steps/steps.py", steps(2))
	if rep := lh.reload(); !slices.Equal(rep.Reloaded, []string{"Steps/s"}) {
		t.Fatalf("report %+v, want Steps/s reloaded", rep)
	}
	if r := lh.callOK("Steps", "s"); r.V != 2 {
		t.Fatalf("Steps/s = %+v after the edit, want 2", r)
	}
}

// A reload registers the new versions of the handlers it changed side by
// side, so going live waits for the slowest of them, not for their sum
// (the dev loop's "the next call runs the new code"). Here A's new module
// cannot finish its import before B's new module has started importing,
// which only registering them at once allows: one after the other, A's
// import gives up first and A keeps its old version.
func TestLiveReloadRegistersChangedHandlersTogether(t *testing.T) {
	lh := newLiveHarness(t, `
services:
  - name: A
    handlers:
      - {name: f, runtime: python, dir: fn, handler: a.f}
  - name: B
    handlers:
      - {name: f, runtime: python, dir: fn, handler: b.f}
`)
	lh.write("fn/a.py", "def f(x):\n    return {'v': 1}\n")
	lh.write("fn/b.py", "def f(x):\n    return {'v': 1}\n")
	if rep := lh.reload(); len(rep.Failed) != 0 {
		t.Fatalf("first report %+v, want no failure", rep)
	}
	if a, b := lh.callOK("A", "f"), lh.callOK("B", "f"); a.V != 1 || b.V != 1 {
		t.Fatalf("A/f = %+v, B/f = %+v, want version 1 of both", a, b)
	}
	lh.write("fn/a.py", `import os, time

deadline = time.monotonic() + 20
while not os.path.exists("b-importing"):
    if time.monotonic() > deadline:
        raise ImportError("b's new version never started importing beside this one")
    time.sleep(0.01)

def f(x):
    return {"v": 2}
`)
	lh.write("fn/b.py", "open('b-importing', 'w').close()\n\ndef f(x):\n    return {'v': 2}\n")
	if rep := lh.reload(); !slices.Equal(rep.Reloaded, []string{"A/f", "B/f"}) || len(rep.Failed) != 0 {
		t.Fatalf("report %+v, want A/f and B/f reloaded together", rep)
	}
	if a, b := lh.callOK("A", "f"), lh.callOK("B", "f"); a.V != 2 || b.V != 2 {
		t.Fatalf("after the reload A/f = %+v, B/f = %+v, want version 2 of both", a, b)
	}
}

// A new or edited module beside a Python handler may be one it imports: it
// is a new version of every Python handler under that dir, and of no Bash
// one (whose code it cannot be).
func TestLiveReloadFollowsHelperModules(t *testing.T) {
	lh := newLiveHarness(t, liveConfig)
	lh.callOK("Py", "f")
	lh.write("fn/helper.py", "X = 1\n")
	if rep := lh.reload(); !slices.Equal(rep.Reloaded, []string{"Py/f"}) || len(rep.Added)+len(rep.Removed)+len(rep.Failed) != 0 {
		t.Fatalf("report %+v after a new helper module, want Py/f reloaded only", rep)
	}
	lh.write("fn/lib/helper.py", "X = 2\n")
	if rep := lh.reload(); !slices.Equal(rep.Reloaded, []string{"Py/f"}) {
		t.Fatalf("report %+v after a module in a package below, want Py/f reloaded", rep)
	}
	lh.write("fn/notes.txt", "not code\n")
	if rep := lh.reload(); rep.Changed() {
		t.Fatalf("report %+v after a text file, want nothing changed", rep)
	}
}

// The registration gauges count each handler's registrations once across
// reloads: a handler carried over is the same pool, counted at once by the
// new generation alone; a replaced version's registration counts until it
// is unregistered, and a removed handler then is gone. (Each reload added
// the old generation's count to the new one's.)
func TestReloadKeepsRegistrationGaugesTrue(t *testing.T) {
	m := telemetry.NewMetrics("test")
	lh := newLiveHarnessWith(t, liveConfig, bridge.Options{Metrics: m})
	lh.callOK("Py", "f")
	lh.callOK("Sh", "f")
	warm := func(svc string) (float64, bool) {
		return telemetrytest.Gather(t, m.Registry()).Value("fnbridge_warm_workers", "service", svc, "handler", "f")
	}
	for v := 2; v <= 3; v++ {
		lh.write("fn/py.py", pySource(v))
		lh.reload()
		if n, ok := warm("Sh"); !ok || n != 1 {
			t.Fatalf("after reload %d: Sh/f warm workers %v (%v), want 1", v-1, n, ok)
		}
		lh.callOK("Py", "f")
		testtool.Eventually(t, 5*time.Second, fmt.Sprintf("after reload %d: Py/f warm workers 1", v-1), func() (bool, string) {
			n, ok := warm("Py")
			return ok && n == 1, fmt.Sprintf("%v (%v)", n, ok)
		})
	}
	lh.write("bridge.yaml", `
services:
  - name: Sh
    handlers:
      - {name: f, runtime: bash, dir: fn, handler: sh.f}
`)
	lh.reload()
	testtool.Eventually(t, 5*time.Second, "the removed Py/f counts no warm worker", func() (bool, string) {
		n, ok := warm("Py")
		return !ok || n == 0, fmt.Sprintf("%v (%v)", n, ok)
	})
	if n, _ := warm("Sh"); n != 1 {
		t.Fatalf("Sh/f warm workers %v, want 1", n)
	}
}
