package e2e

// durability: steps with remote runtimes: "works with the embedded runtimes
// and with a `runtimes:` remote `bridge runtime serve` (unix socket and
// TCP)". The python kind is a `bridge runtime serve --runtime python` on a
// unix socket, the bash kind one on 127.0.0.1:PORT; the context endpoint is
// the default private unix socket or, in a second case, context_listen:
// 127.0.0.1:PORT, where the bash handler runs inline (bash.subshell:
// false). Behind a real restate-server on protocol v6 and v7.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// The sleeps of the remote steps handlers: suspend_after is 2 s; the short
// sleep is well under it (answered on the open stream), the long one well
// over it (the invocation suspends and resumes in a new attempt).
const (
	remoteSuspendAfter = 2 * time.Second
	remoteShortSleep   = 300 * time.Millisecond
	remoteLongSleep    = 4 * time.Second
)

func TestStepsRemote(t *testing.T) {
	requireInterpreters(t)
	for _, g := range []struct {
		name    string
		version int
		opts    restateserver.Options
	}{
		{"protocol v6", 6, restateserver.Options{}},
		{"protocol v7", 7, restateserver.Options{EnableProtocolV7: true}},
	} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			srv := restateserver.Start(t, g.opts)
			for _, c := range []struct {
				name, prefix string
				tcpContext   bool
			}{
				{"default unix-socket context endpoint", "RemUnixCtx", false},
				{"context_listen on TCP", "RemTCPCtx", true},
			} {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					testStepsRemote(t, srv, g.version, c.prefix, c.tcpContext)
				})
			}
		})
	}
}

// grpcHealth is the health check of `bridge runtime serve` on target (a
// gRPC target: unix:///path or passthrough:///host:port).
func grpcHealth(target string) func() error {
	return func() error {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health: %v", resp.GetStatus())
		}
		return nil
	}
}

// startRuntimeServe starts `bridge runtime serve --runtime kind --listen
// listen` in the test's directory and waits until it answers its health
// check on target.
// Its cleanup stops it and, when the test failed, prints its log.
func startRuntimeServe(t *testing.T, kind, listen, target string) *bridgeChild {
	t.Helper()
	rt := newBridgeChild(t, "", grpcHealth(target), "runtime", "serve", "--runtime", kind, "--listen", listen, "--log-format", "json", "--log-level", "debug")
	rt.start()
	return rt
}

// remoteExec is one executed step of steps_remote.{py,sh}: a marker line
// "TAG STEP PID ANCESTORS".
type remoteExec struct {
	pid       int
	ancestors []int
}

func remoteExecs(t *testing.T, ws *fnWorkspace, marker string) map[string][]remoteExec {
	t.Helper()
	out := map[string][]remoteExec{}
	for _, l := range ws.lines(t, marker) {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("%s: line %q is not \"TAG STEP PID ANCESTORS\"", marker, l)
		}
		pid, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("%s: line %q: bad PID", marker, l)
		}
		e := remoteExec{pid: pid}
		for _, a := range strings.Split(f[3], ",") {
			if n, err := strconv.Atoi(a); err == nil {
				e.ancestors = append(e.ancestors, n)
			}
		}
		out[f[0]+" "+f[1]] = append(out[f[0]+" "+f[1]], e)
	}
	return out
}

