package main

import "testing"

// An unknown --manifest-version is named once, with the versions there
// are, before the configuration is read.
func TestManifestNamesAnUnknownVersionOnce(t *testing.T) {
	root := newRootCmd()
	root.SetArgs([]string{"manifest", "--config", "/nonexistent.yaml", "--manifest-version", "9"})
	if err := root.Execute(); err == nil || err.Error() != "--manifest-version 9: want 1 to 4" {
		t.Fatalf("error = %v, want the flag named once with the versions allowed", err)
	}
}
