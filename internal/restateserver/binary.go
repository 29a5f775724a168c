package restateserver

import (
	"os"
	"testing"
)

// BinaryEnv names the variable holding the restate-server path; the
// Makefile exports it.
const BinaryEnv = "RESTATE_SERVER_BIN"

// Binary returns the restate-server path from RESTATE_SERVER_BIN. When it is
// unset or not an executable file the test fails under CI (CI=true, where
// the tool must be installed) and is skipped elsewhere.
func Binary(t testing.TB) string {
	t.Helper()
	path := os.Getenv(BinaryEnv)
	why := ""
	if path == "" {
		why = BinaryEnv + " is not set"
	} else if st, err := os.Stat(path); err != nil {
		why = BinaryEnv + "=" + path + ": " + err.Error()
	} else if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		why = BinaryEnv + "=" + path + " is not an executable file"
	}
	if why == "" {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("restate-server is required in CI: %s (run `make tools`)", why)
		return ""
	}
	t.Skipf("skipping: restate-server not available: %s (run `make tools` and export %s, or use `make test`)", why, BinaryEnv)
	return ""
}
