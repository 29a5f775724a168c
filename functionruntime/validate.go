package functionruntime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// ReservedEnvPrefix marks environment names the adapters keep for their own
// worker protocol; a registration may not set them.
const ReservedEnvPrefix = "FNBRIDGE_"

// DefaultContentType is used for an invocation whose content_type is empty:
// JSON is the first and only gateway encoding in v0.x.
const DefaultContentType = "application/json"

// registerParams is a validated RegisterFunctionRequest.
type registerParams struct {
	runUID      string
	attempt     int32
	dir         string
	handler     string
	env         map[string]string
	idleTimeout time.Duration
	digest      string
	interpreter string // from InterpreterMetadata, not the request
	inline      bool   // from SubshellMetadata
}

// validateRegister checks every field of a RegisterFunctionRequest that does
// not depend on the adapter or the file system: it is pure, so the fuzz
// test can drive it. The returned error is an InvalidArgument status naming
// the field.
func validateRegister(req *executorv1.RegisterFunctionRequest, lim Limits) (registerParams, error) {
	var p registerParams
	if err := checkRunUID("run_uid", req.GetRunUid()); err != nil {
		return p, err
	}
	if req.GetRegistrationAttempt() < 1 {
		return p, invalidArgument("registration_attempt", "must be 1 or more (the initial registration is 1), got %d", req.GetRegistrationAttempt())
	}
	if err := checkDigest(req.GetRegistrationDigest()); err != nil {
		return p, err
	}
	dir := req.GetWorkingDir()
	if err := checkWorkingDirPath(dir); err != nil {
		return p, err
	}
	h := req.GetHandler()
	switch {
	case h == "":
		return p, invalidArgument("handler", "must not be empty")
	case len(h) > MaxHandlerBytes:
		return p, invalidArgument("handler", "is %d bytes, at most %d allowed", len(h), MaxHandlerBytes)
	case !utf8.ValidString(h):
		return p, invalidArgument("handler", "must be valid UTF-8")
	}
	if err := checkEnv(req.GetEnv(), lim); err != nil {
		return p, err
	}
	idle := req.GetIdleTimeoutSeconds()
	maxIdle := int64(lim.MaxIdleTimeout / time.Second)
	if idle < 0 || idle > maxIdle {
		return p, invalidArgument("idle_timeout_seconds", "must be between 0 and %d, got %d", maxIdle, idle)
	}
	return registerParams{
		runUID:      req.GetRunUid(),
		attempt:     req.GetRegistrationAttempt(),
		dir:         filepath.Clean(dir),
		handler:     h,
		env:         req.GetEnv(),
		idleTimeout: time.Duration(idle) * time.Second,
		digest:      req.GetRegistrationDigest(),
	}, nil
}

// checkWorkingDirPath checks working_dir as a string: a bounded, absolute
// path of valid UTF-8.
func checkWorkingDirPath(dir string) error {
	switch {
	case dir == "":
		return invalidArgument("working_dir", "must not be empty")
	case len(dir) > MaxWorkingDirBytes:
		return invalidArgument("working_dir", "is %d bytes, at most %d allowed", len(dir), MaxWorkingDirBytes)
	case !utf8.ValidString(dir) || strings.ContainsRune(dir, 0):
		return invalidArgument("working_dir", "must be valid UTF-8 without NUL bytes")
	case !filepath.IsAbs(dir):
		return invalidArgument("working_dir", "must be an absolute path, got %q", dir)
	}
	return nil
}

// allowedRoots are the directories, absolute and with symlinks resolved,
// that a working_dir must be or lie beneath.
type allowedRoots []string

// resolveAllowedRoots makes each dir absolute and resolves its symlinks, so
// that a working_dir is compared with what the kernel would enter.
func resolveAllowedRoots(dirs []string) (allowedRoots, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no allowed root directory given")
	}
	roots := make(allowedRoots, 0, len(dirs))
	// Messages start with the directory: the caller names the option.
	for _, d := range dirs {
		if d == "" {
			return nil, fmt.Errorf("an empty directory name")
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", d, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is named once
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%q does not exist", d)
			}
			return nil, fmt.Errorf("%q: %w", d, err)
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%q is not a directory", d)
		}
		roots = append(roots, real)
	}
	return roots, nil
}

// confine resolves the symlinks of working_dir and returns the resolved
// path when it is a root or beneath one. The caller runs the worker in the
// returned path, so a symlink changed after this check cannot move it.
func (r allowedRoots) confine(dir string) (string, error) {
	if err := checkWorkingDirPath(dir); err != nil {
		return "", err
	}
	if err := checkWorkingDir(filepath.Clean(dir)); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", invalidArgument("working_dir", "%q cannot be resolved: %v", dir, err)
	}
	if r.contains(real) {
		return real, nil
	}
	return "", invalidArgument("working_dir", "%q resolves to %q, which is not within an allowed root (%s)",
		dir, real, strings.Join(r, ", "))
}

