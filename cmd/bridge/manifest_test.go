package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeManifestConfig writes fn/h.py (an identity f) and bridge.yaml
// holding config in a temporary directory, and returns bridge.yaml's path.
func writeManifestConfig(t *testing.T, config string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "fn"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fn", "h.py"), []byte("def f(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// An unknown --manifest-version is named once, with the versions there
// are, before the configuration is read.
func TestManifestNamesAnUnknownVersionOnce(t *testing.T) {
	root := newRootCmd()
	root.SetArgs([]string{"manifest", "--config", "/nonexistent.yaml", "--manifest-version", "9"})
	if err := root.Execute(); err == nil || err.Error() != "--manifest-version 9: want 1 to 4" {
		t.Fatalf("error = %v, want the flag named once with the versions allowed", err)
	}
}

// A manifest version that cannot say ingress_private is refused, naming the
// handler, rather than printed as if the handler were public.
func TestManifestRefusesAVersionThatWouldMakeAHandlerPublic(t *testing.T) {
	cfg := writeManifestConfig(t, "services:\n  - name: Svc\n    handlers:\n      - {name: inner, runtime: python, dir: fn, handler: h.f, ingress_private: true}\n")
	for _, v := range []string{"1", "2"} {
		root := newRootCmd()
		root.SetArgs([]string{"manifest", "--config", cfg, "--manifest-version", v})
		root.SetOut(new(strings.Builder))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "--manifest-version "+v+" cannot keep Svc/inner private to the ingress") {
			t.Errorf("manifest v%s: error %v, want a refusal naming Svc/inner", v, err)
		}
	}
	root := newRootCmd()
	var out strings.Builder
	root.SetArgs([]string{"manifest", "--config", cfg, "--manifest-version", "3"})
	root.SetOut(&out)
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), `"ingressPrivate":true`) {
		t.Fatalf("manifest v3: %v, %q; want the handler marked private", err, out.String())
	}
}

// bridge manifest answers beside a serving replica of the same file that
// holds its context_listen: it starts no context endpoint ("address
// already in use" before).
func TestManifestBesideAServingContextListen(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := writeManifestConfig(t, "context_listen: "+held.Addr().String()+"\nservices:\n  - name: Svc\n    handlers:\n      - {name: s, runtime: python, dir: fn, handler: h.f, durability: steps}\n")
	root := newRootCmd()
	root.SetArgs([]string{"manifest", "--config", cfg})
	out := new(strings.Builder)
	root.SetOut(out)
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), `"Svc"`) {
		t.Fatalf("manifest: %v, output %q; want the manifest", err, out.String())
	}
}
