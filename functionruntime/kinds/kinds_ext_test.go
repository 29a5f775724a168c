package kinds_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
)

// The order is what configuration errors list ("python | bash"); the
// names are what configuration files and --runtime spell.
func TestNamesAreTheBuiltInKindsInOrder(t *testing.T) {
	if got := kinds.Names(); !slices.Equal(got, []string{"python", "bash"}) {
		t.Fatalf("Names() = %q, want [python bash]", got)
	}
}

// Each entry is complete and builds the adapter of its own kind: an entry
// whose adapter served another kind would register handlers the wrong
// interpreter runs.
func TestEveryKindIsCompleteAndBuildsItsOwnAdapter(t *testing.T) {
	for _, name := range kinds.Names() {
		k, ok := kinds.Lookup(name)
		if !ok {
			t.Fatalf("Lookup(%q) failed for a listed name", name)
		}
		if k.New == nil || k.CheckHandler == nil || k.SourceFiles == nil || k.HandlerForm == "" || k.SourceExt == "" {
			t.Fatalf("kind %q has an empty field: %+v", name, k)
		}
		if got := k.New().Kind(); got != name {
			t.Errorf("kind %q builds an adapter of kind %q", name, got)
		}
	}
}

func TestLookupRejectsAnUnknownKind(t *testing.T) {
	for _, name := range []string{"ruby", "", "Python", " bash"} {
		if _, ok := kinds.Lookup(name); ok {
			t.Errorf("Lookup(%q) succeeded", name)
		}
	}
}

// CheckHandler speaks the configuration's words for a bad shape and the
// adapter's for a bound; both kinds accept their documented examples.
func TestCheckHandler(t *testing.T) {
	tests := []struct {
		kind, handler, wantErr string
	}{
		{"python", "handler.main", ""},
		{"python", "pkg.sub.handler.main", ""},
		{"python", "main", `"main" is not module.function (python identifiers, module may be dotted)`},
		{"python", "../evil.f", `"../evil.f" is not module.function`},
		{"python", "h." + strings.Repeat("g", 300), "longer than 256"},
		{"bash", "handler.main", ""},
		{"bash", "my-file.main", ""},
		{"bash", "../h.f", `"../h.f" is not file.function (file.sh in dir; no paths, no shell characters)`},
		{"bash", "h.f;rm", "no shell characters"},
		{"bash", "h.sh.f", `"h.sh.f" is not file.function (file.sh in dir; no paths, no shell characters): the .sh is implied, write "h.f"`},
		{"python", "lib/h.f", `"lib/h.f" is not module.function (python identifiers, module may be dotted): name the module with dots, relative to dir, without .py`},
		{"bash", "h." + strings.Repeat("f", 200), "must be 1-128"},
	}
	for _, tt := range tests {
		k, _ := kinds.Lookup(tt.kind)
		err := k.CheckHandler(tt.handler)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %q: %v, want accepted", tt.kind, tt.handler, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s %q: error %v, want it to contain %q", tt.kind, tt.handler, err, tt.wantErr)
		}
	}
}