func testStepsRemote(t *testing.T, srv *restateserver.Server, version int, prefix string, tcpContext bool) {
	ws := newWorkspace(t, "steps_remote.py", "steps_remote.sh", "steps_remote_mark.sh")
	sockDir := testtool.SocketDir(t)
	pySock := filepath.Join(sockDir, "py.sock")
	shAddr := testtool.FreeAddr(t)
	pyRT := startRuntimeServe(t, "python", "unix://"+pySock, "unix://"+pySock)
	shRT := startRuntimeServe(t, "bash", shAddr, "passthrough:///"+shAddr)

	ctxAddr, ctxLine := "", ""
	if tcpContext {
		ctxAddr = testtool.FreeAddr(t)
		ctxLine = "context_listen: " + ctxAddr + "\n"
	}
	py, sh := prefix+"Py", prefix+"Sh"
	// With the context on TCP, the bash handler also runs its invocations
	// inline (bash.subshell: false), which the registration's metadata
	// carries to the remote runtime.
	shInline := ""
	if tcpContext {
		shInline = ", bash: {subshell: false}"
	}
	cfg := ws.config(t, fmt.Sprintf(`runtimes:
  python: unix://%[1]s
  bash: %[2]s
%[3]sservices:
  - name: %[4]s
    handlers:
      - {name: three, runtime: python, dir: fn, handler: steps_remote.three, durability: steps, suspend_after: %[6]s, retry_policy: %[7]s}
  - name: %[5]s
    handlers:
      - {name: three, runtime: bash, dir: fn, handler: steps_remote.three, durability: steps, suspend_after: %[6]s, retry_policy: %[7]s%[8]s}
`, pySock, shAddr, ctxLine, py, sh, remoteSuspendAfter, stepsRetry, shInline))
	b := startBridge(t, cfg, testtool.FreeAddr(t))
	srv.Register(t, b.URI(), false)
	ctx := caseContext(t)

	// The bridge serves the context endpoint where it was told to.
	if tcpContext {
		if !contextServedOn(b.logs(), ctxAddr) {
			t.Errorf("the bridge log does not show the context endpoint served on %s", ctxAddr)
		}
	}

	type lang struct {
		svc, marker string
		rt          *bridgeChild
	}
	langs := []lang{{py, "remote_py.log", pyRT}, {sh, "remote_sh.log", shRT}}
	input := func(tag string, d time.Duration) []byte {
		return fmt.Appendf(nil, `{"tag":%q,"seconds":%g,"sleep":%q}`, tag, d.Seconds(), fmt.Sprintf("%dms", d.Milliseconds()))
	}

	for _, l := range langs {
		t.Run(l.svc, func(t *testing.T) {
			// A short sleep, under suspend_after: one attempt, ok.
			shortID, err := srv.Send(ctx, l.svc, "three", input("short", remoteShortSleep), nil)
			if err != nil {
				t.Fatal(err)
			}
			status, body := invocationOutput(t, srv, shortID, 20*time.Second)
			if status != http.StatusOK {
				t.Fatalf("short sleep: %d %s", status, body)
			}
			checkRemoteOutput(t, "short", body, ws, l.marker)
			testtool.Eventually(t, 5*time.Second, "the bridge logs the short sleeper's attempt", func() (bool, string) {
				o := outcomes(invocationLogs(b.bridgeChild, shortID))
				return len(o) >= 1, fmt.Sprint(o)
			})
			if o := outcomes(invocationLogs(b.bridgeChild, shortID)); !slices.Equal(o, []string{"ok"}) {
				t.Errorf("the %s sleep's attempts ended %v, want one attempt, ok (no suspension)", remoteShortSleep, o)
			}

			// A long sleep, over suspend_after: suspends, resumes, and
			// step 1 is replayed, not executed again.
			sent := time.Now()
			longID, err := srv.Send(ctx, l.svc, "three", input("long", remoteLongSleep), nil)
			if err != nil {
				t.Fatal(err)
			}
			testtool.Eventually(t, 20*time.Second, "Restate shows the long sleeper suspended", func() (bool, string) {
				st, err := srv.InvocationStatus(ctx, longID)
				if err != nil {
					return false, err.Error()
				}
				return st == "suspended", st
			})
			status, body = invocationOutput(t, srv, longID, remoteLongSleep+20*time.Second)
			if status != http.StatusOK {
				t.Fatalf("long sleep: %d %s", status, body)
			}
			if took := time.Since(sent); took < remoteLongSleep {
				t.Errorf("the %s sleeper completed %s after the call", remoteLongSleep, took.Round(time.Millisecond))
			}
			checkRemoteOutput(t, "long", body, ws, l.marker)
			suspendedThenOK(t, b.bridgeChild, longID, "the long sleeper")

			// The remote runtime ran every step, not the bridge.
			for key, execs := range remoteExecs(t, ws, l.marker) {
				for _, e := range execs {
					if !slices.Contains(e.ancestors, l.rt.pid()) {
						t.Errorf("%s: step %q ran in PID %d (ancestors %v), not under the remote runtime server (PID %d)", l.svc, key, e.pid, e.ancestors, l.rt.pid())
					}
					if slices.Contains(e.ancestors, b.pid()) {
						t.Errorf("%s: step %q ran in PID %d under the bridge (PID %d)", l.svc, key, e.pid, b.pid())
					}
				}
			}
			rows := invocationRows(ctx, t, srv, l.svc, "status, pinned_service_protocol_version")
			if len(rows) != 2 {
				t.Errorf("%s invocation rows %v, want two", l.svc, rows)
			}
			for _, r := range rows {
				if r["status"] != "completed" || r["pinned_service_protocol_version"] != float64(version) {
					t.Errorf("%s invocation row %v, want completed on protocol v%d", l.svc, r, version)
				}
			}
		})
	}
}

// checkRemoteOutput checks a steps_remote output: three step values of
// tag, each from the only execution of its step.
func checkRemoteOutput(t *testing.T, tag string, body []byte, ws *fnWorkspace, marker string) {
	t.Helper()
	var out struct {
		Tag   string   `json:"tag"`
		Steps []string `json:"steps"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Tag != tag || len(out.Steps) != 3 {
		t.Fatalf("%s output %s (%v), want tag %q and three step values", tag, body, err, tag)
	}
	execs := remoteExecs(t, ws, marker)
	for i, s := range []string{"step1", "step2", "step3"} {
		e := execs[tag+" "+s]
		if len(e) != 1 {
			t.Errorf("%s: %s executed %d times, want 1 (all: %v)", tag, s, len(e), execs)
			continue
		}
		if want := fmt.Sprintf("%s-%s-%d", tag, s, e[0].pid); out.Steps[i] != want {
			t.Errorf("%s: %s's value %q, want %q (its execution)", tag, s, out.Steps[i], want)
		}
	}
	t.Logf("%s: output %s", tag, body)
}

// contextServedOn reports whether the bridge logged serving its context
// endpoint on a URL naming addr.
func contextServedOn(logs, addr string) bool {
	for _, l := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		if rec["message"] == "serving the durable-steps context endpoint" && strings.Contains(fmt.Sprint(rec["context"]), addr) {
			return true
		}
	}
	return false
}
