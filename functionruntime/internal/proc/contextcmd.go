package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// ContextCommandName is the name under which a worker finds the
// durable-steps command on its PATH; the bridge binary acts as that
// command when invoked by this name.
const ContextCommandName = "fnbridge"

// selfContext is set by DeclareContextCommand.
var selfContext atomic.Bool

// DeclareContextCommand records that the running executable acts as the
// fnbridge command when started under that name. The bridge declares it
// in main, so a copy installed under any name (fnbridge-linux-amd64, say)
// still gives Bash workers their fnbridge command; before, only the base
// names bridge and fnbridge did, and every step of a renamed binary failed
// with "fnbridge: command not found", retried forever.
func DeclareContextCommand() { selfContext.Store(true) }

// ResolveContextCommand returns the absolute path of the executable that
// implements a worker's fnbridge command: path, looked up in the server's
// PATH when it has no slash, or, when path is empty, the running
// executable if it declared itself (DeclareContextCommand) or is named
// bridge or fnbridge, else "" (no command).
func ResolveContextCommand(path string) (string, error) {
	if path != "" {
		return LookInterpreter(path)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", nil // no default: the running executable is unknown
	}
	if b := filepath.Base(exe); selfContext.Load() || b == "bridge" || b == ContextCommandName {
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
