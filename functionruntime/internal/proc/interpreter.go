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

// Settings are the options both adapters take, field for field, so that
// an adapter's Options converts to Settings and back and the two adapters
// default them in one place.
type Settings struct {
	Interpreter string
	Grace       time.Duration
	MaxLogLine  int
	MaxOutput   int
	NoSubreaper bool
}

// WithDefaults returns s with what is unset filled in: the interpreter
// and the output bound from the adapter's defaults, the SIGTERM-to-SIGKILL
// grace and the log line bound from this package's.
func (s Settings) WithDefaults(interpreter string, maxOutput int) Settings {
	if s.Interpreter == "" {
		s.Interpreter = interpreter
	}
	if s.Grace <= 0 {
		s.Grace = DefaultGrace
	}
	if s.MaxLogLine <= 0 {
		s.MaxLogLine = DefaultMaxLogLine
	}
	if s.MaxOutput <= 0 {
		s.MaxOutput = maxOutput
	}
	return s
}
