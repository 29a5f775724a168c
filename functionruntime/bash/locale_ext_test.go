package bash_test

import (
	"strings"
	"testing"
)

// localeSh reports what a function sees of the locale: LC_ALL and
// LC_CTYPE in the shell, in a child's environment, and how many
// characters its argument has (bash counts characters in the function's
// locale).
const localeSh = `
report() {
	printf '%s|%s|%s|%s|%s' "${LC_ALL-unset}" "$(env | grep '^LC_ALL=' || echo none)" \
		"${LC_CTYPE-unset}" "$(env | grep '^LC_CTYPE=' || echo none)" "${#1}"
}
`

// Rule: the worker reads requests in the C locale, but the function runs
// in the locale the file left: LC_ALL and LC_CTYPE unset (the worker's
// LANG=C.UTF-8 applies, so "日本語" is 3 characters), or set as the file
// set them, exported or not; the payload stays byte for byte either way.
func TestFunctionKeepsItsLocale(t *testing.T) {
	for _, tc := range []struct{ name, prelude, want string }{
		{"unset", "", "unset|none|unset|none|3"},
		{"exported", "export LC_ALL=C.UTF-8\n", "C.UTF-8|LC_ALL=C.UTF-8|unset|none|3"},
		{"shell only", "LC_ALL=C\n", "C|none|unset|none|9"},
		{"ctype exported", "export LC_CTYPE=C.UTF-8\n", "unset|none|C.UTF-8|LC_CTYPE=C.UTF-8|3"},
		{"ctype shell only", "LC_CTYPE=C\n", "unset|none|C|none|9"},
		{"ctype under LC_ALL", "LC_CTYPE=C\nexport LC_ALL=C.UTF-8\n", "C.UTF-8|LC_ALL=C.UTF-8|C|none|3"},
	} {
		f := conformance.NewFixture(t, "l.report", map[string]string{"l.sh": tc.prelude + localeSh})
		w := f.Start(t)
		for range 2 { // the second runs in a subshell forked after the first
			if got := string(f.MustInvoke(t, w, "日本語").Output); got != tc.want {
				t.Fatalf("%s: the function saw %q, want %q", tc.name, got, tc.want)
			}
		}
		want := "|3"
		if strings.HasSuffix(tc.want, "|9") {
			want = "|4"
		}
		if got := string(f.MustInvoke(t, w, "\xff\xfeé").Output); !strings.HasSuffix(got, want) {
			t.Fatalf("%s: invalid UTF-8 payload: the function saw %q", tc.name, got)
		}
	}
}

// A file that makes the variable the worker switches readonly (LC_ALL
// when it is set, LC_CTYPE otherwise) cannot be served (requests are
// read in the C locale): registering it fails, naming the variable. One
// it does not switch is no obstacle.
func TestReadonlyLocaleRefused(t *testing.T) {
	for prelude, v := range map[string]string{
		"readonly LC_ALL=C.UTF-8\n":   "LC_ALL",
		"readonly LC_CTYPE=C.UTF-8\n": "LC_CTYPE",
		"readonly LC_CTYPE\n":         "LC_CTYPE",
	} {
		f := conformance.NewFixture(t, "l.report", map[string]string{"l.sh": prelude + localeSh})
		if err := f.StartErr(t); err == nil || !strings.Contains(err.Error(), "l.sh makes "+v+" readonly") {
			t.Fatalf("%q: Start = %v, want an error naming %s", prelude, err, v)
		}
	}
	f := conformance.NewFixture(t, "l.report", map[string]string{"l.sh": "readonly LC_CTYPE=C\nexport LC_ALL=C.UTF-8\n" + localeSh})
	w := f.Start(t)
	if got, want := string(f.MustInvoke(t, w, "日本語").Output), "C.UTF-8|LC_ALL=C.UTF-8|C|none|3"; got != want {
		t.Fatalf("readonly LC_CTYPE under LC_ALL: the function saw %q, want %q", got, want)
	}
}