// contains reports whether the resolved path real is a root or beneath one.
func (r allowedRoots) contains(real string) bool {
	for _, root := range r {
		rel, err := filepath.Rel(root, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// checkWorkingDir verifies that the validated working directory exists and
// is a directory. It is separate from validateRegister because it touches
// the file system.
func checkWorkingDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return invalidArgument("working_dir", "%q does not exist", dir)
		}
		return invalidArgument("working_dir", "%q cannot be read: %v", dir, err)
	}
	if !fi.IsDir() {
		return invalidArgument("working_dir", "%q is not a directory", dir)
	}
	return nil
}

// checkRunUID accepts 1..MaxRunUIDBytes of [A-Za-z0-9._-] starting with a
// letter or digit: a Kubernetes UID fits, and so does anything a log line or
// file name can carry safely.
func checkRunUID(field, uid string) error {
	if uid == "" {
		return invalidArgument(field, "must not be empty")
	}
	if len(uid) > MaxRunUIDBytes {
		return invalidArgument(field, "is %d bytes, at most %d allowed", len(uid), MaxRunUIDBytes)
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		ok := isASCIIAlnum(c) || (i > 0 && (c == '.' || c == '_' || c == '-'))
		if !ok {
			return invalidArgument(field, "must be letters, digits, '.', '_' or '-' and start with a letter or digit, got %q", uid)
		}
	}
	return nil
}

// checkDigest accepts "sha256:" followed by exactly 64 lowercase hex digits.
func checkDigest(d string) error {
	const prefix = "sha256:"
	bad := func() error {
		return invalidArgument("registration_digest", "must be %q followed by 64 lowercase hex digits, got %q", prefix, truncateUTF8(d, 100))
	}
	if !strings.HasPrefix(d, prefix) || len(d) != len(prefix)+64 {
		return bad()
	}
	for i := len(prefix); i < len(d); i++ {
		c := d[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return bad()
		}
	}
	return nil
}

// checkEnv enforces POSIX names ([A-Za-z_][A-Za-z0-9_]*), the reserved
// prefix, values without NUL, and the count and size bounds. Names are
// checked in sorted order so the error is deterministic.
func checkEnv(env map[string]string, lim Limits) error {
	if len(env) > lim.MaxEnvVars {
		return invalidArgument("env", "has %d variables, at most %d allowed", len(env), lim.MaxEnvVars)
	}
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		field := "env[" + strconvQuote(k) + "]"
		if err := checkEnvName(field, k); err != nil {
			return err
		}
		if problem := EnvValueProblem(env[k]); problem != "" {
			return invalidArgument(field, "%s", problem)
		}
	}
	if total := EnvBytes(env); total > lim.MaxEnvBytes {
		return invalidArgument("env", "totals %d bytes (name=value plus terminator each), at most %d allowed", total, lim.MaxEnvBytes)
	}
	return nil
}

// EnvValueProblem says why v cannot be the value of a registration's env
// variable, or returns "" when it can. The bridge's configuration check
// uses it too.
func EnvValueProblem(v string) string {
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return "value must be valid UTF-8 without NUL bytes"
	}
	return ""
}

// EnvBytes is the size of env as the runtime bounds it (MaxEnvBytes):
// each NAME=value and its terminator, as a process gets it.
func EnvBytes(env map[string]string) int {
	total := 0
	for k, v := range env {
		total += len(k) + len(v) + 2
	}
	return total
}

func checkEnvName(field, k string) error {
	if problem := EnvNameProblem(k); problem != "" {
		return invalidArgument(field, "%s", problem)
	}
	return nil
}

// startupEnv are the variables that change how an interpreter or the
// dynamic loader starts, before any handler code runs, or how bash runs
// the worker's own loop: bash reads BASH_ENV, ENV (sh mode), SHELLOPTS,
// BASHOPTS, BASH_XTRACEFD and POSIXLY_CORRECT at start-up, and TMOUT (a
// timeout on every read: an idle worker would end), FUNCNEST (the loop's
// functions nest) and BASH_COMPAT (older semantics) while it runs; glibc
// reads GLIBC_TUNABLES, GCONV_PATH and every LD_ variable. A
// registration's env is data for the function, never a way to change the
// worker around it. (Python's PYTHON* variables are ignored by the
// worker, which runs with -I, so they stay allowed for the function's own
// child processes.)
var startupEnv = map[string]bool{
	"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true,
	"BASH_XTRACEFD": true, "POSIXLY_CORRECT": true,
	"TMOUT": true, "FUNCNEST": true, "BASH_COMPAT": true,
	"GLIBC_TUNABLES": true, "GCONV_PATH": true,
}

