package bridge

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fnbridge/fnbridge/restate/identity"
)

// KeygenOptions say where `bridge keygen` writes a request-identity key pair.
type KeygenOptions struct {
	// Out receives the ed25519 private key, PKCS#8 PEM, mode 0600: the file
	// restate-server's RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE names.
	Out string
	// PublicOut receives the publickeyv1_ key, one line (for identity_keys
	// or --identity-keys-file); empty means Out + ".pub".
	PublicOut string
	// Force replaces existing files; without it an existing file is an error.
	Force bool
	// Reuse keeps an existing private key and (re)writes its public key, so
	// a one-shot key service can run on every start.
	Reuse bool
}

// Check reports options that contradict each other or cannot name a key
// file (empty, or an existing directory), before anything is written (the
// command line's mistake, in its words).
func (o KeygenOptions) Check() error {
	if o.Out == "" {
		return errors.New("--out is empty: name the file for the private key")
	}
	for _, f := range []struct{ flag, path string }{{"--out", o.Out}, {"--public-out", o.PublicOut}} {
		if fi, err := os.Stat(f.path); f.path != "" && err == nil && fi.IsDir() {
			return fmt.Errorf("%s %s is a directory: name a file for the key (e.g. %s)", f.flag, f.path, filepath.Join(f.path, "restate-identity.pem"))
		}
	}
	if o.Force && o.Reuse {
		return errors.New("--force and --reuse contradict each other: choose one")
	}
	if o.PublicOut != "" && samePath(o.Out, o.PublicOut) {
		return fmt.Errorf("--public-out %s is the private key file --out names: choose another file for the public key", o.PublicOut)
	}
	return nil
}

// Keygen writes a new key pair (or, with Reuse, keeps an existing private
// key) and returns the publickeyv1_ key.
func Keygen(o KeygenOptions) (string, error) {
	if o.PublicOut == "" {
		o.PublicOut = o.Out + ".pub"
	}
	if err := o.Check(); err != nil {
		return "", err
	}
	if o.Reuse {
		// As ssh does: a private key others can read is refused, not used.
		if fi, err := os.Stat(o.Out); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("%s is readable or writable by other users (mode %04o): make it private (chmod 600 %s), or pass --force instead of --reuse to replace the key",
				o.Out, fi.Mode().Perm(), o.Out)
		}
		if data, err := os.ReadFile(o.Out); err == nil {
			pub, err := PublicKeyOfPEM(data)
			if err != nil {
				return "", fmt.Errorf("%s: %w", o.Out, err)
			}
			return pub, replaceFile(o.PublicOut, []byte(pub+"\n"), 0o644, true)
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	if !o.Force {
		check := []string{o.Out}
		if !o.Reuse { // with --reuse the public file is derived, so replaceable
			check = append(check, o.PublicOut)
		}
		for _, p := range check {
			if _, err := os.Lstat(p); err == nil {
				return "", fmt.Errorf("%s already exists: not overwriting a key (pass --force to replace it, or --reuse to keep it)", p)
			}
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", err
	}
	if err := replaceFile(o.Out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600, o.Force); err != nil {
		return "", err
	}
	key := identity.EncodeKey(pub)
	if err := replaceFile(o.PublicOut, []byte(key+"\n"), 0o644, o.Force || o.Reuse); err != nil {
		// A private key without its public one would only make the
		// next run refuse to overwrite it: the pair is written or neither.
		if rmErr := os.Remove(o.Out); rmErr != nil {
			return "", fmt.Errorf("%w (and removing the private key just written to %s: %v)", err, o.Out, rmErr)
		}
		return "", fmt.Errorf("%w (the private key just written to %s was removed)", err, o.Out)
	}
	return key, nil
}

// PublicKeyOfPEM returns the publickeyv1_ key of an ed25519 PKCS#8 PEM
// private key.
func PublicKeyOfPEM(data []byte) (string, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return "", errors.New("not a PEM \"PRIVATE KEY\" (PKCS#8) file")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("not a PKCS#8 private key: %v", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return "", fmt.Errorf("%s, want an ed25519 key (bridge keygen --force writes one)", keyKind(k))
	}
	return identity.EncodeKey(priv.Public().(ed25519.PublicKey)), nil
}

// keyKind names a private key's algorithm in words.
func keyKind(k any) string {
	switch k.(type) {
	case *ecdsa.PrivateKey:
		return "an ECDSA key"
	case *rsa.PrivateKey:
		return "an RSA key"
	case *ecdh.PrivateKey:
		return "an X25519 or ECDH key"
	}
	return "a key of another algorithm"
}

// samePath reports whether a and b name one file: the same path once
// cleaned and made absolute, or, when both exist, the same file (a link).
func samePath(a, b string) bool {
	if aa, err := filepath.Abs(a); err == nil {
		if bb, err := filepath.Abs(b); err == nil && aa == bb {
			return true
		}
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// replaceFile writes data to a temporary file in path's directory with mode
// perm and moves it into place: a reader never sees a partial key, and
// the private key is never readable by others, even for a moment. Without
// overwrite the final link fails if path exists.
func replaceFile(path string, data []byte, perm os.FileMode, overwrite bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keygen-*")
	if err != nil {
		// The temporary file's random name would only confuse.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if overwrite {
		return os.Rename(tmp.Name(), path)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s already exists: not overwriting a key (pass --force to replace it)", path)
		}
		return err
	}
	return nil
}
