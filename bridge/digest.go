package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// sourceFile names the file a handler string resolves to inside dir: the
// Python module file (or package __init__.py), or the Bash file.sh.
func sourceFile(runtime, dir, handler string) (string, error) {
	dot := strings.LastIndexByte(handler, '.')
	if dot <= 0 {
		return "", fmt.Errorf("handler %q has no function part", handler)
	}
	mod := handler[:dot]
	switch runtime {
	case "bash":
		return filepath.Join(dir, mod+".sh"), nil
	case "python":
		base := filepath.Join(dir, filepath.FromSlash(strings.ReplaceAll(mod, ".", "/")))
		for _, cand := range []string{base + ".py", filepath.Join(base, "__init__.py")} {
			if _, err := os.Stat(cand); err == nil {
				return cand, nil
			}
		}
		return "", fmt.Errorf("python module %q not found in %s (want %s.py or %s/__init__.py)", mod, dir, base, base)
	}
	return "", fmt.Errorf("unknown runtime %q", runtime)
}

// registrationDigest is the contract's registration_digest: a lowercase
// SHA-256 over the canonical, immutable registration inputs (handler
// source content, handler, env, runtime-visible settings). The working
// directory path is deliberately left out, so the same function in another
// checkout has the same digest. It is recomputed for every registration,
// so an edited source registers as a new generation.
func registrationDigest(h *HandlerConfig) (string, error) {
	src, err := sourceFile(h.Runtime, h.Dir, h.Handler)
	if err != nil {
		return "", err
	}
	content, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("reading handler source: %w", err)
	}
	srcSum := sha256.Sum256(content)
	// encoding/json sorts map keys, which makes this canonical.
	canon, err := json.Marshal(struct {
		Runtime     string            `json:"runtime"`
		Handler     string            `json:"handler"`
		Source      string            `json:"source_sha256"`
		Env         map[string]string `json:"env"`
		IdleSeconds int64             `json:"idle_timeout_seconds"`
	}{h.Runtime, h.Handler, hex.EncodeToString(srcSum[:]), h.Env, int64(h.IdleTimeout.Std().Seconds())})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
