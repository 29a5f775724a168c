package main

import (
	"strings"
	"testing"
)

func TestParseABBuilds(t *testing.T) {
	got, err := parseABBuilds("old=/a/bridge,new=/b/bridge@4", 32)
	if err != nil {
		t.Fatal(err)
	}
	want := []abBuild{{"old", "/a/bridge", 32}, {"new", "/b/bridge", 4}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parseABBuilds = %+v, want %+v", got, want)
	}
	for in, msg := range map[string]string{
		"old":              "not name=path",
		"old=/a,old=/b":    "given twice",
		"x=/a/bridge@none": "not a number",
		"x=/a/bridge@0":    "not a number",
		"=/a/bridge":       "not name=path",
	} {
		if _, err := parseABBuilds(in, 32); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseABBuilds(%q) = %v, want an error saying %q", in, err, msg)
		}
	}
}
