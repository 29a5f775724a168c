package bridge

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
)

func limitsConfig(t *testing.T, block string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "h.py"), []byte("def f(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return ParseConfig([]byte(`
services:
  - name: S
    handlers:
      - name: f
        runtime: python
        dir: .
        handler: h.f
`+block), dir)
}

// Omitted keys take the documented defaults; every key parses its unit and
// "unlimited" lifts it.
func TestLimitsDefaultsAndUnits(t *testing.T) {
	cfg, err := limitsConfig(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Services[0].Handlers[0].Limits.Worker(); got != functionruntime.DefaultWorkerLimits() {
		t.Fatalf("defaults = %+v", got)
	}
	cfg, err = limitsConfig(t, `        limits:
          memory: 512Mi
          processes: 64
          open_files: 100
          file_size: 1G
          cpu: unlimited
`)
	if err != nil {
		t.Fatal(err)
	}
	want := functionruntime.WorkerLimits{Memory: 512 << 20, Processes: 64, OpenFiles: 100, FileSize: 1e9}
	if got := cfg.Services[0].Handlers[0].Limits.Worker(); got != want {
		t.Fatalf("limits = %+v, want %+v", got, want)
	}
	cfg, err = limitsConfig(t, "        limits: {cpu: 90s}\n")
	if err != nil || cfg.Services[0].Handlers[0].Limits.Worker().CPU != 90*time.Second {
		t.Fatalf("cpu: %v", err)
	}
}

// Config errors name the field and say what was expected.
func TestLimitsErrorsNameTheField(t *testing.T) {
	for block, want := range map[string]string{
		"        limits: {memory: lots}\n":     `services[0].handlers[0].limits.memory: "lots" is not a size (e.g. 512Mi)`,
		"        limits: {file_size: 1Qi}\n":   `services[0].handlers[0].limits.file_size: "1Qi" is not a size`,
		"        limits: {processes: -1}\n":    `services[0].handlers[0].limits.processes: "-1" is not a count`,
		"        limits: {open_files: 0}\n":    `services[0].handlers[0].limits.open_files: "0" is not a count`,
		"        limits: {cpu: 10}\n":          `services[0].handlers[0].limits.cpu: "10" is not a duration`,
		"        limits: {cpu: 10ms}\n":        `services[0].handlers[0].limits.cpu: "10ms" is not a duration of at least 1s`,
		"        limits: {memory: 9999999T}\n": `limits.memory: "9999999T" is not a size`,
	} {
		_, err := limitsConfig(t, block)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", strings.TrimSpace(block), err, want)
		}
	}
}

// Limits are part of the registration digest: changing them registers a
// new generation, while the defaults keep the digest a registration had
// before limits existed (TestRegistrationDigestIsStable's golden values).
// The golden value was computed with Python's hashlib over the canonical
// JSON with "limits":"memory=67108864,processes=256,open_files=1024,file_size=1073741824,cpu=0".
func TestRegistrationDigestCoversLimits(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "greeter.py"), []byte("def greet(r):\n    return r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &HandlerConfig{Runtime: "python", Dir: dir, Handler: "greeter.greet", Env: map[string]string{"A": "1", "B": "2"}, IdleTimeout: Duration(5 * time.Minute),
		remoteRuntime: true} // no interpreter in the digest, as in the golden values
	h.Limits = LimitsConfig{Memory: "64Mi"}
	bad := func(path, format string, args ...any) { t.Fatalf(path+": "+format, args...) }
	h.Limits.resolve("limits", bad)
	got, err := registrationDigest(h)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:f1f67b9730c6c99e41109d4aa24ca764320c2347cc33a655b1199f1a9d8f7281"; got != want {
		t.Fatalf("digest = %s, want %s", got, want)
	}
	h.Limits = LimitsConfig{}
	h.Limits.resolve("limits", bad)
	def, _ := registrationDigest(h)
	if def != "sha256:b621a4ee907ea77f84bcaef8491e0658b28b01e6bd6a1d2299b8eb900f8440d5" {
		t.Fatalf("default limits changed the digest: %s", def)
	}
}
