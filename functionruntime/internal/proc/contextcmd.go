package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ContextCommandName is the name under which a worker finds the
// durable-steps command on its PATH; the bridge binary acts as that
// command when invoked by this name.
const ContextCommandName = "fnbridge"

// ResolveContextCommand returns the absolute path of the executable that
// implements a worker's fnbridge command: path, looked up in the server's
// PATH when it has no slash, or, when path is empty, the running
// executable if it is the bridge (base name bridge or fnbridge), else ""
// (no command).
func ResolveContextCommand(path string) (string, error) {
	if path != "" {
		return LookInterpreter(path)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", nil // no default: the running executable is unknown
	}
	if b := filepath.Base(exe); b == "bridge" || b == ContextCommandName {
		return exe, nil
	}
	return "", nil
}

// AddContextCommand gives a worker the fnbridge command: it creates
// scratch/bin holding a symlink named fnbridge to exe and puts that
// directory first on env's PATH (env as [BuildEnv] returns it), so no
// command of the registration's PATH can stand in for it. An empty exe
// returns env unchanged.
func AddContextCommand(env []string, scratch, exe string) ([]string, error) {
	if exe == "" {
		return env, nil
	}
	bin := filepath.Join(scratch, "bin")
	if err := os.Mkdir(bin, 0o700); err != nil {
		return nil, fmt.Errorf("create the fnbridge command directory: %w", err)
	}
	if err := os.Symlink(exe, filepath.Join(bin, ContextCommandName)); err != nil {
		return nil, fmt.Errorf("link the fnbridge command: %w", err)
	}
	out := append([]string(nil), env...)
	for i, kv := range out {
		if old, ok := strings.CutPrefix(kv, "PATH="); ok {
			if old == "" {
				out[i] = "PATH=" + bin
			} else {
				out[i] = "PATH=" + bin + ":" + old
			}
			return out, nil
		}
	}
	return append(out, "PATH="+bin), nil
}
