package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// serveUntilListening runs args (serve or dev) until its Restate
// endpoint at listen accepts a connection, then stops it; the error is
// the command's when it ended before that.
func serveUntilListening(t *testing.T, listen string, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	root.SetArgs(append(args, "--listen", listen, "--log-level", "error"))
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("serve ended by itself without an error")
			}
			return err
		default:
		}
		if c, err := net.Dial("tcp", listen); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("serve did not start listening")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	return nil
}

// Two replicas of one configuration on one host: the file's
// context_listen is held by the first, and the second serves on an
// address of its own given by --context-listen or FNBRIDGE_CONTEXT_LISTEN;
// the flag wins over the variable.
func TestServeContextListenPerReplica(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := writeCtxConfig(t, "context_listen: "+held.Addr().String()+"\n")
	taken := held.Addr().String()

	t.Run("file", func(t *testing.T) {
		t.Setenv("FNBRIDGE_CONTEXT_LISTEN", "")
		err := serveUntilListening(t, testtool.FreeAddr(t), "serve", "--config", cfg)
		if err == nil || !strings.Contains(err.Error(), "context_listen "+taken+": ") || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("err = %v, want the held address refused, naming context_listen", err)
		}
	})
	t.Run("flag", func(t *testing.T) {
		t.Setenv("FNBRIDGE_CONTEXT_LISTEN", "")
		if err := serveUntilListening(t, testtool.FreeAddr(t), "serve", "--config", cfg, "--context-listen", testtool.FreeAddr(t)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("env", func(t *testing.T) {
		t.Setenv("FNBRIDGE_CONTEXT_LISTEN", testtool.FreeAddr(t))
		if err := serveUntilListening(t, testtool.FreeAddr(t), "serve", "--config", cfg); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("flag over env", func(t *testing.T) {
		t.Setenv("FNBRIDGE_CONTEXT_LISTEN", taken)
		if err := serveUntilListening(t, testtool.FreeAddr(t), "serve", "--config", cfg, "--context-listen", testtool.FreeAddr(t)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the flag's address taken", func(t *testing.T) {
		t.Setenv("FNBRIDGE_CONTEXT_LISTEN", "")
		err := serveUntilListening(t, testtool.FreeAddr(t), "serve", "--config", cfg, "--context-listen", taken)
		if err == nil || !strings.Contains(err.Error(), "--context-listen "+taken+": ") {
			t.Fatalf("err = %v, want the held address refused, naming --context-listen", err)
		}
	})
	t.Run("the variable's address taken", func(t *testing.T) {
		t.Setenv("FNBRIDGE_CONTEXT_LISTEN", taken)
		err := serveUntilListening(t, testtool.FreeAddr(t), "serve", "--config", cfg)
		if err == nil || !strings.Contains(err.Error(), "FNBRIDGE_CONTEXT_LISTEN "+taken+": ") {
			t.Fatalf("err = %v, want the held address refused, naming FNBRIDGE_CONTEXT_LISTEN", err)
		}
	})
}

// An invalid --context-listen or FNBRIDGE_CONTEXT_LISTEN is refused
// before anything starts, naming where it came from, with what the
// file's context_listen is told.
func TestServeRefusesInvalidContextListen(t *testing.T) {
	cfg := writeCtxConfig(t, "")
	cases := []struct {
		name, flag, env, want string
	}{
		{"flag scheme", "http://x:1", "", `--context-listen: "http://x:1": want unix:///absolute/path or host:port`},
		{"flag wildcard", "0.0.0.0:9091", "", `--context-listen: "0.0.0.0:9091": name the address functions dial (e.g. 10.0.0.5:9091), not a wildcard host`},
		{"env relative socket", "", "unix://ctx.sock", `FNBRIDGE_CONTEXT_LISTEN: "unix://ctx.sock": a unix socket's path must be absolute (unix:///run/fnbridge/context.sock)`},
		{"env no host", "", ":9091", `FNBRIDGE_CONTEXT_LISTEN: ":9091": name the address functions dial (e.g. 10.0.0.5:9091), not a wildcard host`},
		{"env port out of range", "", "10.0.0.5:99999", `FNBRIDGE_CONTEXT_LISTEN: "10.0.0.5:99999" is not host:port: port "99999" is not a number from 0 to 65535`},
	}
	for _, tc := range cases {
		for _, cmd := range []string{"serve", "dev"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				t.Setenv("FNBRIDGE_CONTEXT_LISTEN", tc.env)
				args := []string{cmd, "--config", cfg, "--listen", testtool.FreeAddr(t), "--log-level", "error"}
				if tc.flag != "" {
					args = append(args, "--context-listen", tc.flag)
				}
				// Accepted, the command would serve: the timeout ends it.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				root := newRootCmd()
				root.SetArgs(args)
				root.SetOut(&bytes.Buffer{})
				root.SetErr(&bytes.Buffer{})
				if err := root.ExecuteContext(ctx); err == nil || err.Error() != tc.want {
					t.Fatalf("err = %v, want %s", err, tc.want)
				}
			})
		}
	}
}
