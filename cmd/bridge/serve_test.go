package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
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
