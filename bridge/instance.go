package bridge

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// The instance identity of a replica is the first part of every run UID
// its pools register (instance-service-handler-i), so replicas sharing a
// remote FunctionRuntime server never share a registration, and a
// restarted replica with the same identity resumes its own.

// Where an instance identity came from, in the order the later ones win.
const (
	InstanceFromHostname = "hostname"
	InstanceFromConfig   = "instance"
	InstanceFromEnv      = "FNBRIDGE_INSTANCE"
	InstanceFromFlag     = "--instance"
)

// InstanceEnv is the environment variable that sets the instance identity
// (over the configuration's instance:, under --instance).
const InstanceEnv = "FNBRIDGE_INSTANCE"

// MaxInstanceBytes bounds an instance identity, so that with a service and
// handler name it still fits run_uid (functionruntime.MaxRunUIDBytes).
// Longer identities (a 253-byte Kubernetes pod name) are cut and made
// unique again with a digest of the whole (see Instance).
const MaxInstanceBytes = 63

// fallbackInstance names a replica whose hostname has nothing usable in it.
const fallbackInstance = "bridge"

// Instance checks and normalises an instance identity given by the user
// (source names where it came from, for the error): ASCII letters, digits,
// '.', '_' and '-', starting with a letter or digit, lower-cased (run UIDs
// are lower-case, so identities differing only in case are the same one);
// one longer than MaxInstanceBytes is cut to fit and ends in a digest of
// the full identity, so two long identities with the same start stay
// distinct.
func Instance(raw, source string) (string, error) {
	v, problem := normalizeInstance(raw)
	if problem != "" {
		return "", fmt.Errorf("%s: %s", source, problem)
	}
	return v, nil
}

func normalizeInstance(raw string) (string, string) {
	if raw == "" {
		return "", "must not be empty"
	}
	for i := 0; i < len(raw); i++ {
		if !instanceByte(raw[i], i == 0) {
			return "", fmt.Sprintf("%q is not allowed: use letters, digits, '.', '_' and '-', starting with a letter or digit (a hostname or a Kubernetes pod name fits)", raw)
		}
	}
	return fitInstance(strings.ToLower(raw)), ""
}

// SetInstance sets the instance identity from source (InstanceFromEnv,
// InstanceFromFlag), checked as Instance does; an error leaves c as it was.
func (c *Config) SetInstance(raw, source string) error {
	v, err := Instance(raw, source)
	if err != nil {
		return err
	}
	c.Instance, c.InstanceFrom = v, source
	return nil
}

// resolveInstance checks instance: and, when it is left out, takes the
// hostname (DefaultInstance).
func (c *Config) resolveInstance(bad func(path, format string, args ...any)) {
	if c.Instance == "" {
		c.Instance, c.InstanceFrom = DefaultInstance(), InstanceFromHostname
		return
	}
	v, problem := normalizeInstance(c.Instance)
	if problem != "" {
		bad("instance", "%s", problem)
		return
	}
	c.Instance, c.InstanceFrom = v, InstanceFromConfig
}

// DefaultInstance is the identity of a replica that names none: its
// hostname (stable per host; in Kubernetes the pod name), with every byte
// an instance cannot hold replaced by '-', or "bridge" when nothing of it
// is left.
func DefaultInstance() string {
	host, _ := os.Hostname()
	return sanitizeInstance(host)
}

func sanitizeInstance(host string) string {
	b := []byte(strings.ToLower(host))
	for i := range b {
		if !instanceByte(b[i], false) {
			b[i] = '-'
		}
	}
	s := strings.TrimLeft(string(b), "._-")
	if s == "" {
		return fallbackInstance
	}
	return fitInstance(s)
}

// OneOffInstance is the identity of a one-off run (`bridge invoke`) of a
// replica with identity base: base-invoke- and random hex digits, fitted
// like any identity. On a remote runtime the run then never shares, nor
// unregisters at its end, a registration of a serving replica.
func OneOffInstance(base string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	if base == "" {
		base = DefaultInstance()
	}
	return fitDigest(base, MaxInstanceBytes-len("-invoke-")-2*len(b), 8) + "-invoke-" + hex.EncodeToString(b[:])
}

// instanceByte reports whether c may appear in an instance identity
// (first: at its start); the same alphabet run_uid allows.
func instanceByte(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	case c == '.', c == '_', c == '-':
		return !first
	}
	return false
}

// fitInstance cuts s to MaxInstanceBytes, ending it in 8 hex digits of
// the whole's SHA-256.
func fitInstance(s string) string {
	return fitDigest(s, MaxInstanceBytes, 8)
}

// fitDigest returns s when it is at most limit bytes, else its first bytes
// and "-" and n hex digits of sha256(s), limit bytes in all.
func fitDigest(s string, limit, n int) string {
	if len(s) <= limit {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:limit-n-1] + "-" + hex.EncodeToString(sum[:])[:n]
}

// runUID is deterministic so a restarted bridge with the same instance
// resumes (same run_uid, attempt and digest) the registrations a remote
// runtime still holds: instance-service-handler-i, lower-cased. Service
// and handler names hold no '-', so the last three parts are always
// service, handler and index and two instances never produce the same
// run UID. Names so long that it would exceed run_uid's bound are cut and
// end in a digest of the whole.
func runUID(instance, service, handler string, i int) string {
	uid := strings.ToLower(fmt.Sprintf("%s-%s-%s-%d", instance, service, handler, i))
	return fitDigest(uid, functionruntime.MaxRunUIDBytes, 16)
}
