package bridge_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/restate/identity"
)

// keygen writes what restate-server reads (PKCS#8 PEM ed25519, 0600) and
// the matching publickeyv1_ key, printed and in FILE.pub.
func TestKeygenWritesMatchingPair(t *testing.T) {
	out := filepath.Join(t.TempDir(), "id.pem")
	key, err := bridge.Keygen(bridge.KeygenOptions{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(out)
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("not a PKCS#8 PEM: %q", data)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("key is %T, want ed25519", k)
	}
	pub, err := identity.ParseKey(key)
	if err != nil || !pub.Equal(priv.Public()) {
		t.Fatalf("printed key %q does not match the private key (%v)", key, err)
	}
	pubFile, _ := os.ReadFile(out + ".pub")
	if strings.TrimSpace(string(pubFile)) != key {
		t.Errorf("%s.pub = %q, want %q", out, pubFile, key)
	}
}

func TestKeygenRefusesToOverwriteUnlessForced(t *testing.T) {
	out := filepath.Join(t.TempDir(), "id.pem")
	first, err := bridge.Keygen(bridge.KeygenOptions{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(out)
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: out}); err == nil || !strings.Contains(err.Error(), "already exists") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second keygen: err = %v, want a refusal naming --force", err)
	}
	if after, _ := os.ReadFile(out); string(after) != string(before) {
		t.Fatal("refused keygen changed the private key")
	}
	// Only the public file left over: still refused, private key not written.
	out2 := filepath.Join(t.TempDir(), "id.pem")
	if err := os.WriteFile(out2+".pub", []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: out2}); err == nil {
		t.Fatal("overwrote an existing public key file")
	}
	if _, err := os.Stat(out2); err == nil {
		t.Fatal("wrote a private key although the public one could not be written")
	}

	second, err := bridge.Keygen(bridge.KeygenOptions{Out: out, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("--force kept the old key")
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o600 {
		t.Errorf("replaced private key mode %v, want 0600", st.Mode().Perm())
	}
	reused, err := bridge.Keygen(bridge.KeygenOptions{Out: out, Reuse: true})
	if err != nil || reused != second {
		t.Fatalf("--reuse = %q, %v; want the existing key %q", reused, err, second)
	}
}

func TestKeygenReuseRejectsAForeignFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "id.pem")
	if err := os.WriteFile(out, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: out, Reuse: true}); err == nil || !strings.Contains(err.Error(), "PKCS#8") {
		t.Fatalf("err = %v, want one saying the file is not a PKCS#8 key", err)
	}
}

// A PKCS#8 key of another algorithm is named in words, not as a Go type.
func TestKeygenReuseNamesAnotherAlgorithm(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "ec.pem")
	if err := os.WriteFile(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = bridge.Keygen(bridge.KeygenOptions{Out: out, Reuse: true})
	if err == nil || !strings.Contains(err.Error(), "an ECDSA key, want an ed25519 key") || strings.Contains(err.Error(), "*") {
		t.Fatalf("err = %v, want one naming an ECDSA key in words", err)
	}
}

// --reuse refuses a private key others can read (as ssh does) instead of
// serving with it, and leaves the file as it was.
func TestKeygenReuseRefusesAnUnprotectedKey(t *testing.T) {
	out := filepath.Join(t.TempDir(), "id.pem")
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: out}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := bridge.Keygen(bridge.KeygenOptions{Out: out, Reuse: true})
	if err == nil || !strings.Contains(err.Error(), "readable or writable by other users (mode 0644)") {
		t.Fatalf("err = %v, want a refusal naming the mode", err)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode changed to %04o", fi.Mode().Perm())
	}
	if err := os.Chmod(out, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: out, Reuse: true}); err != nil {
		t.Fatalf("a private key: %v", err)
	}
}

// With --reuse a missing private key is generated even when a stale public
// key file is left over (it is derived, so replaced): a one-shot key
// service recovers from a lost private-key volume.
func TestKeygenReuseReplacesAStalePublicKey(t *testing.T) {
	out := filepath.Join(t.TempDir(), "id.pem")
	if err := os.WriteFile(out+".pub", []byte("publickeyv1_stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key, err := bridge.Keygen(bridge.KeygenOptions{Out: out, Reuse: true})
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := os.ReadFile(out + ".pub"); strings.TrimSpace(string(pub)) != key {
		t.Fatalf("%s.pub = %q, want %q", out, pub, key)
	}
}

// "Never overwrites without --force; --reuse keeps an existing private
// key": a --public-out naming the private key file, by the same path or
// another one, is refused before anything is written, whatever the flags.
func TestKeygenRefusesPublicOutOverThePrivateKey(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "id.pem")
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: out}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(out)
	for _, o := range []bridge.KeygenOptions{
		{Out: out, PublicOut: out, Reuse: true},
		{Out: out, PublicOut: filepath.Join(dir, ".", "id.pem"), Force: true},
		{Out: out, PublicOut: out},
	} {
		_, err := bridge.Keygen(o)
		if err == nil || !strings.Contains(err.Error(), "is the private key file --out names") {
			t.Fatalf("Keygen(%+v) = %v, want a refusal naming --public-out", o, err)
		}
		if after, _ := os.ReadFile(out); string(after) != string(before) {
			t.Fatalf("Keygen(%+v) changed the private key", o)
		}
	}
	if err := os.Link(out, filepath.Join(dir, "alias.pem")); err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: out, PublicOut: filepath.Join(dir, "alias.pem"), Reuse: true}); err == nil {
		t.Fatal("a --public-out linked to the private key was accepted")
	}
}

// A directory that cannot be written is named; the temporary file's
// random name is not.
func TestKeygenUnwritableDirectoryNamesTheFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "missing", "id.pem")
	_, err := bridge.Keygen(bridge.KeygenOptions{Out: out})
	if err == nil || !strings.Contains(err.Error(), "writing "+out) || strings.Contains(err.Error(), ".keygen-") {
		t.Fatalf("err = %v, want one naming %s and not the temporary file", err, out)
	}
}

// A public key that cannot be written leaves no private key behind: the
// pair is written or neither, so running again (the directory fixed) needs
// no --force.
func TestKeygenPublicKeyFailureLeavesNoPrivateKey(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "id.pem")
	pubOut := filepath.Join(dir, "missing", "id.pub")
	_, err := bridge.Keygen(bridge.KeygenOptions{Out: out, PublicOut: pubOut})
	if err == nil || !strings.Contains(err.Error(), "writing "+pubOut) || !strings.Contains(err.Error(), "was removed") {
		t.Fatalf("err = %v, want one naming %s and saying the private key was removed", err, pubOut)
	}
	if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("private key left behind: %v", err)
	}
	if err := os.Mkdir(filepath.Dir(pubOut), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: out, PublicOut: pubOut}); err != nil {
		t.Fatalf("running again: %v", err)
	}
}
