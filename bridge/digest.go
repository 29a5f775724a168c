package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
)

// registrationDigest is the registration_digest of
// docs/spec/function-runtime-server-contract.md: a lowercase SHA-256 over the canonical, immutable registration inputs (handler
// source content, handler, env, runtime-visible settings such as the worker limits,
// the python interpreter and whether bash runs invocations inline). The working
// directory path is deliberately left out, so the same function in another
// checkout has the same digest. It is recomputed for every registration,
// so an edited source registers as a new generation.
func registrationDigest(h *HandlerConfig) (string, error) {
	srcSum, err := sourceSum(h)
	if err != nil {
		return "", err
	}
	// encoding/json sorts map keys, which makes this canonical.
	canon, err := json.Marshal(struct {
		Runtime     string            `json:"runtime"`
		Handler     string            `json:"handler"`
		Source      string            `json:"source_sha256"`
		Env         map[string]string `json:"env"`
		IdleSeconds int64             `json:"idle_timeout_seconds"`
		Limits      string            `json:"limits,omitempty"`
		Interpreter string            `json:"interpreter,omitempty"`
		Inline      bool              `json:"inline,omitempty"`
	}{h.Runtime, h.Handler, srcSum, h.Env, int64(h.IdleTimeout.Std().Seconds()), h.Limits.digestForm(), interpreterDigest(h), h.BashInline()})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// sourceSum is the hex SHA-256 of the handler's code: of its one source
// file's content, or, for code that spans several files (a module and its
// helpers), of each file's path inside dir and own sum in turn, so bytes
// moved from one file to the next, or a helper renamed, still change it.
func sourceSum(h *HandlerConfig) (string, error) {
	files, err := h.SourceFiles()
	if err != nil && !errors.Is(err, functionruntime.ErrTooManySources) {
		return "", err
	}
	type fileSum struct {
		rel string
		sum [sha256.Size]byte
	}
	sums := make([]fileSum, 0, len(files))
	for i, f := range files {
		content, err := os.ReadFile(f)
		if err != nil {
			if i > 0 {
				// A helper that went away (a deploy, an editor's temporary
				// file) or that no one may read: not code the worker loads.
				continue
			}
			return "", fmt.Errorf("reading handler source: %w", err)
		}
		rel, err := filepath.Rel(h.Dir, f)
		if err != nil {
			rel = filepath.Base(f)
		}
		sums = append(sums, fileSum{filepath.ToSlash(rel), sha256.Sum256(content)})
	}
	if len(sums) == 1 {
		return hex.EncodeToString(sums[0].sum[:]), nil
	}
	all := sha256.New()
	for _, fs := range sums {
		all.Write([]byte(fs.rel))
		all.Write([]byte{0})
		all.Write(fs.sum[:])
	}
	return hex.EncodeToString(all.Sum(nil)), nil
}

// SourceFiles lists the files holding the handler's code, as its runtime
// kind names them (kinds.Kind SourceFiles): what the registration digest
// covers, and what `bridge dev` watches.
func (h *HandlerConfig) SourceFiles() ([]string, error) {
	k, ok := kinds.Lookup(h.Runtime)
	if !ok {
		return nil, fmt.Errorf("unknown runtime %q", h.Runtime)
	}
	return k.SourceFiles(h.Dir, h.Handler)
}
