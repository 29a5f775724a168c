package bridge

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The registration digest must not change across releases for the same
// inputs: a remote runtime still holding a registration compares digests,
// and the same attempt with a new digest is DIGEST_MISMATCH. The golden
// values pin the canonical form for each kind's source layout; they were
// computed independently (Python hashlib over the same canonical JSON).
func TestRegistrationDigestIsStable(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("greeter.py", "def greet(r):\n    return r\n")
	write("pkg/sub/__init__.py", "def main(r):\n    return 1\n")
	write("fn.sh", "shout() { echo '{}'; }\n")
	env := map[string]string{"B": "2", "A": "1"}
	tests := []struct {
		runtime, handler, want string
	}{
		{"python", "greeter.greet", "sha256:b621a4ee907ea77f84bcaef8491e0658b28b01e6bd6a1d2299b8eb900f8440d5"},
		{"python", "pkg.sub.main", "sha256:b41ad2c10d4f86ecc1ec3dbb04d853919d56f9086a0057d0dc361d0c38175b2f"},
		{"bash", "fn.shout", "sha256:70b7db86a7279804fb1f9c3cda964cbd436b452468c376136351094a20dc46ec"},
	}
	for _, tt := range tests {
		h := &HandlerConfig{Runtime: tt.runtime, Dir: dir, Handler: tt.handler, Env: env, IdleTimeout: Duration(5 * time.Minute)}
		got, err := registrationDigest(h)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.runtime, tt.handler, err)
		}
		if got != tt.want {
			t.Errorf("%s %s: digest = %s, want %s", tt.runtime, tt.handler, got, tt.want)
		}
	}
}

// A digest covers the handler's source content, so an edit registers a new
// generation; the directory path is left out, so another checkout of the
// same function has the same digest.
func TestRegistrationDigestFollowsContentNotPath(t *testing.T) {
	digest := func(dir, content string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "fn.sh"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := registrationDigest(&HandlerConfig{Runtime: "bash", Dir: dir, Handler: "fn.f"})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := t.TempDir(), t.TempDir()
	if digest(a, "f() { :; }\n") != digest(b, "f() { :; }\n") {
		t.Error("the same source in two directories has two digests")
	}
	if digest(a, "f() { :; }\n") == digest(a, "f() { true; }\n") {
		t.Error("an edited source kept its digest")
	}
}

func TestRegistrationDigestNamesAMissingSource(t *testing.T) {
	dir := t.TempDir()
	_, err := registrationDigest(&HandlerConfig{Runtime: "python", Dir: dir, Handler: "nowhere.main"})
	if err == nil || !strings.Contains(err.Error(), `python module "nowhere" not found`) {
		t.Fatalf("error = %v, want it to name the missing python module", err)
	}
}
