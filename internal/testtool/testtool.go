// Package testtool owns how tests find the external programs they run
// (restate's CLI, grpcurl, h2spec, the interpreters, the bridge binary):
// the path a Makefile variable names, or a name looked up in PATH. A
// missing program skips the test with what it is needed for, except under
// CI=true, where every tool must be installed and a missing one fails the
// test. It also has the one way tests wait for a state (Poll, Eventually)
// and pick a loopback address to listen on (FreeAddr, FreeAddrs).
package testtool

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Require returns the path of a program a test needs: the executable file
// the environment variable env names when env is given (the Makefile
// exports them), else name looked up in PATH. When it is missing the test
// is skipped, saying why it was needed, or fails under CI=true.
func Require(t testing.TB, env, name, why string) string {
	t.Helper()
	var msg string
	if env != "" {
		path := os.Getenv(env)
		st, err := os.Stat(path)
		if path != "" && err == nil && !st.IsDir() && st.Mode().Perm()&0o111 != 0 {
			return path
		}
		msg = fmt.Sprintf("%s not available (set %s to its path, or run `make test`): needed %s", name, env, why)
	} else {
		path, err := exec.LookPath(name)
		if err == nil {
			return path
		}
		msg = fmt.Sprintf("%s not found in PATH: needed %s", name, why)
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
