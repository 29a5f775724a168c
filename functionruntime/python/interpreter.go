package python

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
)

// Which interpreter runs a registration's worker, and what it is. A
// registration may name one (WorkerSpec.Interpreter, from a handler's
// python.interpreter); otherwise the working directory's .venv is used when
// it holds one, and the adapter's default (python3 on the server's PATH)
// when not. Whatever is chosen is asked once, before any handler code
// runs, for its version and prefix: older than MinVersion fails the
// registration, and a virtual environment is activated for the worker as
// its bin/activate would (VIRTUAL_ENV, its bin first on PATH).

// MinVersion is the oldest Python the worker bootstrap runs on.
var MinVersion = [2]int{3, 9}

// VenvInterpreter is the interpreter of a working directory's own virtual
// environment, used when a registration names none.
const VenvInterpreter = ".venv/bin/python"

// How an interpreter was chosen, for the registration log line.
const (
	ChosenByRegistration = "python.interpreter"
	ChosenByVenv         = ".venv in dir"
	ChosenByPath         = "PATH"
)

// Interpreter is the python interpreter a registration resolved to.
type Interpreter struct {
	// Path is the interpreter as chosen: absolute, symlinks kept (a
	// venv's bin/python is a link to its base interpreter, and the venv
	// is only found through the link).
	Path string
	// Executable is what workers run: the interpreter's own
	// sys.executable, so that launcher shims (pyenv, asdf), which read
	// the server's environment workers do not get, are skipped.
	Executable string
	// Version is the interpreter's version, e.g. "3.11.7".
	Version string
	// VirtualEnv is the root of the virtual environment Path belongs to
	// (sys.prefix when it differs from sys.base_prefix); empty otherwise.
	VirtualEnv string
	// ChosenBy says how Path was chosen (ChosenBy* constants).
	ChosenBy string
}

// commandNameRE is what a configured interpreter without a '/' may be: a
// python command looked up on PATH. Anything else must be given as a path,
// so that no other program on PATH can be named as an interpreter.
var commandNameRE = regexp.MustCompile(`^(python|pypy)([0-9]+(\.[0-9]+)*t?)?$`)

// maxInterpreter bounds a configured interpreter.
const maxInterpreter = 4096

// CheckInterpreter checks the form of a configured interpreter: a path
// (absolute, or relative to the working directory), or a python command
// name such as python3.12 looked up on the runtime's PATH.
func CheckInterpreter(s string) error {
	switch {
	case s == "":
		return errors.New("is empty: want a path such as .venv/bin/python or a command such as python3.12")
	case len(s) > maxInterpreter:
		return fmt.Errorf("is %d bytes, longer than %d", len(s), maxInterpreter)
	case strings.ContainsAny(s, "\x00\n\r"):
		return fmt.Errorf("%q contains a NUL or line break", s)
	case !strings.Contains(s, "/") && !commandNameRE.MatchString(s):
		return fmt.Errorf("%q is neither a path (write ./%s for a relative one) nor a python command such as python3 or python3.12", s, s)
	}
	return nil
}

// ResolveInterpreter chooses the interpreter of a registration in working
// directory dir, the way the adapter does: setting when given (a path
// relative to dir, or a command on PATH), else dir's .venv/bin/python when
// it exists, else fallback (an absolute path: the adapter's default, found
// on the server's PATH). It then checks the interpreter's version. Errors
// name the interpreter and how it was chosen.
func ResolveInterpreter(ctx context.Context, dir, setting, fallback string) (Interpreter, error) {
	it, err := chooseInterpreter(dir, setting, fallback)
	if err != nil {
		return Interpreter{}, err
	}
	return it, probeInterpreter(ctx, &it)
}

// ChooseInterpreter is ResolveInterpreter without running the
// interpreter: its path, and an error naming it when it is missing or not
// a program. Cheap enough for a check at start.
func ChooseInterpreter(dir, setting, fallback string) (Interpreter, error) {
	return chooseInterpreter(dir, setting, fallback)
}