// EnvNameProblem says why name cannot be a variable of a registration's
// env, or returns "" when it can: it must match [A-Za-z_][A-Za-z0-9_]* (at
// most MaxEnvNameBytes), must not start with ReservedEnvPrefix (in any
// case), and must not be one that changes how the interpreter or the
// dynamic loader starts or runs the worker (BASH_ENV, ENV, SHELLOPTS,
// BASHOPTS, BASH_XTRACEFD, POSIXLY_CORRECT, TMOUT, FUNCNEST, BASH_COMPAT,
// GLIBC_TUNABLES, GCONV_PATH, LD_*). The bridge's
// configuration check uses the same rule, so a config that loads is never
// refused by the runtime.
func EnvNameProblem(name string) string {
	if name == "" {
		return "name must not be empty"
	}
	if len(name) > MaxEnvNameBytes {
		return fmt.Sprintf("name is %d bytes, at most %d allowed", len(name), MaxEnvNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(isASCIIAlnum(c) || c == '_') || (i == 0 && c >= '0' && c <= '9') {
			return "not a valid environment variable name: it must match [A-Za-z_][A-Za-z0-9_]*"
		}
	}
	if strings.HasPrefix(strings.ToUpper(name), ReservedEnvPrefix) {
		return "names starting with " + ReservedEnvPrefix + " are reserved for the runtime"
	}
	if startupEnv[name] || strings.HasPrefix(name, "LD_") {
		return name + " changes how the interpreter or the dynamic loader starts or runs the worker, so a registration may not set it"
	}
	return ""
}

// checkRegistrationRef validates the reference every call after
// RegisterFunction carries. A Runtime Server "always requires a non-empty
// registration ID".
func checkRegistrationRef(ref *executorv1.FunctionRegistration) error {
	if ref == nil {
		return invalidArgument("registration", "must be set")
	}
	if err := checkRunUID("registration.run_uid", ref.GetRunUid()); err != nil {
		return err
	}
	id := ref.GetRegistrationId()
	if id == "" {
		return invalidArgument("registration.registration_id", "must not be empty: a Runtime Server always requires the ID RegisterFunction returned")
	}
	if len(id) > MaxRunUIDBytes {
		return invalidArgument("registration.registration_id", "is %d bytes; the IDs this server issues are at most %d", len(id), MaxRunUIDBytes)
	}
	if !utf8.ValidString(id) {
		return invalidArgument("registration.registration_id", "is not valid UTF-8, so not an ID this server issues")
	}
	return nil
}

// checkInvocationID enforces the 128-byte bound of
// docs/spec/function-runtime-server-contract.md, plus valid UTF-8 without
// control characters, because the ID is written into every log line of the
// invocation.
func checkInvocationID(id string) error {
	if len(id) > MaxInvocationIDBytes {
		return invalidArgument("invocation_id", "is %d bytes, at most %d allowed", len(id), MaxInvocationIDBytes)
	}
	if !utf8.ValidString(id) {
		return invalidArgument("invocation_id", "must be valid UTF-8")
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return invalidArgument("invocation_id", "must not contain control characters")
		}
	}
	return nil
}

// checkOutputs enforces OutputLimits on a handler's outputs. The error text
// says which bound was broken; the caller wraps it as OUTPUTS_INVALID.
func checkOutputs(out map[string]string, lim OutputLimits) error {
	if len(out) > lim.MaxCount {
		return fmt.Errorf("%d outputs, at most %d allowed", len(out), lim.MaxCount)
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total := 0
	for _, k := range keys {
		v := out[k]
		if k == "" || len(k) > lim.MaxKeyBytes {
			return fmt.Errorf("output key %s must be 1 to %d bytes", strconvQuote(k), lim.MaxKeyBytes)
		}
		for i := 0; i < len(k); i++ {
			c := k[i]
			ok := isASCIIAlnum(c) || c == '_' || (i > 0 && (c == '.' || c == '-'))
			if !ok || (i == 0 && c >= '0' && c <= '9') {
				return fmt.Errorf("output key %s must match [A-Za-z_][A-Za-z0-9_.-]*", strconvQuote(k))
			}
		}
		if len(v) > lim.MaxValueBytes {
			return fmt.Errorf("output %s value is %d bytes, at most %d allowed", k, len(v), lim.MaxValueBytes)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("output %s value must be valid UTF-8", k)
		}
		total += len(k) + len(v)
	}
	if total > lim.MaxTotalBytes {
		return fmt.Errorf("outputs total %d bytes, at most %d allowed", total, lim.MaxTotalBytes)
	}
	return nil
}

func isASCIIAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// strconvQuote quotes s for an error message, shortening it first so an
// attacker-sized key cannot blow up the message.
func strconvQuote(s string) string {
	return fmt.Sprintf("%q", truncateUTF8(s, 64))
}
