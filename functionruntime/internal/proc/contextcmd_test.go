package proc

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestAddContextCommand(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		path string // want PATH, with BIN for the new directory
	}{
		{[]string{"HOME=/h", "PATH=/usr/bin:/bin"}, "BIN:/usr/bin:/bin"},
		{[]string{"HOME=/h", "PATH="}, "BIN"},
		{[]string{"HOME=/h"}, "BIN"},
	} {
		dir := t.TempDir()
		bin := filepath.Join(dir, "bin")
		got, err := AddContextCommand(tc.env, dir, "/opt/fnb/bridge")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"HOME=/h", "PATH=" + filepath.Join(dir, "bin") + tc.path[len("BIN"):]}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("AddContextCommand(%q) = %q, want %q", tc.env, got, want)
		}
		if target, err := os.Readlink(filepath.Join(bin, "fnbridge")); err != nil || target != "/opt/fnb/bridge" {
			t.Fatalf("bin/fnbridge links to %q (%v), want /opt/fnb/bridge", target, err)
		}
	}
	env := []string{"PATH=/bin"}
	if got, err := AddContextCommand(env, t.TempDir(), ""); err != nil || !reflect.DeepEqual(got, env) {
		t.Fatalf("without a command: %q, %v; want the environment unchanged", got, err)
	}
}

func TestResolveContextCommand(t *testing.T) {
	// The test binary is not the bridge: no default command.
	if got, err := ResolveContextCommand(""); err != nil || got != "" {
		t.Fatalf(`ResolveContextCommand("") = %q, %v; want none for a test binary`, got, err)
	}
	if got, err := ResolveContextCommand("sh"); err != nil || !filepath.IsAbs(got) {
		t.Fatalf(`ResolveContextCommand("sh") = %q, %v; want an absolute path`, got, err)
	}
	if _, err := ResolveContextCommand("/nonexistent/fnbridge"); err == nil {
		t.Fatal("a missing command resolved")
	}
}
