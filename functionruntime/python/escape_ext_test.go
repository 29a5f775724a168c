package python_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
)

// Rule (contract): "Both adapters operate beneath the registered working
// directory." A handler module whose file is not beneath it once symlinks
// are resolved fails the registration, naming the module and where it
// resolves, and none of its code runs: each module of the dotted name is
// located before anything of it is imported.
func TestModuleOutsideWorkingDirRefused(t *testing.T) {
	outside, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(outside, "ran")
	evil := "open(" + strconvQuote(ran) + ", 'w').close()\ndef f(x):\n    return 'escaped'\n"
	adaptertest.WriteFiles(t, outside, map[string]string{"evil.py": evil, "evilpkg/__init__.py": evil, "evilpkg/mod.py": evil})

	cases := []struct {
		name, handler string
		link          map[string]string // name in the working dir → target outside
		want, why     string            // why: "" for "outside the working directory"
	}{
		{"module file symlinked out", "escape.f", map[string]string{"escape.py": filepath.Join(outside, "evil.py")}, "module 'escape' is " + filepath.Join(outside, "evil.py"), ""},
		{"package directory symlinked out", "pkg.mod.f", map[string]string{"pkg": filepath.Join(outside, "evilpkg")}, "module 'pkg' is " + filepath.Join(outside, "evilpkg", "__init__.py"), ""},
		{"a module of the interpreter", "subprocess.getoutput", nil, "module 'subprocess' is ", ""},
		// Said as what it is: the file is there, the interpreter's comes
		// first.
		{"a module the worker already imported, shadowed by a file", "json.f", nil, "module 'json' is ",
			"not the json.py in the working directory " + "%s: the interpreter's own module of that name comes first; rename yours"},
		{"a built-in module", "sys.exit", nil, "module 'sys' is built into the interpreter", "built into"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := conformance.NewFixture(t, tc.handler, map[string]string{"json.py": "def f(x):\n    return 'shadow'\n"})
			for name, target := range tc.link {
				if err := os.Symlink(target, filepath.Join(f.Dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			err := f.StartErr(t)
			why := "outside the working directory"
			if tc.why != "" {
				why = strings.ReplaceAll(tc.why, "%s", f.Dir)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), why) {
				t.Fatalf("Start error = %q, want it to contain %q and %q", err, tc.want, why)
			}
			if _, statErr := os.Stat(ran); statErr == nil {
				t.Fatalf("code of the module outside the working directory ran")
			}
		})
	}

}

// strconvQuote quotes a path as a Python string literal.
func strconvQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }
