package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stdout is the public key alone, so scripts can capture it; the hint on
// stderr names restate-server's variable. A second run refuses.
func TestKeygenCommandPrintsOnlyTheKey(t *testing.T) {
	out := filepath.Join(t.TempDir(), "id.pem")
	run := func() (string, string, error) {
		root := newRootCmd()
		var stdout, stderr bytes.Buffer
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		root.SetArgs([]string{"keygen", "--out", out})
		err := root.Execute()
		return stdout.String(), stderr.String(), err
	}
	stdout, stderr, err := run()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := os.ReadFile(out + ".pub")
	if !strings.HasPrefix(stdout, "publickeyv1_") || stdout != string(pub) {
		t.Errorf("stdout = %q, want the key of %s.pub (%q) alone", stdout, out, pub)
	}
	if !strings.Contains(stderr, "RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE="+out) {
		t.Errorf("stderr does not tell where the private key goes: %q", stderr)
	}
	if _, _, err := run(); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second keygen: err = %v, want a refusal naming --force", err)
	}
}
