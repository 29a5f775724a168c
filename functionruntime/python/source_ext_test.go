package python_test

import (
	"os"
	"path/filepath"
	"testing"
)

// A worker started after its module was edited runs the edited source,
// even when the edit keeps the file's size and modification second, the
// only things a cached .pyc is checked against: the registration digest
// (and `bridge dev`) promise the code that is on disk.
func TestRestartedWorkerRunsTheEditedSource(t *testing.T) {
	f := conformance.NewFixture(t, "h.f", map[string]string{"h.py": "def f(e):\n    return 1\n"})
	path := filepath.Join(f.Dir, "h.py")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, "null").Output); got != "1" {
		t.Fatalf("first version answered %s, want 1", got)
	}
	_ = w.Close()
	if err := os.WriteFile(path, []byte("def f(e):\n    return 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := string(f.MustInvoke(t, f.Start(t), "null").Output); got != "2" {
		t.Fatalf("the worker started after the edit answered %s, want 2 (the edited source)", got)
	}
}
