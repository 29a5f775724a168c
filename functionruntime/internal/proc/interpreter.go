package proc

import (
	"os/exec"
	"path/filepath"
	"time"
)

// LookInterpreter resolves an interpreter, a name looked up in PATH or a
// path, to an absolute path once, when an adapter is created, so a later
// change of the server's working directory or PATH does not change which
// program workers run.
func LookInterpreter(name string) (string, error) {
	exe, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(exe)
}

// ApplyDefaults fills the worker settings both adapters share when they
// are unset: the SIGTERM-to-SIGKILL grace and the log line bound.
func ApplyDefaults(grace *time.Duration, maxLogLine *int) {
	if *grace <= 0 {
		*grace = DefaultGrace
	}
	if *maxLogLine <= 0 {
		*maxLogLine = DefaultMaxLogLine
	}
}
