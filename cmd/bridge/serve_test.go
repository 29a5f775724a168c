package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

func writeServeConfig(t *testing.T, head string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "h.py"), []byte("def f(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bridge.yaml")
	body := head + "services:\n  - name: S\n    handlers:\n      - {name: f, runtime: python, dir: ., handler: h.f}\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// serve refuses a reachable listen address without identity keys, whether
// it comes from the file or from --listen, and names where it came from.
func TestServeRefusesReachableUnsignedListen(t *testing.T) {
	cases := []struct{ name, head, listen, source string }{
		{"file", "listen: 0.0.0.0:9080\n", "", "listen 0.0.0.0:9080"},
		{"flag overrides a loopback file", "listen: 127.0.0.1:9080\n", "[::]:9080", "--listen [::]:9080"},
		{"empty host", "", ":9080", "--listen :9080"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadServeConfig(writeServeConfig(t, tc.head), tc.listen, "")
			if err == nil || !strings.Contains(err.Error(), tc.source) || !strings.Contains(err.Error(), "bridge keygen") {
				t.Fatalf("err = %v, want a refusal naming %q and bridge keygen", err, tc.source)
			}
		})
	}
}

func TestServeAcceptsLoopbackKeysOrExplicitOptOut(t *testing.T) {
	pemPath := filepath.Join(t.TempDir(), "id.pem")
	key, err := bridge.Keygen(bridge.KeygenOptions{Out: pemPath})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, head, listen, keysFile string }{
		{"loopback", "", "127.0.0.1:9080", ""},
		{"keys in the file", "identity_keys: [" + key + "]\n", "0.0.0.0:9080", ""},
		{"keys from --identity-keys-file", "", "0.0.0.0:9080", pemPath + ".pub"},
		{"allow_unauthenticated", "allow_unauthenticated: true\n", "0.0.0.0:9080", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadServeConfig(writeServeConfig(t, tc.head), tc.listen, tc.keysFile)
			if err != nil {
				t.Fatal(err)
			}
			if tc.keysFile != "" && (len(cfg.IdentityKeys) != 1 || cfg.IdentityKeys[0] != key) {
				t.Errorf("identity keys = %v, want [%s] from %s", cfg.IdentityKeys, key, tc.keysFile)
			}
		})
	}
}

func TestServeRejectsABadIdentityKeysFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "keys.pub")
	if err := os.WriteFile(bad, []byte("publickeyv1_0OIl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadServeConfig(writeServeConfig(t, ""), "", bad)
	if err == nil || !strings.Contains(err.Error(), "--identity-keys-file") || !strings.Contains(err.Error(), bad+":1") {
		t.Fatalf("err = %v, want one naming --identity-keys-file and %s:1", err, bad)
	}
}

// A stop (SIGTERM, through the command's context) while a min_warm
// registration is still starting is graceful: serve returns nil (exit 0),
// as it does when stopped while serving, not the interrupted registration.
func TestServeStoppedWhileWarmingUpIsGraceful(t *testing.T) {
	testtool.Require(t, "", "python3", "to start the Python worker")
	dir := t.TempDir()
	// The import says it began, then waits for a file nobody writes.
	src := "import os, time\nopen('importing', 'w').close()\nwhile not os.path.exists('never'):\n    time.sleep(0.05)\ndef f(x):\n    return x\n"
	if err := os.WriteFile(filepath.Join(dir, "slow.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "bridge.yaml")
	body := "shutdown_timeout: 2m\nservices:\n  - name: S\n    handlers:\n      - {name: f, runtime: python, dir: ., handler: slow.f, min_warm: 1}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	root.SetArgs([]string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--log-level", "error"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "importing")); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended before the import began: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm-up import never began")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	// The warm-up serves no invocation, and the embedded runtime's
	// shutdown ends it: stopping does not wait for it (it used to, for
	// all of shutdown_timeout or the 60 s a registration may take).
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve stopped while warming up = %v, want nil (exit 0)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30 s of its signal (shutdown_timeout 2m): it waited for the stuck warm-up")
	}
}
