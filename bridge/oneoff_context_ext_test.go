package bridge_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// oneOffBridge is the bridge `bridge invoke` builds for Greeter/<handler>
// of a configuration with a plain handler (plain) and a steps one
// (steps) under top; closed with the test.
func oneOffBridge(t *testing.T, top, handler string) *bridge.Bridge {
	t.Helper()
	cfg, err := bridge.LoadConfig(writeConfig(t, top+`
services:
  - name: Greeter
    handlers:
      - {name: plain, runtime: python, dir: functions, handler: greeter.greet}
      - {name: steps, runtime: python, dir: functions, handler: greeter.greet, durability: steps}
`))
	if err != nil {
		t.Fatal(err)
	}
	if handler != "" {
		cfg.ForOneOffRun("Greeter", handler)
	}
	b, err := bridge.New(cfg, bridge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// A one-off run of a plain handler starts no context endpoint, though
// another handler of the configuration is in steps mode; serving does.
func TestOneOffRunOfAPlainHandlerHasNoContextEndpoint(t *testing.T) {
	if url := oneOffBridge(t, "", "plain").ContextURL(); url != "" {
		t.Fatalf("context endpoint %q, want none", url)
	}
	if url := oneOffBridge(t, "", "steps").ContextURL(); url == "" {
		t.Fatal("a one-off run of a steps handler has no context endpoint")
	}
	if url := oneOffBridge(t, "", "").ContextURL(); url == "" {
		t.Fatal("serving has no context endpoint")
	}
}

// With a remote runtime, a one-off run's socket is next to the configured
// one, in the directory the runtime shares: the first name free or stale.
func TestOneOffRunSocketBesideTheConfiguredOne(t *testing.T) {
	dir := testtool.SocketDir(t)
	sock := filepath.Join(dir, "ctx.sock")
	top := "runtimes: {python: unix://" + filepath.Join(dir, "rt.sock") + "}\ncontext_listen: unix://" + sock + "\n"
	serving := oneOffBridge(t, top, "")
	if url := serving.ContextURL(); url != "unix://"+sock {
		t.Fatalf("serving at %q, want unix://%s", url, sock)
	}
	if url := oneOffBridge(t, top, "steps").ContextURL(); url != "unix://"+sock+".invoke-1" {
		t.Fatalf("one-off run at %q, want unix://%s.invoke-1", url, sock)
	}
	if url := oneOffBridge(t, top, "steps").ContextURL(); url != "unix://"+sock+".invoke-2" {
		t.Fatalf("a second one-off run at %q, want unix://%s.invoke-2", url, sock)
	}
	// A socket left by a killed run is taken over.
	stale := sock + ".invoke-3"
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if url := oneOffBridge(t, top, "steps").ContextURL(); url != "unix://"+stale {
		t.Fatalf("a third one-off run at %q, want the stale unix://%s", url, stale)
	}
}

// A one-off run keeps a TCP context_listen's host, on a port of its own.
func TestOneOffRunTCPKeepsTheHost(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	url := oneOffBridge(t, "context_listen: "+held.Addr().String()+"\n", "steps").ContextURL()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(url, "tcp://"))
	if err != nil || host != "127.0.0.1" || port == "0" || "127.0.0.1:"+port == held.Addr().String() {
		t.Fatalf("one-off run at %q, want 127.0.0.1 on a port other than the held %s", url, held.Addr())
	}
}
