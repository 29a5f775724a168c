package e2e

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Rule (README, CONTRIBUTING): "make help" lists every target with one
// line each: every target the Makefile documents with "## " is in its
// output, e2e (a name with a digit) included.
func TestMakeHelpListsEveryDocumentedTarget(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	src, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	documented := regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+):.*## `).FindAllStringSubmatch(string(src), -1)
	if len(documented) < 5 {
		t.Fatalf("found %d documented targets in the Makefile; the pattern no longer matches it", len(documented))
	}
	out, err := exec.Command("make", "-s", "-C", "..", "help").CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			listed[f[0]] = true
		}
	}
	for _, m := range documented {
		if !listed[m[1]] {
			t.Errorf("make help does not list %q:\n%s", m[1], out)
		}
	}
}