// chooseInterpreter picks the interpreter's path without running it.
func chooseInterpreter(dir, setting, fallback string) (Interpreter, error) {
	switch {
	case setting != "" && !strings.Contains(setting, "/"):
		exe, err := exec.LookPath(setting)
		if err != nil {
			return Interpreter{}, fmt.Errorf("python interpreter %q (python.interpreter) is not on the runtime's PATH", setting)
		}
		abs, err := filepath.Abs(exe)
		return Interpreter{Path: abs, ChosenBy: ChosenByRegistration}, err
	case setting != "":
		p := setting
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return Interpreter{Path: filepath.Clean(p), ChosenBy: ChosenByRegistration}, checkExecutable(p, "python.interpreter")
	}
	venv := filepath.Join(dir, VenvInterpreter)
	if _, err := os.Lstat(venv); err == nil {
		// A venv that is there but broken (its base interpreter removed)
		// must not silently fall back to another python without its
		// packages.
		return Interpreter{Path: venv, ChosenBy: ChosenByVenv}, checkExecutable(venv, ".venv in dir")
	}
	if fallback == "" {
		return Interpreter{}, errNoFallback
	}
	return Interpreter{Path: fallback, ChosenBy: ChosenByPath}, nil
}

// errNoFallback is chooseInterpreter's error when it would take the
// fallback and there is none.
var errNoFallback = errors.New("no python interpreter: dir has no .venv/bin/python and python3 is not on the runtime's PATH")

// missingTarget follows the symbolic links from path (a venv's python is
// often python -> python3 -> /usr/bin/python3.11) to the first target that
// does not exist, and reports it: the name to give, not the intact link in
// the middle of the chain.
func missingTarget(path string) (string, bool) {
	cur := path
	for range 40 { // the kernel's own bound on a chain of links
		t, err := os.Readlink(cur)
		if err != nil {
			return "", false
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(cur), t)
		}
		if _, err := os.Lstat(t); err != nil {
			return t, true
		}
		cur = t
	}
	return "", false
}

// checkExecutable checks that path is a program the server may run.
func checkExecutable(path, chosenBy string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if target, ok := missingTarget(path); ok {
			return fmt.Errorf("python interpreter %s (%s) is a link to %s, which does not exist: recreate the virtual environment", path, chosenBy, target)
		}
		return fmt.Errorf("python interpreter %s (%s) does not exist", path, chosenBy)
	case err != nil:
		return fmt.Errorf("python interpreter %s (%s): %w", path, chosenBy, errors.Unwrap(err))
	case st.IsDir():
		return fmt.Errorf("python interpreter %s (%s) is a directory, not a program", path, chosenBy)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("python interpreter %s (%s) is not executable", path, chosenBy)
	}
	return nil
}

// probeTimeout bounds the version probe when the caller's context does not.
const probeTimeout = 15 * time.Second

// probeMark starts the probe's answer line, so that whatever else the
// interpreter prints at start (a sitecustomize) is not taken for it.
const probeMark = "fnbridge-python-probe "

// probeCode runs in the interpreter under -I, so nothing of the server's
// environment (PYTHONPATH, the user site) changes what it reports. It uses
// nothing newer than Python 3.4 (the first with -I), so an interpreter too
// old for the worker still gets to say its version.
const probeCode = `import sys, json
sys.stdout.write("\n` + probeMark + `" + json.dumps({"version": list(sys.version_info[:3]), "executable": sys.executable or "", "prefix": sys.prefix, "base_prefix": getattr(sys, "base_prefix", sys.prefix)}) + "\n")
`

// probeAnswer is what probeCode prints.
type probeAnswer struct {
	Version    []int  `json:"version"`
	Executable string `json:"executable"`
	Prefix     string `json:"prefix"`
	BasePrefix string `json:"base_prefix"`
}

// probes caches what each interpreter answered, keyed by its path and the
// identity of the file (and link) there: a registration then costs no
// extra process, and a venv made again, or an interpreter replaced, is
// asked again. Registrations starting together (a bridge's first
// invocations at concurrency 32, its min_warm) share one probe in flight
// rather than running one each: through a pyenv shim a probe is a dozen
// bash processes.
var probes = struct {
	sync.Mutex
	m map[string]*probeCall
}{m: map[string]*probeCall{}}

// probeCall is one probe of an interpreter: done is closed once ans or
// err is set. A failed one is forgotten, so the next registration asks
// again (the interpreter may be installed by then), and those that shared
// it ask once on their own: one probe killed (an OOM kill, a chaos test)
// fails one registration, not all that waited for it.
type probeCall struct {
	done chan struct{}
	ans  probeAnswer
	err  error
}

