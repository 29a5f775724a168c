package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// `bridge dev` against restate-server: the loop a developer runs.

// devPy is the Python function of the dev tests at a version. Called with
// {"hold": true} it writes to the FIFO "started" and then waits until the
// FIFO "gate" is written: an invocation held in flight, without the test
// sleeping.
func devPy(version string) string {
	return fmt.Sprintf(`def v(x):
    if isinstance(x, dict) and x.get("hold"):
        with open("started", "w") as w:
            w.write("started")
        with open("gate") as r:
            r.read()
    return {"py": %q}
`, version)
}

func devSh(version string) string {
	return fmt.Sprintf("v() {\n  printf '{\"sh\":\"%s\"}'\n}\n", version)
}

const devConfig = `
services:
  - name: DevPy
    handlers:
      - {name: v, runtime: python, dir: fn, handler: dev.v, timeout: 60s}
  - name: DevSh
    handlers:
      - {name: v, runtime: bash, dir: fn, handler: dev.v}
`

// devLoop is one `bridge dev` against its restate-server.
type devLoop struct {
	t   *testing.T
	srv *restateserver.Server
	ws  *fnWorkspace
	b   *bridgeChild
}

func startDev(t *testing.T, srv *restateserver.Server, ws *fnWorkspace, configPath string, extra ...string) *devLoop {
	t.Helper()
	addr := testtool.FreeAddr(t)
	args := append([]string{"dev", "--config", configPath, "--listen", addr, "--admin", srv.AdminURL(), "--log-format", "json", "--log-level", "info"}, extra...)
	d := &devLoop{t: t, srv: srv, ws: ws, b: newBridgeChild(t, ws.root, httpHealth(addr), args...)}
	d.b.start()
	return d
}

// answers polls service/v through the ingress until it answers want.
func (d *devLoop) answers(service, want string) {
	d.t.Helper()
	testtool.Eventually(d.t, 30*time.Second, service+"/v answers "+want, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		status, out, err := d.srv.Call(ctx, service, "v", []byte(`{}`), nil)
		if err != nil {
			return false, err.Error()
		}
		return status == http.StatusOK && string(out) == want, fmt.Sprintf("%d %s", status, out)
	})
}

