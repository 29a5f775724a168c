package python_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// The README's compatibility section promises Python 3.9 or newer. CI has
// one interpreter (the machine's), so the worker bootstrap's own grammar is
// checked against 3.9's: ast.parse with feature_version refuses syntax
// newer than the version named (match statements and parenthesised context
// managers of 3.10, except* of 3.11, ...).
func TestBootstrapParsesAsPython39(t *testing.T) {
	py := testtool.Require(t, "", "python3", "to parse the worker bootstrap")
	src, err := os.ReadFile("bootstrap.py")
	if err != nil {
		t.Fatal(err)
	}
	check := `import ast, sys
src = sys.stdin.read()
ast.parse(src, "bootstrap.py", feature_version=(3, 9))
try:
    ast.parse("match x:\n    case 1: pass\n", feature_version=(3, 9))
except SyntaxError:
    pass
else:
    sys.exit("feature_version=(3, 9) accepted a match statement: the check proves nothing")
`
	cmd := exec.Command(py, "-I", "-c", check)
	cmd.Stdin = strings.NewReader(string(src))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bootstrap.py is not Python 3.9 syntax: %v\n%s", err, out)
	}
}
