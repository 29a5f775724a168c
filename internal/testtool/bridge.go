package testtool

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// BuiltBridge returns the bridge binary $BRIDGE_BIN names when it is a
// file (the Makefile builds bin/bridge and exports it), else "".
func BuiltBridge() string {
	if p := os.Getenv("BRIDGE_BIN"); p != "" {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// BuildBridge builds this module's ./cmd/bridge into dir and returns the
// binary's path.
func BuildBridge(dir string) (string, error) {
	bin := dir + "/bridge"
	cmd := exec.Command("go", "build", "-o", bin, "github.com/fnbridge/fnbridge/cmd/bridge")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/bridge: %v\n%s", err, out)
	}
	return bin, nil
}

// BridgeBin returns BuiltBridge, or a bridge built into dir when there is
// none (a test run without the Makefile).
func BridgeBin(t testing.TB, dir string) string {
	t.Helper()
	if p := BuiltBridge(); p != "" {
		return p
	}
	bin, err := BuildBridge(dir)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
