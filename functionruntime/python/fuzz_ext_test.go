package python_test

import (
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime/python"
)

// FuzzPythonHandler checks that handler validation never panics and only
// accepts dotted ASCII identifiers: nothing that could name a path or
// carry code.
func FuzzPythonHandler(f *testing.F) {
	for _, s := range []string{"h.handle", "pkg.sub.h.main", "", ".", "a..b", "../x.y", "a.b(c)", "a.b;c", "é.f", "1.f"} {
		f.Add(s)
	}
	a := python.New(python.Options{})
	f.Fuzz(func(t *testing.T, h string) {
		if a.ValidateHandler(h) != nil {
			return
		}
		if !strings.Contains(h, ".") || strings.Contains(h, "..") || strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") {
			t.Fatalf("accepted %q: not module.function", h)
		}
		for _, part := range strings.Split(h, ".") {
			if part[0] >= '0' && part[0] <= '9' {
				t.Fatalf("accepted %q: part %q starts with a digit", h, part)
			}
		}
		if strings.Trim(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") != "" {
			t.Fatalf("accepted %q: characters outside [A-Za-z0-9_.]", h)
		}
	})
}