// logged polls the bridge's log until a record with message msg satisfies
// match, and returns it.
func (d *devLoop) logged(msg string, match func(rec map[string]any) bool) map[string]any {
	d.t.Helper()
	var found map[string]any
	testtool.Eventually(d.t, 30*time.Second, "a log record "+msg, func() (bool, string) {
		recs := logRecords(d.b.logs(), msg)
		for _, rec := range recs {
			if match(rec) {
				found = rec
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d such records, last %v", len(recs), lastRecord(recs))
	})
	return found
}

// logRecords returns the JSON log records whose message starts with msg.
func logRecords(logs, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && strings.HasPrefix(fmt.Sprint(rec["message"]), msg) {
			out = append(out, rec)
		}
	}
	return out
}

func lastRecord(recs []map[string]any) map[string]any {
	if len(recs) == 0 {
		return nil
	}
	return recs[len(recs)-1]
}

// saveByRename saves as many editors do: a new file renamed over the old.
func saveByRename(t *testing.T, path, content string) {
	t.Helper()
	writeFile(t, path+".swp", content)
	if err := os.Rename(path+".swp", path); err != nil {
		t.Fatal(err)
	}
}

func mentions(rec map[string]any, key, s string) bool {
	return strings.Contains(fmt.Sprint(rec[key]), s)
}

// Edit a Python and a Bash function while `bridge dev` runs: the next
// invocations run the new code; a syntax error is reported and the old
// version keeps serving until the fix; a handler added to the
// configuration becomes invocable through the ingress, and an invalid
// configuration is reported and changes nothing; an edited helper module
// or sourced script is a new version of the functions beside it.
func TestDevReloadsEditedFunctionsAndConfiguration(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{})
	ws := newWorkspace(t)
	py, sh := filepath.Join(ws.fn, "dev.py"), filepath.Join(ws.fn, "dev.sh")
	writeFile(t, py, devPy("1"))
	writeFile(t, sh, devSh("1"))
	cfgPath := ws.config(t, devConfig)
	d := startDev(t, srv, ws, cfgPath)
	pid := d.b.pid()
	start := d.logged("registered with Restate", func(map[string]any) bool { return true })
	d.answers("DevPy", `{"py":"1"}`)
	d.answers("DevSh", `{"sh":"1"}`)

	saveByRename(t, py, devPy("2")) // a new inode
	writeFile(t, sh, devSh("2"))    // the same inode, truncated and written
	d.answers("DevPy", `{"py":"2"}`)
	d.answers("DevSh", `{"sh":"2"}`)
	d.logged("reloaded", func(rec map[string]any) bool {
		return mentions(rec, "reloaded", "DevPy/v") && rec["manifest_changed"] == false && rec["deployment_id"] == nil
	})

	writeFile(t, py, "def v(x)\n    return {'py': 'broken'}\n")
	d.logged("reload", func(rec map[string]any) bool {
		return mentions(rec, "failed", "DevPy/v") && mentions(rec, "error", "SyntaxError")
	})
	d.answers("DevPy", `{"py":"2"}`)
	writeFile(t, sh, "v() {\n  if then\n}\n")
	d.logged("reload", func(rec map[string]any) bool {
		return mentions(rec, "failed", "DevSh/v") && mentions(rec, "error", "syntax error near unexpected token")
	})
	d.answers("DevSh", `{"sh":"2"}`)
	d.answers("DevPy", `{"py":"2"}`)

	writeFile(t, py, devPy("3"))
	saveByRename(t, sh, devSh("3"))
	d.answers("DevPy", `{"py":"3"}`)
	d.answers("DevSh", `{"sh":"3"}`)

	// A new handler: Restate learns it without a restart of the bridge.
	writeFile(t, filepath.Join(ws.fn, "added.py"), "def a(x):\n    return {'added': x}\n")
	writeFile(t, cfgPath, devConfig+`  - name: DevAdded
    handlers:
      - {name: a, runtime: python, dir: fn, handler: added.a}
`)
	testtool.Eventually(t, 30*time.Second, "DevAdded/a invocable through the ingress", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		status, out, err := srv.Call(ctx, "DevAdded", "a", []byte(`{"n":1}`), nil)
		if err != nil {
			return false, err.Error()
		}
		return status == http.StatusOK && string(out) == `{"added":{"n":1}}`, fmt.Sprintf("%d %s", status, out)
	})
	added := d.logged("reloaded", func(rec map[string]any) bool { return mentions(rec, "added", "DevAdded/a") })
	if added["manifest_changed"] != true || added["deployment_id"] != start["deployment_id"] {
		t.Errorf("reload record %v: want the manifest changed and the deployment %v registered again in place", added, start["deployment_id"])
	}

	writeFile(t, cfgPath, devConfig+"  - name: DevAdded\n    handlerz: []\n")
	d.logged("reload failed: the configuration is invalid", func(rec map[string]any) bool {
		return mentions(rec, "error", "handlerz")
	})
	d.answers("DevPy", `{"py":"3"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	callOK(ctx, t, srv, "DevAdded", "a", `1`, nil)

	// A module the function imports and a script it sources are its code
	// too: editing one of them alone reloads the function.
	pyLib, shLib := filepath.Join(ws.fn, "devlib.py"), filepath.Join(ws.fn, "devlib.sh")
	writeFile(t, pyLib, "VERSION = 'lib1'\n")
	writeFile(t, shLib, "DEVLIB=lib1\n")
	writeFile(t, py, "from devlib import VERSION\n\ndef v(x):\n    return {'py': VERSION}\n")
	writeFile(t, sh, ". ./devlib.sh\nv() {\n  printf '{\"sh\":\"%s\"}' \"$DEVLIB\"\n}\n")
	d.answers("DevPy", `{"py":"lib1"}`)
	d.answers("DevSh", `{"sh":"lib1"}`)
	saveByRename(t, pyLib, "VERSION = 'lib2'\n")
	writeFile(t, shLib, "DEVLIB=lib2\n")
	d.answers("DevPy", `{"py":"lib2"}`)
	d.answers("DevSh", `{"sh":"lib2"}`)
	if got := d.b.pid(); got != pid {
		t.Fatalf("the bridge is PID %d now, was %d: every change must apply without a restart", got, pid)
	}
}

// An invocation in flight while its function is edited and the manifest
// changes: restate-server keeps it on the deployment it started on, which
// the forced re-registration updated in place (same id, same URI), and it
// finishes on the registration and code that accepted it; new invocations
// run the new code meanwhile.
func TestDevInFlightInvocationFinishesOnTheOldVersion(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{})
	ws := newWorkspace(t)
	py := filepath.Join(ws.fn, "dev.py")
	writeFile(t, py, devPy("old"))
	writeFile(t, filepath.Join(ws.fn, "dev.sh"), devSh("1"))
	for _, name := range []string{"started", "gate"} {
		if err := syscall.Mkfifo(filepath.Join(ws.fn, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := ws.config(t, devConfig)
	d := startDev(t, srv, ws, cfgPath)
	start := d.logged("registered with Restate", func(map[string]any) bool { return true })
	d.answers("DevPy", `{"py":"old"}`)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := srv.Send(ctx, "DevPy", "v", []byte(`{"hold":true}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	readFIFO(t, filepath.Join(ws.fn, "started"))

	saveByRename(t, py, devPy("new"))
	writeFile(t, cfgPath, devConfig+`  - name: DevMore
    handlers:
      - {name: v, runtime: bash, dir: fn, handler: dev.v}
`)
	d.answers("DevPy", `{"py":"new"}`)
	d.answers("DevMore", `{"sh":"1"}`)
	rec := d.logged("reloaded", func(rec map[string]any) bool { return mentions(rec, "added", "DevMore/v") })
	if rec["deployment_id"] != start["deployment_id"] {
		t.Errorf("re-registered as %v, want the deployment %v updated in place", rec["deployment_id"], start["deployment_id"])
	}
	if st, err := srv.InvocationStatus(ctx, id); err != nil || st != "running" {
		t.Fatalf("held invocation %s is %q (%v), want running", id, st, err)
	}
	if err := os.WriteFile(filepath.Join(ws.fn, "gate"), []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	status, out := invocationOutput(t, srv, id, 30*time.Second)
	if status != http.StatusOK || string(out) != `{"py":"old"}` {
		t.Fatalf("held invocation ended %d %s, want 200 {\"py\":\"old\"}", status, out)
	}
}

// readFIFO opens a FIFO for reading, which waits for its writer, and
// fails the test when none comes in time.
func readFIFO(t *testing.T, path string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := os.ReadFile(path); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing wrote %s", path)
	}
}

