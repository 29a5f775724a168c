package bash_test

import (
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime/bash"
)

// FuzzBashHandler checks that handler validation never panics and that an
// accepted handler never contains '/', '..', whitespace or a shell
// metacharacter, and names exactly one file stem and one function.
func FuzzBashHandler(f *testing.F) {
	for _, s := range []string{"handler.main", "my-file.fn_2", "", ".", "../x.f", "/etc/x.f", "x.$(id)", "x.f;id", "x y.f", "a.b.c", "-x.f", "x.f\n"} {
		f.Add(s)
	}
	a := bash.New(bash.Options{})
	f.Fuzz(func(t *testing.T, h string) {
		if a.ValidateHandler(h) != nil {
			return
		}
		if strings.Contains(h, "/") || strings.Contains(h, "..") {
			t.Fatalf("accepted %q: contains a path element", h)
		}
		if strings.ContainsAny(h, " \t\n\r\v\f$`;&|<>(){}[]*?!~'\"\\#=%^,:@+\x00") {
			t.Fatalf("accepted %q: contains whitespace or a shell metacharacter", h)
		}
		stem, fn, ok := strings.Cut(h, ".")
		if !ok || stem == "" || fn == "" || strings.Contains(fn, ".") || strings.HasPrefix(stem, "-") {
			t.Fatalf("accepted %q: not file.function", h)
		}
		if strings.Trim(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != "" {
			t.Fatalf("accepted %q: characters outside [A-Za-z0-9_.-]", h)
		}
	})
}
