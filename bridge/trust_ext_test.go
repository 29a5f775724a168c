package bridge_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9080":   true,
		"127.8.9.10:9080":  true,
		"[::1]:9080":       true,
		"localhost:9080":   true,
		"LocalHost:9080":   true,
		"0.0.0.0:9080":     false,
		"[::]:9080":        false,
		":9080":            false,
		"10.0.0.5:9080":    false,
		"[fe80::1]:9080":   false,
		"bridge:9080":      false,
		"localhost.evil:1": false,
		"nine":             false,
	} {
		if got := bridge.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// A reachable listen address without identity keys is refused with what to
// do, unless allow_unauthenticated says so; loopback or keys are fine.
func TestCheckExposure(t *testing.T) {
	key := mustKeygen(t)
	cases := []struct {
		name         string
		cfg          bridge.Config
		wantErr      bool
		wantUnsigned bool
	}{
		{"loopback without keys", bridge.Config{Listen: "127.0.0.1:9080"}, false, false},
		{"all interfaces without keys", bridge.Config{Listen: "0.0.0.0:9080"}, true, false},
		{"empty host without keys", bridge.Config{Listen: ":9080"}, true, false},
		{"all IPv6 interfaces without keys", bridge.Config{Listen: "[::]:9080"}, true, false},
		{"all interfaces with keys", bridge.Config{Listen: "0.0.0.0:9080", IdentityKeys: []string{key}}, false, false},
		{"all interfaces, allowed unsigned", bridge.Config{Listen: "0.0.0.0:9080", AllowUnauthenticated: true}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			unsigned, err := tc.cfg.CheckExposure("--listen")
			if unsigned != tc.wantUnsigned {
				t.Errorf("unsigned = %v, want %v", unsigned, tc.wantUnsigned)
			}
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range []string{"--listen " + tc.cfg.Listen, "identity_keys", "bridge keygen", "RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE", "allow_unauthenticated: true"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestReadIdentityKeys(t *testing.T) {
	key := mustKeygen(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := bridge.ReadIdentityKeys(write("ok.pub", "# restate-server\n\n"+key+"\n"))
	if err != nil || len(got) != 1 || got[0] != key {
		t.Fatalf("ReadIdentityKeys = %v, %v; want [%s]", got, err, key)
	}
	for name, tc := range map[string]struct{ body, want string }{
		"bad.pub":   {key + "\npublickeyv1_0OIl\n", "bad.pub:2: public key after"},
		"empty.pub": {"# nothing\n", "holds no publickeyv1_ key"},
	} {
		if _, err := bridge.ReadIdentityKeys(write(name, tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, tc.want)
		}
	}
	if _, err := bridge.ReadIdentityKeys(filepath.Join(dir, "missing.pub")); err == nil || !strings.Contains(err.Error(), "bridge keygen") {
		t.Errorf("missing file: err = %v, want it to say how to write one", err)
	}
}

func mustKeygen(t *testing.T) string {
	t.Helper()
	key, err := bridge.Keygen(bridge.KeygenOptions{Out: filepath.Join(t.TempDir(), "k.pem")})
	if err != nil {
		t.Fatal(err)
	}
	return key
}
