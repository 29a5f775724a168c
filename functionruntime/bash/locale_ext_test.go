package bash_test

import (
	"strings"
	"testing"
)

// localeSh reports what a function sees of the locale: LC_ALL in the
// shell, LC_ALL in a child's environment, and how many characters its
// argument has (bash counts characters in the function's locale).
const localeSh = `
report() {
	printf '%s|%s|%s' "${LC_ALL-unset}" "$(env | grep '^LC_ALL=' || echo none)" "${#1}"
}
`

// Rule: the worker reads requests in the C locale, but the function runs
// in the locale the file left: LC_ALL unset (the worker's LANG=C.UTF-8
// applies, so "日本語" is 3 characters), or set as the file set it,
// exported or not; the payload stays byte for byte either way.
func TestFunctionKeepsItsLocale(t *testing.T) {
	for _, tc := range []struct{ name, prelude, want string }{
		{"unset", "", "unset|none|3"},
		{"exported", "export LC_ALL=C.UTF-8\n", "C.UTF-8|LC_ALL=C.UTF-8|3"},
		{"shell only", "LC_ALL=C\n", "C|none|9"},
	} {
		f := conformance.NewFixture(t, "l.report", map[string]string{"l.sh": tc.prelude + localeSh})
		w := f.Start(t)
		for range 2 { // the second runs in a subshell forked after the first
			if got := string(f.MustInvoke(t, w, "日本語").Output); got != tc.want {
				t.Fatalf("%s: the function saw %q, want %q", tc.name, got, tc.want)
			}
		}
		if got := string(f.MustInvoke(t, w, "\xff\xfeé").Output); !strings.HasSuffix(got, map[string]string{"unset": "|3", "exported": "|3", "shell only": "|4"}[tc.name]) {
			t.Fatalf("%s: invalid UTF-8 payload: the function saw %q", tc.name, got)
		}
	}
}

// A file that makes LC_ALL readonly cannot be served (requests are read
// in the C locale): registering it fails, naming the variable.
func TestReadonlyLocaleRefused(t *testing.T) {
	f := conformance.NewFixture(t, "l.report", map[string]string{"l.sh": "readonly LC_ALL=C.UTF-8\n" + localeSh})
	if err := f.StartErr(t); err == nil || !strings.Contains(err.Error(), "l.sh makes LC_ALL readonly") {
		t.Fatalf("Start = %v, want an error naming LC_ALL", err)
	}
}
