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

// Options that contradict each other, or that name no file (empty, a
// directory), are the command line's mistake: exit 2 saying which flag,
// nothing written.
func TestKeygenContradictoryFlagsExit2(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "id.pem")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--force", "--reuse"}, "--force and --reuse"},
		{[]string{"--public-out", out}, "--public-out"},
		{[]string{"--out", ""}, "--out is empty"},
		{[]string{"--out", dir, "--force"}, "--out " + dir + " is a directory"},
		{[]string{"--public-out", dir}, "--public-out " + dir + " is a directory"},
	} {
		args := c.args
		var stdout, stderr strings.Builder
		code := runBridge(append([]string{"keygen", "--out", out}, args...), &stdout, &stderr)
		if code != invokeExitUsage || stdout.Len() != 0 || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("keygen %v: exit %d, stdout %q, stderr %q; want %d saying %q and nothing printed", args, code, stdout.String(), stderr.String(), invokeExitUsage, c.says)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("keygen %v wrote %s", args, out)
		}
	}
}
