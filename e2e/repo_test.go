package e2e

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// Rule (README, CONTRIBUTING): "make help" lists every target with one
// line each: every target the Makefile documents with "## " is in its
// output, e2e (a name with a digit) included.
func TestMakeHelpListsEveryDocumentedTarget(t *testing.T) {
	testtool.Require(t, "", "make", "to list the Makefile's targets")
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

// Rule (docs/ARCHITECTURE.md, "Import direction"): dependencies point one
// way. restate and functionruntime never import each other, nor the
// bridge; journal sees only the frame header and the messages; nothing
// imports cmd, e2e or bench; and the product (what bin/bridge links)
// carries none of the test helpers. Read from `go list`, so a new import
// against the drawing fails here rather than waiting for a reader.
func TestImportDirection(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	const mod = "github.com/fnbridge/fnbridge/"
	list := func(args ...string) map[string][]string {
		cmd := exec.Command(goBin, append([]string{"list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, args...)...)
		cmd.Dir = ".."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %v: %v", args, err)
		}
		pkgs := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			var own []string
			for _, imp := range f[1:] {
				if strings.HasPrefix(imp, mod) {
					own = append(own, strings.TrimPrefix(imp, mod))
				}
			}
			pkgs[strings.TrimPrefix(f[0], mod)] = own
		}
		return pkgs
	}
	under := func(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }
	// The one exception the package table names: the adapters' tests
	// drive a real context endpoint.
	allowed := map[[2]string]bool{{"functionruntime/internal/proc/steptest", "bridge/stepctx"}: true, {"functionruntime/internal/proc/steptest", "bridge/stepctx/stepctxtest"}: true}
	rules := []struct{ from, never, why string }{
		{"restate", "functionruntime", "restate and functionruntime never import each other"},
		{"restate", "bridge", "the endpoint knows nothing of the bridge"},
		{"functionruntime", "restate", "restate and functionruntime never import each other"},
		{"functionruntime", "bridge", "the runtime knows nothing of the bridge"},
		{"journal", "restate/discovery", "journal sees only restate/wire and the messages"},
		{"journal", "restate/identity", "journal sees only restate/wire and the messages"},
		{"journal", "restate/internal", "journal sees only restate/wire and the messages"},
		{"bridge/telemetry", "functionruntime", "telemetry knows nothing of pools or runtimes"},
		{"bridge/stepctx", "functionruntime", "the context endpoint knows nothing of workers"},
		{"bridge/stepctx", "restate", "the context endpoint knows nothing of frames"},
	}
	pkgs := list("./...")
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the pattern no longer matches the repository", len(pkgs))
	}
	for pkg, imports := range pkgs {
		for _, imp := range imports {
			for _, never := range []string{"cmd", "e2e", "bench"} {
				if under(imp, never) && !under(pkg, never) {
					t.Errorf("%s imports %s: nothing imports %s", pkg, imp, never)
				}
			}
			if pkg == "journal" && !under(imp, "restate/wire") && !under(imp, "proto") {
				t.Errorf("journal imports %s: it sees only restate/wire and proto", imp)
			}
			for _, r := range rules {
				if under(pkg, r.from) && under(imp, r.never) && !allowed[[2]string{pkg, imp}] {
					t.Errorf("%s imports %s: %s", pkg, imp, r.why)
				}
			}
		}
	}
	// What bin/bridge links: no test helper.
	cmd := exec.Command(goBin, "list", "-deps", "./cmd/bridge")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/bridge: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if !strings.HasPrefix(dep, mod) {
			continue // the standard library's and other modules'
		}
		dep = strings.TrimPrefix(dep, mod)
		base := dep[strings.LastIndex(dep, "/")+1:]
		if strings.HasSuffix(base, "test") || dep == "internal/restateserver" || dep == "internal/testtool" {
			t.Errorf("bin/bridge links %s, a package for tests", dep)
		}
	}
}
