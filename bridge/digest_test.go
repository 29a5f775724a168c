package bridge

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// The registration digest must not change across releases for the same
// inputs: a remote runtime still holding a registration compares digests,
// and the same attempt with a new digest is DIGEST_MISMATCH (which the
// bridge resolves with a new attempt: new workers). The golden values pin
// the canonical form for each kind's source layout, with a remote runtime
// (an embedded one's digest holds this host's interpreter:
// TestRegistrationDigestFollowsTheInterpreter); they were computed
// independently (Python hashlib over the same canonical JSON). A handler
// alone in its directory has had the same digest since the first release;
// one beside other modules of its language covers them too (since they
// may be its helpers).
func TestRegistrationDigestIsStable(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("alone/greeter.py", "def greet(r):\n    return r\n")
	write("alone/fn.sh", "shout() { echo '{}'; }\n")
	write("both/greeter.py", "def greet(r):\n    return r\n")
	write("both/pkg/sub/__init__.py", "def main(r):\n    return 1\n")
	env := map[string]string{"B": "2", "A": "1"}
	tests := []struct {
		dir, runtime, handler, interpreter, want string
	}{
		{"alone", "python", "greeter.greet", "", "sha256:b621a4ee907ea77f84bcaef8491e0658b28b01e6bd6a1d2299b8eb900f8440d5"},
		{"alone", "python", "greeter.greet", ".venv/bin/python3.11", "sha256:74e27a3b6f0cf9b7b0167bbfddb1017b152079ba5c9b4efc45658598ba3ee235"},
		{"alone", "bash", "fn.shout", "", "sha256:70b7db86a7279804fb1f9c3cda964cbd436b452468c376136351094a20dc46ec"},
		{"both", "python", "greeter.greet", "", "sha256:77d5d37217da81459745a99ed41b2e5ef9fd9c28069d6b0e771c64f038678f3b"},
		{"both", "python", "pkg.sub.main", "", "sha256:7786fdec7878ea2c82a27e7932bec7814bdc124d972c47cac3a001e4e444d544"},
		{"both", "python", "greeter.greet", ".venv/bin/python3.11", "sha256:552ad3de3d222abc038921ca4cb18d8c35610f1f23e616f1e45cf495a922889c"},
	}
	for _, tt := range tests {
		h := &HandlerConfig{Runtime: tt.runtime, Dir: filepath.Join(root, tt.dir), Handler: tt.handler, Env: env, IdleTimeout: Duration(5 * time.Minute), remoteRuntime: true}
		if tt.interpreter != "" {
			h.Python = &PythonConfig{Interpreter: tt.interpreter}
		}
		got, err := registrationDigest(h)
		if err != nil {
			t.Fatalf("%s %s %s: %v", tt.dir, tt.runtime, tt.handler, err)
		}
		if got != tt.want {
			t.Errorf("%s %s %s: digest = %s, want %s", tt.dir, tt.runtime, tt.handler, got, tt.want)
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
	// A library script the handler sources, or a module it imports, is
	// its code too: editing it alone is a new generation.
	before := digest(a, "f() { :; }\n")
	if err := os.MkdirAll(filepath.Join(a, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "lib", "common.sh"), []byte("greet() { :; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if digest(a, "f() { :; }\n") == before {
		t.Error("a new library script beside the handler kept its digest")
	}
	before = digest(a, "f() { :; }\n")
	if err := os.WriteFile(filepath.Join(a, "lib", "common.sh"), []byte("greet() { echo hi; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if digest(a, "f() { :; }\n") == before {
		t.Error("an edited library script kept the handler's digest")
	}
	before = digest(a, "f() { :; }\n")
	if err := os.Rename(filepath.Join(a, "lib", "common.sh"), filepath.Join(a, "lib", "shared.sh")); err != nil {
		t.Fatal(err)
	}
	if digest(a, "f() { :; }\n") == before {
		t.Error("a renamed library script (what `source lib/common.sh` finds) kept the handler's digest")
	}
}

func TestRegistrationDigestNamesAMissingSource(t *testing.T) {
	dir := t.TempDir()
	_, err := registrationDigest(&HandlerConfig{Runtime: "python", Dir: dir, Handler: "nowhere.main"})
	if err == nil || !strings.Contains(err.Error(), `python module "nowhere" not found`) {
		t.Fatalf("error = %v, want it to name the missing python module", err)
	}
}

// fakePython writes an executable script answering the interpreter probe
// as a Python of version would, and nothing else.
func fakePython(t *testing.T, path, version string) {
	t.Helper()
	v := strings.ReplaceAll(version, ".", ",")
	script := "#!/bin/sh\necho 'fnbridge-python-probe {\"version\": [" + v + "], \"executable\": \"\", \"prefix\": \"/x\", \"base_prefix\": \"/x\"}'\n"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// Running a bash handler's invocations inline is another registration
// (another generation at the runtime); saying subshell: true, the default,
// is not.
func TestRegistrationDigestFollowsTheSubshell(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fn.sh"), []byte("shout() { echo '{}'; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	digest := func(subshell *bool) string {
		t.Helper()
		h := &HandlerConfig{Runtime: "bash", Dir: dir, Handler: "fn.shout"}
		if subshell != nil {
			h.Bash = &BashConfig{Subshell: subshell}
		}
		d, err := registrationDigest(h)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	yes, no := true, false
	if digest(&yes) != digest(nil) {
		t.Error("bash.subshell: true changed the digest of the default")
	}
	if digest(&no) == digest(nil) {
		t.Error("bash.subshell: false kept the digest of the default")
	}
}

// With an embedded runtime the digest holds the interpreter the runtime
// resolves and its version: a venv appearing in dir, a venv made again
// with another Python, another python.interpreter each register a new
// generation; the same venv in another checkout keeps the digest. A
// remote runtime resolves on its host, so there only the setting counts,
// and nothing is run here.
func TestRegistrationDigestFollowsTheInterpreter(t *testing.T) {
	newDir := func() string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "greeter.py"), []byte("def greet(r):\n    return r\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	digest := func(h *HandlerConfig) string {
		t.Helper()
		d, err := registrationDigest(h)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	handler := func(dir, interpreter string) *HandlerConfig {
		h := &HandlerConfig{Runtime: "python", Dir: dir, Handler: "greeter.greet"}
		if interpreter != "" {
			h.Python = &PythonConfig{Interpreter: interpreter}
		}
		return h
	}
	testtool.Require(t, "", "python3", "to digest a venv's interpreter")
	a := newDir()
	plain := digest(handler(a, ""))
	fakePython(t, filepath.Join(a, ".venv", "bin", "python"), "3.11.2")
	venv := digest(handler(a, ""))
	if venv == plain {
		t.Error("a .venv appearing in dir kept the digest of python3 on PATH")
	}
	if got := interpreterDigest(handler(a, "")); got != ".venv/bin/python 3.11.2" {
		t.Errorf("interpreter part = %q, want the venv's python relative to dir and its version", got)
	}
	fakePython(t, filepath.Join(a, ".venv", "bin", "python"), "3.12.0") // the venv made again
	if again := digest(handler(a, "")); again == venv {
		t.Error("a venv made again with Python 3.12 kept the digest of 3.11")
	}
	b := newDir()
	fakePython(t, filepath.Join(b, ".venv", "bin", "python"), "3.12.0")
	if digest(handler(b, "")) != digest(handler(a, "")) {
		t.Error("the same function and venv in another checkout has another digest")
	}
	fakePython(t, filepath.Join(a, "other", "python"), "3.12.0")
	if digest(handler(a, "other/python")) == digest(handler(a, "")) {
		t.Error("another python.interpreter kept the digest")
	}

	remote := handler(a, "/nowhere/python")
	remote.remoteRuntime = true
	if got := interpreterDigest(remote); got != "/nowhere/python" {
		t.Errorf("remote interpreter part = %q, want the setting as configured", got)
	}
	unresolved := handler(a, "/nowhere/python")
	if got := interpreterDigest(unresolved); got != "unresolved /nowhere/python" {
		t.Errorf("an interpreter that cannot be resolved: %q, want it as configured (the runtime reports it)", got)
	}
}
