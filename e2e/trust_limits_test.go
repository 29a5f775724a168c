package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
	"golang.org/x/sys/unix"
)

// "Workers that cannot take the host down": each limit hit fails that
// invocation terminally with an error naming the limit, the bridge stays
// up, another registration serves during and after, and the next
// invocation of the same handler gets a fresh worker.
func TestTrustLimits(t *testing.T) {
	requireInterpreters(t)
	srv := restateserver.Start(t, restateserver.Options{})
	ws := newWorkspace(t, "trust_limits_hog.py", "trust_limits_yes.sh", "echo.py")
	// A command a Bash function runs goes past the worker's memory.
	writeFile(t, filepath.Join(ws.fn, "trust_limits_child.sh"),
		"child() { python3 -c 'x = bytearray(300 * 1024 * 1024)' && echo '{}'; }\n")
	// The timeouts bound the damage should a limit ever not be in force:
	// `yes` would otherwise fill the disk.
	cfg := ws.config(t, `services:
  - name: TrustLimits
    handlers:
      - {name: hog, runtime: python, dir: fn, handler: trust_limits_hog.hog, timeout: 20s, limits: {memory: 128Mi}}
      - {name: hoard, runtime: python, dir: fn, handler: trust_limits_hog.hoard, timeout: 20s, limits: {memory: 128Mi}}
      - {name: bomb, runtime: python, dir: fn, handler: trust_limits_hog.bomb, timeout: 20s, limits: {processes: 32}}
      - {name: flood, runtime: bash, dir: fn, handler: trust_limits_yes.flood, timeout: 3s, limits: {file_size: 1Mi}}
      - {name: child, runtime: bash, dir: fn, handler: trust_limits_child.child, timeout: 20s, limits: {memory: 128Mi}}
      - {name: orphan, runtime: bash, dir: fn, handler: trust_limits_yes.orphan}
  - name: TrustBystander
    handlers:
      - {name: echo, runtime: python, dir: fn, handler: echo.echo}
`)
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	srv.Register(t, b.URI(), false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bystander := func() {
		t.Helper()
		out := callOK(ctx, t, srv, "TrustBystander", "echo", `{"n":1}`, nil)
		assertJSON(t, "bystander", out, `{"echo":{"n":1}}`)
	}

	enforced := strings.Contains(b.logs(), `"processes_limit_enforced":true`)
	groupMemory := strings.Contains(b.logs(), `memory of the whole worker: cgroup`)
	if !strings.Contains(b.logs(), `"processes_limit_enforced"`) {
		t.Fatalf("the bridge did not log which limit mechanisms are in force:\n%s", tail(b.logs(), 20))
	}
	// The mechanisms (and the stale workers the start killed) are the
	// process's, whichever kind starts first: a runtime label would name
	// one of this bridge's two.
	if l := logLine(b.logs(), `"message":"worker limits"`); strings.Contains(l, `"runtime"`) {
		t.Errorf("the process-wide worker limits line carries a runtime: %s", l)
	}
	cases := []struct{ handler, want string }{
		{"hog", "memory limit of 128Mi exceeded"},
		{"hoard", "memory limit of 128Mi exceeded"},
		{"bomb", "processes limit of 32 exceeded"},
		{"flood", "file_size limit of 1Mi exceeded"},
		{"child", "memory limit of 128Mi exceeded"},
	}
	var wg sync.WaitGroup
	results := make([]string, len(cases))
	done := make(chan struct{})
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body, err := srv.Call(ctx, "TrustLimits", c.handler, []byte(`{}`), nil)
			results[i] = fmt.Sprintf("%d %s %v", status, body, err)
			if err == nil && status == http.StatusInternalServerError && strings.Contains(string(body), c.want) {
				t.Logf("%s: %s", c.handler, body)
				results[i] = ""
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	// Served while the limits are being hit.
	for during := false; !during; {
		bystander()
		select {
		case <-done:
			during = true
		default:
		}
	}
	for i, c := range cases {
		if results[i] == "" {
			continue
		}
		// Skip-proof: a mechanism may only be missing where the bridge
		// says it is.
		if c.handler == "bomb" && !enforced {
			t.Logf("processes limit not in force here (the bridge says so); bomb: %s", results[i])
			continue
		}
		if (c.handler == "hoard" || c.handler == "child") && !groupMemory {
			t.Logf("no memory cgroup here (the bridge says so); %s: %s", c.handler, results[i])
			continue
		}
		t.Errorf("%s: got %s, want a 500 naming %q", c.handler, results[i], c.want)
	}
	bystander()
	t.Logf("processes limit enforced: %v; worker limits: %s", enforced, logLine(b.logs(), "worker limits"))
	if e, ok := b.waitExit(0); ok {
		t.Fatalf("the bridge exited: %v", e)
	}
	// The next invocation of a handler that hit its limit runs on a fresh
	// worker and fails the same way, not with a dead one.
	status, body, err := srv.Call(ctx, "TrustLimits", "flood", []byte(`{}`), nil)
	if err != nil || status != http.StatusInternalServerError || !strings.Contains(string(body), "file_size limit of 1Mi exceeded") {
		t.Errorf("flood again: %d %s %v", status, body, err)
	}

	t.Run("setsid'ed grandchildren that exit are reaped", func(t *testing.T) {
		for i := 0; i < 200; i++ {
			callOK(ctx, t, srv, "TrustLimits", "orphan", `{}`, nil)
		}
		testtool.Eventually(t, 10*time.Second, "no zombies parented to the bridge", func() (bool, string) {
			z := zombiesOf(b.pid())
			return len(z) == 0, fmt.Sprint(len(z), " zombies: ", z)
		})
	})
}

// zombiesOf lists the exited, unreaped children of pid.
func zombiesOf(pid int) []string {
	var out []string
	for _, p := range procstat.All() {
		if p.PPID == pid && p.Dead() {
			sid, _ := unix.Getsid(p.PID)
			out = append(out, fmt.Sprintf("%d(%s sid %d)", p.PID, p.Comm, sid))
		}
	}
	return out
}

// logLine returns the first log line holding what.
func logLine(logs, what string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, what) {
			return l
		}
	}
	return ""
}
