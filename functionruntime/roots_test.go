package functionruntime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A working_dir is compared with the allowed roots after its symlinks are
// resolved, so neither "..", a shared name prefix nor a symlink can lead
// out of a root.
func TestAllowedRootsConfine(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "root")
	for _, d := range []string{"root/runs/a", "root-other", "outside"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A link inside the root that leads out, and one outside that leads in.
	if err := os.Symlink(filepath.Join(base, "outside"), filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "runs"), filepath.Join(base, "into")); err != nil {
		t.Fatal(err)
	}
	roots, err := resolveAllowedRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, want string // want "" means refused
	}{
		{"the root itself", root, root},
		{"beneath the root", filepath.Join(root, "runs", "a"), filepath.Join(root, "runs", "a")},
		{"unclean path beneath the root", root + "/runs/./a/", filepath.Join(root, "runs", "a")},
		{"a link from outside into the root runs in its target", filepath.Join(base, "into", "a"), filepath.Join(root, "runs", "a")},
		{"outside", filepath.Join(base, "outside"), ""},
		{"a sibling sharing the root's prefix", filepath.Join(base, "root-other"), ""},
		{"dot-dot out of the root", root + "/runs/../../outside", ""},
		{"a link inside the root that leads out", filepath.Join(root, "escape"), ""},
		{"the root's parent", base, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := roots.confine(tt.dir)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("confine(%q) = %q, %v; want %q", tt.dir, got, err, tt.want)
				}
				return
			}
			wantWorkingDirError(t, err, "not within an allowed root")
		})
	}
	t.Run("a missing or relative directory is refused as without roots", func(t *testing.T) {
		_, err := roots.confine(filepath.Join(root, "missing"))
		wantWorkingDirError(t, err, "does not exist")
		_, err = roots.confine("runs/a")
		wantWorkingDirError(t, err, "absolute")
	})
	t.Run("root / allows every directory", func(t *testing.T) {
		all, err := resolveAllowedRoots([]string{"/"})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := all.confine(filepath.Join(base, "outside")); err != nil || got != filepath.Join(base, "outside") {
			t.Fatalf("confine = %q, %v", got, err)
		}
	})
	t.Run("any of several roots", func(t *testing.T) {
		two, err := resolveAllowedRoots([]string{root, filepath.Join(base, "outside")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := two.confine(filepath.Join(base, "outside")); err != nil {
			t.Fatal(err)
		}
	})
}

func wantWorkingDirError(t *testing.T, err error, text string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "working_dir:") || !strings.Contains(st.Message(), text) {
		t.Fatalf("error = %v, want InvalidArgument starting %q and containing %q", err, "working_dir:", text)
	}
	if got := ErrorInfo(err).GetMetadata()["field"]; got != "working_dir" {
		t.Errorf("ErrorInfo field = %q, want working_dir", got)
	}
}

// Roots are checked when the server starts: each must be an existing
// directory, and is kept resolved.
func TestResolveAllowedRoots(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{nil, {""}, {filepath.Join(dir, "missing")}, {file}} {
		if _, err := resolveAllowedRoots(bad); err == nil {
			t.Errorf("resolveAllowedRoots(%q) succeeded", bad)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	roots, err := resolveAllowedRoots([]string{link})
	want, _ := filepath.EvalSymlinks(dir)
	if err != nil || len(roots) != 1 || roots[0] != want {
		t.Fatalf("resolveAllowedRoots(link) = %v, %v; want [%s]", roots, err, want)
	}
}
