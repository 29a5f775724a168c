package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// ctxFunctions is a plain handler and a steps one whose step returns the
// context endpoint it reached (FNBRIDGE_CONTEXT).
const ctxFunctions = `import os
import fnbridge

def plain(x):
    return x

def steps(x):
    return fnbridge.run("where", lambda: os.environ["FNBRIDGE_CONTEXT"])
`

// writeCtxConfig writes ctxFunctions and a configuration serving them as
// S/plain and S/steps under head (context_listen, runtimes).
func writeCtxConfig(t *testing.T, head string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "h.py"), []byte(ctxFunctions), 0o644); err != nil {
		t.Fatal(err)
	}
	body := head + `services:
  - name: S
    handlers:
      - {name: plain, runtime: python, dir: ., handler: h.plain}
      - {name: steps, runtime: python, dir: ., handler: h.steps, durability: steps}
`
	path := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// invoke runs `bridge invoke` of S/handler and returns its stdout,
// failing the test on a non-zero exit.
func invoke(t *testing.T, cfg, handler string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runBridge([]string{"invoke", "--config", cfg, "--log-level", "error", "S/" + handler, "{}"}, &out, &errb); code != 0 {
		t.Fatalf("bridge invoke S/%s: exit %d: %s", handler, code, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// reached is the context endpoint S/steps's step reached.
func reached(t *testing.T, cfg string) string {
	t.Helper()
	out := invoke(t, cfg, "steps")
	var url string
	if err := json.Unmarshal([]byte(out), &url); err != nil {
		t.Fatalf("S/steps output %q: %v", out, err)
	}
	return url
}

// `bridge invoke` runs beside a `bridge serve` of the same configuration,
// which holds context_listen: a plain handler starts no context endpoint,
// and a steps one gets its own, on the configured host with a port of its
// own.
func TestInvokeBesideServeTCPContextListen(t *testing.T) {
	testtool.Require(t, "", "python3", "to run the Python functions")
	t.Setenv("FNBRIDGE_CONTEXT_LISTEN", "")
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := writeCtxConfig(t, "context_listen: "+held.Addr().String()+"\n")

	if out := invoke(t, cfg, "plain"); out != "{}" {
		t.Fatalf("S/plain output %q, want {}", out)
	}
	url := reached(t, cfg)
	host, port, err := net.SplitHostPort(strings.TrimPrefix(url, "tcp://"))
	if !strings.HasPrefix(url, "tcp://") || err != nil || host != "127.0.0.1" || port == "0" || "127.0.0.1:"+port == held.Addr().String() {
		t.Fatalf("the step reached %q, want tcp://127.0.0.1 on a port other than the held %s", url, held.Addr())
	}
	// FNBRIDGE_CONTEXT_LISTEN, which names the host a replica's runtime
	// dials, counts as it does for serve.
	t.Setenv("FNBRIDGE_CONTEXT_LISTEN", "127.0.0.2:9")
	if url := reached(t, cfg); !strings.HasPrefix(url, "tcp://127.0.0.2:") || url == "tcp://127.0.0.2:9" {
		t.Fatalf("the step reached %q, want tcp://127.0.0.2 on a port of its own", url)
	}
}

// The same with a unix context_listen a live server holds: with an
// embedded runtime the steps handler's endpoint is another socket, and
// the held one is left alone.
func TestInvokeBesideServeUnixContextListen(t *testing.T) {
	testtool.Require(t, "", "python3", "to run the Python functions")
	t.Setenv("FNBRIDGE_CONTEXT_LISTEN", "")
	sock := filepath.Join(testtool.SocketDir(t), "ctx.sock")
	held, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := writeCtxConfig(t, "context_listen: unix://"+sock+"\n")

	if out := invoke(t, cfg, "plain"); out != "{}" {
		t.Fatalf("S/plain output %q, want {}", out)
	}
	if url := reached(t, cfg); !strings.HasPrefix(url, "unix:///") || url == "unix://"+sock {
		t.Fatalf("the step reached %q, want a unix socket other than the held %s", url, sock)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the held socket: %v", err)
	}
}

// With a remote runtime, which shares only the configured socket's
// directory, the steps handler's socket is in that directory, and is gone
// once invoke ends.
func TestInvokeBesideServeUnixContextListenRemoteRuntime(t *testing.T) {
	testtool.Require(t, "", "python3", "to run the Python functions")
	t.Setenv("FNBRIDGE_CONTEXT_LISTEN", "")
	dir := testtool.SocketDir(t)
	rt := filepath.Join(dir, "rt.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	root.SetArgs([]string{"runtime", "serve", "--runtime", "python", "--listen", "unix://" + rt, "--log-level", "error"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(rt); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runtime did not start")
		}
	}
	sock := filepath.Join(dir, "ctx.sock")
	held, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := writeCtxConfig(t, "runtimes: {python: unix://"+rt+"}\ncontext_listen: unix://"+sock+"\n")

	if out := invoke(t, cfg, "plain"); out != "{}" {
		t.Fatalf("S/plain output %q, want {}", out)
	}
	url := reached(t, cfg)
	path := strings.TrimPrefix(url, "unix://")
	if !strings.HasPrefix(url, "unix:///") || path == sock || filepath.Dir(path) != dir {
		t.Fatalf("the step reached %q, want a socket of its own in %s", url, dir)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("invoke's socket %s after invoke: %v, want it removed", path, err)
	}
}