// SourceFiles names the file the worker imports or sources (a module
// file, a package's __init__.py, or file.sh) first, then every other file
// of the same language under dir (the helpers it may import or source),
// leaving out virtualenvs, caches and hidden directories: an edited helper
// must change the registration digest as an edited handler does.
func TestSourceFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"mod.py": "", "pkg/sub/__init__.py": "", "helpers.py": "", "lib/util.py": "",
		"both.py": "", "both/__init__.py": "", // a package and a module of one name
		"fn.sh": "", "lib/common.sh": "", "notes.txt": "",
		".venv/lib/site.py": "", "venv/pyvenv.cfg": "", "venv/lib/x.py": "",
		"__pycache__/mod.py": "", "node_modules/a/b.py": "", ".git/hook.sh": "",
	}
	var errs []error
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		errs = append(errs, os.MkdirAll(filepath.Dir(p), 0o755), os.WriteFile(p, []byte(content), 0o644))
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kind, handler string
		want          []string
	}{
		{"python", "mod.main", []string{"mod.py", "both.py", "both/__init__.py", "helpers.py", "lib/util.py", "pkg/sub/__init__.py"}},
		{"python", "pkg.sub.main", []string{"pkg/sub/__init__.py", "both.py", "both/__init__.py", "helpers.py", "lib/util.py", "mod.py"}},
		// Python imports the package where both exist.
		{"python", "both.main", []string{"both/__init__.py", "both.py", "helpers.py", "lib/util.py", "mod.py", "pkg/sub/__init__.py"}},
		{"bash", "fn.shout", []string{"fn.sh", "lib/common.sh"}},
	}
	for _, tt := range tests {
		k, _ := kinds.Lookup(tt.kind)
		got, err := k.SourceFiles(dir, tt.handler)
		var want []string
		for _, w := range tt.want {
			want = append(want, filepath.Join(dir, filepath.FromSlash(w)))
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s %q: SourceFiles = %q, %v, want %q", tt.kind, tt.handler, got, err, want)
		}
	}
	k, _ := kinds.Lookup("python")
	if _, err := k.SourceFiles(dir, "missing.main"); err == nil || !strings.Contains(err.Error(), `python module "missing" not found`) {
		t.Errorf("missing python module: error %v, want it named", err)
	}
	bk, _ := kinds.Lookup("bash")
	if _, err := bk.SourceFiles(dir, "missing.fn"); err == nil || !strings.Contains(err.Error(), `bash file "missing.sh" not found in `+dir) {
		t.Errorf("missing bash file: error %v, want it named in the handler's words", err)
	}
	// mod.py.main names the module "mod.py" (mod/py.py); mod.py exists.
	if _, err := k.SourceFiles(dir, "mod.py.main"); err == nil || !strings.Contains(err.Error(), `python module "mod.py" not found`) || !strings.HasSuffix(err.Error(), `the .py is implied, write "mod.main"`) {
		t.Errorf("module named with its .py: error %v, want the hint", err)
	}
}

// SourceDirs are the directories SourceTree walks, with its skips: where
// the dev loop sees a new helper.
func TestSourceDirs(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"lib/deep", "pkg", ".git/objects", ".venv/lib", "venv/lib", "__pycache__", "node_modules/a", "x/site-packages"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "venv", "pyvenv.cfg"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range []string{"", "lib", "lib/deep", "pkg", "x"} {
		want = append(want, filepath.Join(dir, filepath.FromSlash(d)))
	}
	if got := functionruntime.SourceDirs(dir); !slices.Equal(got, want) {
		t.Errorf("SourceDirs = %q, want %q", got, want)
	}
}

// A dir holding more source than a directory of functions (a whole
// checkout, an environment not recognised as one) is not read at every
// registration: the handler's own file alone counts, with an error that
// names the dir and says so, which the bridge logs as a warning.
func TestSourceFilesBounded(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i <= functionruntime.MaxSourceFiles; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("m%04d.sh", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k, _ := kinds.Lookup("bash")
	got, err := k.SourceFiles(dir, "m0000.f")
	if !errors.Is(err, functionruntime.ErrTooManySources) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "more than 1000 .sh files") {
		t.Fatalf("SourceFiles of %d scripts: error %v, want ErrTooManySources naming the dir and the bound", functionruntime.MaxSourceFiles+1, err)
	}
	if want := []string{filepath.Join(dir, "m0000.sh")}; !slices.Equal(got, want) {
		t.Errorf("SourceFiles past the bound = %q, want the handler's own file %q", got, want)
	}
}

// A dir that is a symbolic link (a current -> releases/v42 deploy) is
// walked as the directory it names, and the paths stay under dir as
// configured.
func TestSourceFilesThroughALinkedDir(t *testing.T) {
	root := t.TempDir()
	release := filepath.Join(root, "releases", "v42")
	err := errors.Join(
		os.MkdirAll(release, 0o755),
		os.WriteFile(filepath.Join(release, "h.py"), nil, 0o644),
		os.WriteFile(filepath.Join(release, "helper.py"), nil, 0o644),
		os.Symlink(release, filepath.Join(root, "current")),
	)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "current")
	k, _ := kinds.Lookup("python")
	got, err := k.SourceFiles(dir, "h.f")
	if want := []string{filepath.Join(dir, "h.py"), filepath.Join(dir, "helper.py")}; err != nil || !slices.Equal(got, want) {
		t.Errorf("SourceFiles through a linked dir = %q, %v, want %q", got, err, want)
	}
}