// probeKey identifies the interpreter file at path.
func probeKey(path string) string {
	var b strings.Builder
	b.WriteString(path)
	for _, stat := range []func(string) (fs.FileInfo, error){os.Lstat, os.Stat} {
		if fi, err := stat(path); err == nil {
			fmt.Fprintf(&b, "|%d|%d|%v", fi.ModTime().UnixNano(), fi.Size(), fi.Mode())
		}
	}
	return b.String()
}

// probeInterpreter asks it.Path for its version and prefix and fills it
// in; a version below MinVersion is an error.
func probeInterpreter(ctx context.Context, it *Interpreter) error {
	key := probeKey(it.Path)
	probes.Lock()
	call, shared := probes.m[key]
	if !shared {
		call = &probeCall{done: make(chan struct{})}
		probes.m[key] = call
	}
	probes.Unlock()
	if !shared {
		// This registration probes, under its own context; the others
		// wait for its answer.
		call.ans, call.err = runProbe(ctx, it.Path)
		if call.err != nil {
			probes.Lock()
			delete(probes.m, key)
			probes.Unlock()
		}
		close(call.done)
	} else {
		select {
		case <-call.done:
		case <-ctx.Done():
			return fmt.Errorf("python interpreter %s (%s): probe interrupted: %w", it.Path, it.ChosenBy, ctx.Err())
		}
	}
	ans, err := call.ans, call.err
	if err != nil && shared {
		// Another registration's probe failed: perhaps only that probe
		// (killed, timed out under its caller's deadline). This one asks
		// on its own before it fails, as it would have without sharing.
		if ans, err = runProbe(ctx, it.Path); err == nil {
			probes.Lock()
			if _, ok := probes.m[key]; !ok {
				done := &probeCall{done: make(chan struct{}), ans: ans}
				close(done.done)
				probes.m[key] = done
			}
			probes.Unlock()
		}
	}
	if err != nil {
		return fmt.Errorf("python interpreter %s (%s) %w", it.Path, it.ChosenBy, err)
	}
	v := ans.Version
	it.Version = fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
	if v[0] < MinVersion[0] || v[0] == MinVersion[0] && v[1] < MinVersion[1] {
		return fmt.Errorf("python interpreter %s (%s) is Python %s; fnbridge needs Python %d.%d or newer",
			it.Path, it.ChosenBy, it.Version, MinVersion[0], MinVersion[1])
	}
	it.Executable = it.Path
	if exe := ans.Executable; filepath.IsAbs(exe) {
		if st, err := os.Stat(exe); err == nil && !st.IsDir() {
			it.Executable = exe
		}
	}
	if ans.Prefix != "" && ans.Prefix != ans.BasePrefix && filepath.IsAbs(ans.Prefix) {
		it.VirtualEnv = ans.Prefix
	}
	return nil
}

// runProbe runs probeCode in the interpreter at path. The probe is owned
// like a worker (own group, parent-death signal, group killed before it
// returns), so a shim that forks leaves nothing behind.
func runProbe(ctx context.Context, path string) (probeAnswer, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, probeTimeout)
		defer cancel()
	}
	out, err := proc.Probe(ctx, path, "-I", "-c", probeCode)
	if err != nil {
		return probeAnswer{}, fmt.Errorf("does not run (is it Python %d.%d or newer?): %w", MinVersion[0], MinVersion[1], err)
	}
	var ans probeAnswer
	found := false
	for _, line := range bytes.Split(out, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(probeMark)); ok {
			ans = probeAnswer{}
			found = json.Unmarshal(bytes.TrimSpace(rest), &ans) == nil
		}
	}
	if !found || len(ans.Version) < 3 || ans.Version[0] < 0 || ans.Version[1] < 0 || ans.Version[2] < 0 {
		return probeAnswer{}, fmt.Errorf("did not answer the version check like a Python %d.%d or newer would (its output: %s)",
			MinVersion[0], MinVersion[1], strconv.Quote(proc.Clip(strings.TrimSpace(string(out)), 200)))
	}
	return ans, nil
}

// activation is the environment a worker of a virtual environment gets, as
// its bin/activate would set it: VIRTUAL_ENV, and the venv's bin first on
// the PATH the worker would otherwise have (the registration's, or the
// default).
func (it Interpreter) activation(registration map[string]string) map[string]string {
	if it.VirtualEnv == "" {
		return nil
	}
	path := proc.DefaultPath
	if p, ok := registration["PATH"]; ok {
		path = p
	}
	return map[string]string{"VIRTUAL_ENV": it.VirtualEnv, "PATH": filepath.Join(it.VirtualEnv, "bin") + ":" + path}
}
