package bridge

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/python"
)

// PythonConfig is a `python:` block, on a handler or at the top level (the
// default of every python handler that sets none): which interpreter runs
// the handler's workers.
type PythonConfig struct {
	// Interpreter is a path (on a handler relative to its dir, at the top
	// level relative to the configuration file) or a python command such
	// as python3.12 looked up on the runtime's PATH. Left out: dir's
	// .venv/bin/python when it exists, else python3 on the PATH.
	Interpreter string `yaml:"interpreter"`
}

// PythonInterpreter is the interpreter the handler's registrations name
// (its own python.interpreter, else the top-level one); empty: the
// runtime's default.
func (h *HandlerConfig) PythonInterpreter() string {
	if h.Python == nil {
		return ""
	}
	return h.Python.Interpreter
}

// resolvePython checks the top-level python block and makes its relative
// interpreter absolute: it is not tied to one handler's dir.
func (c *Config) resolvePython(baseDir string, bad func(path, format string, args ...any)) {
	s := c.Python.Interpreter
	if s == "" {
		return
	}
	if err := python.CheckInterpreter(s); err != nil {
		bad("python.interpreter", "%v", err)
		return
	}
	if strings.Contains(s, "/") && !filepath.IsAbs(s) {
		c.Python.Interpreter = filepath.Join(baseDir, s)
	}
}

// resolvePython checks a handler's python block and gives a python handler
// without an interpreter the top-level one. The handler's own relative
// path stays relative: the runtime resolves it against the working
// directory on its host.
func (h *HandlerConfig) resolvePython(hp string, top PythonConfig, bad func(path, format string, args ...any)) {
	if h.Python != nil && h.Runtime != python.Kind {
		bad(hp+".python", "only applies to runtime: python")
		return
	}
	if h.Runtime != python.Kind {
		return
	}
	if h.PythonInterpreter() == "" {
		if top.Interpreter == "" {
			h.Python = nil
			return
		}
		h.Python = &PythonConfig{Interpreter: top.Interpreter}
		return
	}
	if err := python.CheckInterpreter(h.Python.Interpreter); err != nil {
		bad(hp+".python.interpreter", "%v", err)
	}
}

// interpreterProblem says why an embedded runtime could not start h's
// interpreter (python3 or its venv's python, bash), or nil: said at start,
// as a missing handler file is, rather than at the first invocation.
func interpreterProblem(h *HandlerConfig) error {
	switch h.Runtime {
	case python.Kind:
		_, err := python.ChooseInterpreter(h.Dir, h.PythonInterpreter(), defaultPython())
		return err
	case bash.Kind:
		if _, err := exec.LookPath("bash"); err != nil {
			return errors.New("bash is not on the bridge's PATH")
		}
	}
	return nil
}

// defaultPython is what an embedded python runtime falls back to: python3
// on this process's PATH, as python.New looks it up.
var defaultPython = sync.OnceValue(func() string {
	exe, err := exec.LookPath("python3")
	if err != nil {
		return ""
	}
	abs, _ := filepath.Abs(exe)
	return abs
})

// interpreterDigest is the interpreter's part of the registration digest,
// so a registration made with another interpreter (a venv made again with
// another Python, a new python.interpreter) is a new generation. With an
// embedded runtime it is the interpreter the runtime resolves, and its
// version, resolved here the same way (the probe is cached, so the
// runtime does not ask again); a path inside dir is written relative to
// it, so the same function in another checkout keeps its digest. A remote
// runtime resolves the interpreter on its own host, which this process
// cannot see: there it is the setting as configured. An interpreter that
// cannot be resolved goes in as configured; the registration then fails
// with the runtime's error.
func interpreterDigest(h *HandlerConfig) string {
	if h.Runtime != python.Kind {
		return ""
	}
	setting := h.PythonInterpreter()
	if h.remoteRuntime {
		return setting
	}
	it, err := python.ResolveInterpreter(context.Background(), h.Dir, setting, defaultPython())
	if err != nil {
		return "unresolved " + setting
	}
	exe := it.Executable
	if rel, err := filepath.Rel(h.Dir, exe); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		exe = rel
	}
	return exe + " " + it.Version
}