// dev refuses what serve refuses (a reachable listen address without
// identity keys) and fails at start, naming it, when Restate cannot reach
// the address it registers.
func TestDevRefusesBadStarts(t *testing.T) {
	requireInterpreters(t)
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws.fn, "dev.py"), devPy("1"))
	writeFile(t, filepath.Join(ws.fn, "dev.sh"), devSh("1"))
	cfgPath := ws.config(t, devConfig)
	_, port, _ := net.SplitHostPort(testtool.FreeAddr(t))
	_, stderr, code := runBridge(t, 30*time.Second, "dev", "--config", cfgPath, "--listen", "0.0.0.0:"+port)
	if code == 0 || !strings.Contains(stderr, "--listen 0.0.0.0:"+port) || !strings.Contains(stderr, "bridge keygen") {
		t.Fatalf("dev on 0.0.0.0 without keys: exit %d\n%s\nwant a refusal naming --listen and bridge keygen", code, stderr)
	}
	_, stderr, code = runBridge(t, 30*time.Second, "dev", "--config", cfgPath, "--admin", "127.0.0.1:9070")
	if code == 0 || !strings.Contains(stderr, `--admin "127.0.0.1:9070": want an http:// or https:// URL`) {
		t.Fatalf("dev --admin without a scheme: exit %d\n%s", code, stderr)
	}

	srv := restateserver.Start(t, restateserver.Options{})
	nowhere := "http://" + testtool.FreeAddr(t)
	_, stderr, code = runBridge(t, 60*time.Second, "dev", "--config", cfgPath, "--listen", testtool.FreeAddr(t), "--admin", srv.AdminURL(), "--advertise", nowhere)
	if code == 0 || !strings.Contains(stderr, "refused to register "+nowhere) {
		t.Fatalf("dev --advertise %s that nothing serves: exit %d\n%s\nwant the registration refusal", nowhere, code, stderr)
	}
}

// A manifest change restate-server could not take (it was down) is
// reported and registered by the next change once it is back.
func TestDevRegistersAgainAfterRestateWasDown(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{})
	ws := newWorkspace(t)
	writeFile(t, filepath.Join(ws.fn, "dev.py"), devPy("1"))
	writeFile(t, filepath.Join(ws.fn, "dev.sh"), devSh("1"))
	cfgPath := ws.config(t, devConfig)
	d := startDev(t, srv, ws, cfgPath)
	d.answers("DevSh", `{"sh":"1"}`)

	if err := srv.Stop(); err != nil {
		t.Logf("stop restate-server: %v", err)
	}
	writeFile(t, cfgPath, devConfig+`  - name: DevLate
    handlers:
      - {name: v, runtime: bash, dir: fn, handler: dev.v}
`)
	d.logged("reloaded, but restate-server did not take the new manifest", func(rec map[string]any) bool {
		return mentions(rec, "added", "DevLate/v") && mentions(rec, "registration_error", srv.AdminURL())
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Relaunch(ctx); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ws.fn, "dev.sh"), devSh("2"))
	d.answers("DevLate", `{"sh":"2"}`)
}
