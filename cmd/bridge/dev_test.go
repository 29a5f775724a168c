package main

import (
	"strings"
	"testing"
)

// --admin and --advertise must be URLs restate-server and the bridge can
// use; a bad one is refused before anything starts, naming the flag.
func TestDevChecksItsURLs(t *testing.T) {
	cases := []struct {
		admin, advertise, want string
	}{
		{"http://127.0.0.1:9070", "", ""},
		{"https://restate.example:9070/", "http://10.0.0.5:9080", ""},
		{"127.0.0.1:9070", "", `--admin "127.0.0.1:9070"`},
		{"http://", "", `--admin "http://"`},
		{"http://127.0.0.1:9070", "bridge:9080", `--advertise "bridge:9080"`},
		{"http://127.0.0.1:9070", "ftp://127.0.0.1:9080", `--advertise "ftp://127.0.0.1:9080"`},
	}
	for _, tc := range cases {
		err := (&devFlags{admin: tc.admin, advertise: tc.advertise}).check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("admin %q advertise %q: err = %v, want %q", tc.admin, tc.advertise, err, tc.want)
		}
	}
	if err := (*devFlags)(nil).check(); err != nil {
		t.Errorf("serve (no dev flags): %v", err)
	}
}
