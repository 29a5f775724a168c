package functionruntime

import (
	"os"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
)

// PrivateTempDir creates a directory only its owner may enter, named
// fnbridge-<kind>-<pid>-<random> in the system's temporary directory. The
// first call per kind in a process first removes the directories of that
// kind whose process is dead (a SIGKILLed bridge cannot remove its own),
// as the workers' scratch directories are swept.
func PrivateTempDir(kind string) (string, error) { return proc.PrivateDir(os.TempDir(), kind) }
