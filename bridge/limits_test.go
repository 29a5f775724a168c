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
	return kindLimitsConfig(t, "python", block)
}

// kindLimitsConfig parses a one-handler configuration of the runtime kind
// (python or bash; its file h.py or h.sh written) with block appended to
// the handler.
func kindLimitsConfig(t *testing.T, kind, block string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	file, src := "h.py", "def f(x):\n    return x\n"
	if kind == "bash" {
		file, src = "h.sh", "f() { printf '%s' \"$1\"; }\n"
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return ParseConfig([]byte(`
services:
  - name: S
    handlers:
      - name: f
        runtime: `+kind+`
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
		"        limits: {memory: lots}\n":   `services[0].handlers[0].limits.memory: "lots" is not a size (e.g. 512Mi)`,
		"        limits: {processes: 0}\n":   `services[0].handlers[0].limits.processes: 0 is fewer than 2, the fewest processes a worker starts with (a Python worker and its guardian; a Bash worker needs 3) (unlimited: no limit)`,
		"        limits: {file_size: 1Qi}\n": `services[0].handlers[0].limits.file_size: "1Qi" is not a size`,
		"        limits: {processes: -1}\n":  `services[0].handlers[0].limits.processes: "-1" is not a count`,
		"        limits: {open_files: 0}\n":  `services[0].handlers[0].limits.open_files: 0 is fewer than 9, the fewest open files a worker starts with`,
		"        limits: {cpu: 10}\n":        `services[0].handlers[0].limits.cpu: "10" is not a duration`,
		"        limits: {cpu: 10ms}\n":      `services[0].handlers[0].limits.cpu: "10ms" is not a duration of at least 1s`,
		"        limits: {memory: 1.5Gi}\n":  `limits.memory: "1.5Gi" is not a size`,
	} {
		_, err := limitsConfig(t, block)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", strings.TrimSpace(block), err, want)
		}
	}
}

// A limit past its bound says so and names the bound, in the unit the
// file wrote, however far past it is: one too large for an int64 (or,
// for cpu, a time.Duration) is not "not a size". Each case asserts the
// whole error.
func TestLimitsPastTheirBoundNameIt(t *testing.T) {
	const size = "the largest size a worker limit takes (unlimited lifts it)"
	for _, tc := range []struct{ limits, want string }{
		{"{memory: 8Ei}", "line 9: services[0].handlers[0].limits.memory: 8Ei is more than 9223372036854774784 (8Ei less 1Ki), " + size},
		{"{file_size: 8Ei}", "line 9: services[0].handlers[0].limits.file_size: 8Ei is more than 9223372036854774784 (8Ei less 1Ki), " + size},
		{"{memory: 9000Pi}", "line 9: services[0].handlers[0].limits.memory: 9000Pi is more than 9223372036854774784 (8192Pi less 1Ki), " + size},
		{"{memory: 9999999T}", "line 9: services[0].handlers[0].limits.memory: 9999999T is more than 9223372036854774784 (over 9223372T), " + size},
		{"{memory: 9223372036854774785}", "line 9: services[0].handlers[0].limits.memory: 9223372036854774785 is more than 9223372036854774784, " + size},
		{"{file_size: 99999999999999999999}", "line 9: services[0].handlers[0].limits.file_size: 99999999999999999999 is more than 9223372036854774784, " + size},
		{"{memory: 9007199254740992Ki}", "line 9: services[0].handlers[0].limits.memory: 9007199254740992Ki is more than 9223372036854774784 (9007199254740991Ki), " + size},
		{"{cpu: 2562048h}", "line 9: services[0].handlers[0].limits.cpu: 2562048h is more than 2562047h, the longest cpu limit (unlimited lifts it)"},
		{"{cpu: 2562047h30m}", "line 9: services[0].handlers[0].limits.cpu: 2562047h30m is more than 2562047h, the longest cpu limit (unlimited lifts it)"},
		{"{cpu: 9999999999s}", "line 9: services[0].handlers[0].limits.cpu: 9999999999s is more than 9223369200s, the longest cpu limit (unlimited lifts it)"},
		{"{processes: 99999999999999999999}", "line 9: services[0].handlers[0].limits.processes: 99999999999999999999 is more than 4194304, the most processes the kernel allows (PID_MAX_LIMIT)"},
		{"{open_files: 99999999999999999999}", "line 9: services[0].handlers[0].limits.open_files: 99999999999999999999 is more than 9223372036854775807, the largest count there is"},
	} {
		_, err := limitsConfig(t, "        limits: "+tc.limits+"\n")
		if err == nil || err.Error() != tc.want {
			t.Errorf("limits: %s: error:\n%v\nwant:\n%s", tc.limits, err, tc.want)
		}
	}
	// Kubernetes' larger units are sizes, within the bound.
	cfg, err := limitsConfig(t, "        limits: {memory: 7Ei, file_size: 2Pi}\n")
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Services[0].Handlers[0].Limits.Worker(); w.Memory != 7<<60 || w.FileSize != 2<<50 {
		t.Errorf("7Ei, 2Pi = %d, %d", w.Memory, w.FileSize)
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
	h.Limits.resolve("limits", h.Runtime, bad)
	got, err := registrationDigest(h)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:f1f67b9730c6c99e41109d4aa24ca764320c2347cc33a655b1199f1a9d8f7281"; got != want {
		t.Fatalf("digest = %s, want %s", got, want)
	}
	h.Limits = LimitsConfig{}
	h.Limits.resolve("limits", h.Runtime, bad)
	def, _ := registrationDigest(h)
	if def != "sha256:b621a4ee907ea77f84bcaef8491e0658b28b01e6bd6a1d2299b8eb900f8440d5" {
		t.Fatalf("default limits changed the digest: %s", def)
	}
}
