package bridge_test

import (
	"crypto/ed25519"
	"strconv"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/restate/identity"
)

// What the file holds that the configuration check would let through
// and something later (a registration, the endpoint, the manifest, a
// dial) would refuse or get wrong is refused at load, naming the line
// and the field in the file's words. Each case lists the words its error
// must hold; want empty: the file is accepted.
type loadCase struct {
	name, yaml string
	want       []string
}

func runLoadCases(t *testing.T, cases []loadCase) {
	t.Helper()
	dir := configDir(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bridge.ParseConfig([]byte(tc.yaml), dir)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v\n%s", err, tc.yaml)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%s\ndoes not hold %q", err, w)
				}
			}
			for _, goWord := range []string{"bridge.", "restate:", "Config.", "invalid registration", "NaN", "+Inf"} {
				if strings.Contains(err.Error(), goWord) {
					t.Errorf("error names something of the code rather than the file (%q): %s", goWord, err)
				}
			}
		})
	}
}

// Worker identities (run UIDs) are lower-case, so two services, or two
// handlers of one service, whose names differ only in case would share
// registrations and supersede each other's invocations: the later name
// is refused, naming the earlier one.
func TestConfigRefusesNamesEqualIgnoringCase(t *testing.T) {
	h := func(name string) string {
		return "      - {name: " + name + ", runtime: python, dir: functions, handler: greeter.greet}\n"
	}
	runLoadCases(t, []loadCase{
		{"services", servicesStart + h("a") + "  - name: s\n    handlers:\n" + h("a"),
			[]string{`line 5: services[1].name: "s" differs from services[0].name "S" only in case`}},
		{"services, named as the brief has them", "services:\n  - name: Slow\n    handlers:\n" + h("a") + "  - name: slow\n    handlers:\n" + h("a"),
			[]string{`line 5: services[1].name: "slow" differs from services[0].name "Slow" only in case; run UIDs are lower-case, so the two would share workers: rename one`}},
		{"the third of three services", servicesStart + h("a") + "  - name: T\n    handlers:\n" + h("a") + "  - name: t\n    handlers:\n" + h("a"),
			[]string{`line 8: services[2].name: "t" differs from services[1].name "T" only in case`}},
		{"handlers of one service", servicesStart + h("greet") + h("Greet"),
			[]string{`line 5: services[0].handlers[1].name: "Greet" differs from services[0].handlers[0].name "greet" only in case; run UIDs are lower-case, so the two would share workers: rename one`}},
		{"an exact duplicate is still a duplicate", servicesStart + h("greet") + h("greet"),
			[]string{`line 5: services[0].handlers[1].name: duplicate handler "greet" in service "S"`}},
		{"the same handler name in two services", servicesStart + h("greet") + "  - name: T\n    handlers:\n" + h("Greet"), nil},
	})
}

// A registration's env is refused by the runtime when a value holds a NUL
// byte or is not UTF-8, or when there are more variables or bytes than it
// takes: the same is refused at load, naming the variable or the env.
func TestConfigRefusesEnvTheRuntimeRefuses(t *testing.T) {
	withEnv := func(env string) string {
		return servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n        env:\n" + env
	}
	many := strings.Builder{}
	for i := range 1025 {
		many.WriteString("          V" + strconv.Itoa(i) + ": v\n")
	}
	runLoadCases(t, []loadCase{
		{"a NUL byte", withEnv("          GREETING: \"a\\0b\"\n"),
			[]string{`line 9: services[0].handlers[0].env.GREETING: value must be valid UTF-8 without NUL bytes`}},
		{"not UTF-8", withEnv("          OK: fine\n          GREETING: !!binary /w==\n"),
			[]string{`line 10: services[0].handlers[0].env.GREETING: value must be valid UTF-8 without NUL bytes`}},
		{"more variables than the runtime takes", withEnv(many.String()),
			[]string{`line 8: services[0].handlers[0].env: has 1025 variables, at most 1024 allowed`}},
		{"more bytes than the runtime takes", withEnv("          A: " + strings.Repeat("x", 128<<10-3) + "\n          B: x\n"),
			[]string{`line 8: services[0].handlers[0].env: totals 131076 bytes (name=value plus terminator each), at most 131072 allowed`}},
		{"exactly the bytes the runtime takes", withEnv("          A: " + strings.Repeat("x", 128<<10-3) + "\n"), nil},
		{"UTF-8 and an empty value", withEnv("          GREETING: \"héllo 👋\"\n          EMPTY: \"\"\n"), nil},
	})
}

// identity_keys are parsed at load with the endpoint's own parser, so a
// key that is not one is refused naming its line and index, not later by
// the endpoint naming a Go type.
func TestConfigParsesIdentityKeys(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	good := identity.EncodeKey(pub)
	runLoadCases(t, []loadCase{
		{"garbage after the prefix", "identity_keys: [publickeyv1_garbage]\n" + servicesStart + goodHandler,
			[]string{`line 1: identity_keys[0]: "publickeyv1_garbage" is not a Restate public key: public key decodes to 6 bytes, an ed25519 public key has 32 (bridge keygen prints one)`}},
		{"not base58, the second key", "identity_keys:\n  - " + good + "\n  - publickeyv1_0OIl\n" + servicesStart + goodHandler,
			[]string{`line 3: identity_keys[1]: "publickeyv1_0OIl" is not a Restate public key: public key after "publickeyv1_" is not valid base58`}},
		{"nothing after the prefix", "identity_keys: [publickeyv1_]\n" + servicesStart + goodHandler,
			[]string{`line 1: identity_keys[0]: "publickeyv1_" is not a Restate public key: public key has nothing after "publickeyv1_"`}},
		{"no prefix", "identity_keys: [abc]\n" + servicesStart + goodHandler,
			[]string{`line 1: identity_keys[0]: "abc" is not a Restate public key: public key must start with "publickeyv1_"`}},
		{"a key", "identity_keys: [" + good + "]\n" + servicesStart + goodHandler, nil},
	})
}

// Every retention reaches the manifest in whole milliseconds, as the
// timeouts do; an exponentiation_factor that is no finite number is
// refused rather than dropped (.nan) or left to the manifest (.inf).
func TestConfigRetentionsAndRetryFactorReachTheManifest(t *testing.T) {
	handler := func(extra string) string {
		return servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n" + extra
	}
	workflow := "services:\n  - name: W\n    type: workflow\n    handlers:\n      - name: run\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n"
	runLoadCases(t, []loadCase{
		{"journal_retention", handler("        journal_retention: 1500us\n"),
			[]string{`line 8: services[0].handlers[0].journal_retention: 1.5ms is not a whole number of milliseconds, the endpoint manifest's unit`}},
		{"idempotency_retention", handler("        idempotency_retention: 1h0.5ms\n"),
			[]string{`line 8: services[0].handlers[0].idempotency_retention: 1h0m0.0005s is not a whole number of milliseconds, the endpoint manifest's unit`}},
		{"workflow_completion_retention", workflow + "        workflow_completion_retention: 1d1500us\n",
			[]string{`line 9: services[0].handlers[0].workflow_completion_retention: 24h0m0.0015s is not a whole number of milliseconds, the endpoint manifest's unit`}},
		{"whole milliseconds", handler("        journal_retention: 1ms\n        idempotency_retention: 1.5s\n"), nil},
		{"exponentiation_factor .nan", handler("        retry_policy: {exponentiation_factor: .nan}\n"),
			[]string{`line 8: services[0].handlers[0].retry_policy.exponentiation_factor: .nan is not a number: want a finite factor of at least 1 (e.g. 2)`}},
		{"exponentiation_factor .inf", handler("        retry_policy:\n          exponentiation_factor: .inf\n"),
			[]string{`line 9: services[0].handlers[0].retry_policy.exponentiation_factor: .inf is not a finite number: want a finite factor of at least 1 (e.g. 2)`}},
		{"exponentiation_factor -.inf", handler("        retry_policy: {exponentiation_factor: -.Inf}\n"),
			[]string{`line 8: services[0].handlers[0].retry_policy.exponentiation_factor: -.inf is not a finite number`}},
		{"exponentiation_factor 1.5", handler("        retry_policy: {exponentiation_factor: 1.5}\n"), nil},
	})
}

// A value that would be dropped, or read as another one, is refused in
// the user's words: a timeout under the runtime's millisecond (0 there is
// its own default), retry settings of 0 (left out of the manifest: never
// what was asked), a journal bound too small to hold any journal (128
// meant as MiB), metrics on the endpoint's own port.
func TestConfigValuesThatWouldBeDroppedAreRefused(t *testing.T) {
	handler := func(extra string) string {
		return servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n" + extra
	}
	runLoadCases(t, []loadCase{
		{"timeout 500us", handler("        timeout: 500us\n"),
			[]string{`line 8: services[0].handlers[0].timeout: 500µs is under a millisecond, the runtime's unit: want at least 1ms`}},
		{"timeout 1ms", handler("        timeout: 1ms\n"), nil},
		{"max_attempts 0", handler("        retry_policy: {max_attempts: 0, on_max_attempts: kill}\n"),
			[]string{`line 8: services[0].handlers[0].retry_policy.max_attempts: 0 is too few: want at least 1 (the first attempt counts; 1: never retried), or leave it out for Restate's default`}},
		{"max_attempts 1", handler("        retry_policy: {max_attempts: 1}\n"), nil},
		{"exponentiation_factor 0", handler("        retry_policy: {exponentiation_factor: 0}\n"),
			[]string{`line 8: services[0].handlers[0].retry_policy.exponentiation_factor: 0 is below 1`}},
		{"max_journal_bytes 128", "max_journal_bytes: 128\n" + handler(""),
			[]string{`line 1: max_journal_bytes: 128 bytes is too small to hold an invocation's journal: want at least 1Ki (a bare number is bytes: 128Mi, not 128)`}},
		{"max_journal_bytes 1Ki", "max_journal_bytes: 1Ki\n" + handler(""), nil},
		{"metrics_listen on listen's port", "listen: 127.0.0.1:9080\nmetrics_listen: 0.0.0.0:9080\n" + handler(""),
			[]string{`line 2: metrics_listen: "0.0.0.0:9080" takes the port of listen "127.0.0.1:9080": the metrics need a port of their own (e.g. 127.0.0.1:9464)`}},
		{"metrics_listen on another host's same port", "listen: 127.0.0.1:9080\nmetrics_listen: 127.0.0.2:9080\n" + handler(""), nil},
	})
}

// A remote runtime is dialled, so its address needs a port (1-65535) or
// a socket file: what only listening could make sense of is refused.
func TestConfigRuntimeAddressesCanBeDialled(t *testing.T) {
	runtime := func(addr string) string {
		return "runtimes:\n  python: '" + addr + "'\n" + servicesStart + goodHandler
	}
	runLoadCases(t, []loadCase{
		{"no port", runtime("127.0.0.1:"),
			[]string{`line 2: runtimes.python: "127.0.0.1:" has no port: the bridge dials this address, so it needs a port from 1 to 65535`}},
		{"port 0", runtime("127.0.0.1:0"),
			[]string{`line 2: runtimes.python: "127.0.0.1:0" has port 0: the bridge dials this address, so it needs a port from 1 to 65535`}},
		{"port out of range", runtime("127.0.0.1:99999"),
			[]string{`line 2: runtimes.python: "127.0.0.1:99999" is neither host:port nor unix:///path: port "99999" is not a number from 1 to 65535`}},
		{"port 65536", runtime("localhost:65536"),
			[]string{`line 2: runtimes.python: "localhost:65536" is neither host:port nor unix:///path: port "65536" is not a number from 1 to 65535`}},
		{"unknown service name", runtime("localhost:nosuchservice"),
			[]string{`line 2: runtimes.python: "localhost:nosuchservice" is neither host:port nor unix:///path: port "nosuchservice" is neither a number from 1 to 65535 nor a known service name`}},
		{"unix: and nothing", runtime("unix:"),
			[]string{`line 2: runtimes.python: "unix:" names no socket: write a unix socket as unix:///absolute/path (unix:///run/fnbridge/python.sock)`}},
		{"unix: without the slashes", runtime("unix:/run/x.sock"),
			[]string{`line 2: runtimes.python: "unix:/run/x.sock" names no socket: write a unix socket as unix:///absolute/path (unix:///run/fnbridge/python.sock)`}},
		{"unix:// and nothing", runtime("unix://"),
			[]string{`line 2: runtimes.python: "unix://": a unix socket's path must be absolute (unix:///run/fnbridge/python.sock)`}},
		{"the root directory", runtime("unix:///"),
			[]string{`line 2: runtimes.python: "unix:///" names a directory, not a socket file (unix:///run/fnbridge/python.sock)`}},
		{"a directory", runtime("unix:///run/fnbridge/"),
			[]string{`line 2: runtimes.python: "unix:///run/fnbridge/" names a directory, not a socket file`}},
		{"a directory by ..", runtime("unix:///run/.."),
			[]string{`line 2: runtimes.python: "unix:///run/.." names a directory, not a socket file`}},
		{"host:port", runtime("127.0.0.1:9090"), nil},
		{"a port by its service name", runtime("localhost:http"), nil},
		{"a socket", runtime("unix:///run/fnbridge/python.sock"), nil},
		{"embedded", runtime(""), nil},
	})
}

// limits.processes becomes the worker cgroup's pids.max, which the kernel
// refuses above PID_MAX_LIMIT; memory, file_size and cpu become rlimits in
// KiB, 512-byte blocks and seconds, rounded up, which must not overflow:
// past those bounds every registration failed, so they are refused here.
func TestConfigLimitsAtMostWhatTheKernelTakes(t *testing.T) {
	limits := func(block string) string {
		return servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n        limits: " + block + "\n"
	}
	runLoadCases(t, []loadCase{
		{"over PID_MAX_LIMIT", limits("{processes: 5000000}"),
			[]string{`line 8: services[0].handlers[0].limits.processes: 5000000 is more than 4194304, the most processes the kernel allows (PID_MAX_LIMIT)`}},
		{"far over", limits("{processes: 9223372036854775807}"),
			[]string{`line 8: services[0].handlers[0].limits.processes: 9223372036854775807 is more than 4194304`}},
		{"memory", limits(`{memory: "9223372036854775807"}`),
			[]string{`line 8: services[0].handlers[0].limits.memory: 9223372036854775807 is more than 9223372036854774784, the largest size a worker limit takes (unlimited lifts it)`}},
		{"file_size", limits(`{file_size: "9223372036854775000"}`),
			[]string{`line 8: services[0].handlers[0].limits.file_size: 9223372036854775000 is more than 9223372036854774784`}},
		{"cpu", limits("{cpu: 2562047h47m16s}"),
			[]string{`line 8: services[0].handlers[0].limits.cpu: 2562047h47m16s is more than 2562047h, the longest cpu limit (unlimited lifts it)`}},
		{"PID_MAX_LIMIT", limits("{processes: 4194304}"), nil},
		{"the largest sizes and cpu", limits(`{memory: "9223372036854774784", file_size: "9223372036854774784", cpu: 2562047h}`), nil},
		{"open_files, which the runtime caps at its hard limit", limits(`{open_files: "9223372036854775807"}`), nil},
		{"unlimited", limits("{processes: unlimited, memory: unlimited, file_size: unlimited, cpu: unlimited}"), nil},
	})
}

// The configuration is one YAML document: a second one after --- would
// be ignored, so it is refused where it starts. An empty one (a trailing
// ---) ignores nothing.
func TestConfigIsOneYAMLDocument(t *testing.T) {
	runLoadCases(t, []loadCase{
		{"a second document", "listen: 127.0.0.1:9080\n" + servicesStart + goodHandler + "---\nlisten: 0.0.0.0:9080\n",
			[]string{`line 6: a second YAML document starts here: the configuration is one document (remove this --- or what follows it)`}},
		{"after an empty second", servicesStart + goodHandler + "---\n---\nservices: []\n",
			[]string{`line 6: a second YAML document starts here`}},
		{"a second document that is not valid YAML", servicesStart + goodHandler + "---\n: :\n  - [\n",
			[]string{`line 5: not valid YAML: did not find expected key`}},
		{"the first document empty", "---\n---\n" + servicesStart + goodHandler,
			[]string{`services: want at least one service`, `line 2: a second YAML document starts here`}},
		{"a leading ---", "---\n" + servicesStart + goodHandler, nil},
		{"a trailing ---", servicesStart + goodHandler + "---\n", nil},
		{"a document end marker", servicesStart + goodHandler + "...\n", nil},
	})
}

// A duration, size or whole number written as one but too large for the
// value it decodes to says it is more than the largest (in the units the
// file wrote it in), not that it is no duration or size, in every field
// of the type: the decoder says it, once.
func TestConfigOverflowNamesTheLargest(t *testing.T) {
	handler := func(extra string) string {
		return servicesStart + "      - name: h\n        runtime: python\n        dir: functions\n        handler: greeter.greet\n" + extra
	}
	const longest = ", the longest duration there is (some 292 years)"
	runLoadCases(t, []loadCase{
		{"timeout in hours", handler("        timeout: 2562048h\n"),
			[]string{`line 8: services[0].handlers[0].timeout: 2562048h is more than 2562047h` + longest}},
		{"start_timeout in seconds", "start_timeout: 9999999999999s\n" + servicesStart + goodHandler,
			[]string{`line 1: start_timeout: 9999999999999s is more than 9223372036s` + longest}},
		{"shutdown_timeout in days", "shutdown_timeout: 106752d\n" + servicesStart + goodHandler,
			[]string{`line 1: shutdown_timeout: 106752d is more than 106751d` + longest}},
		{"days and hours", handler("        journal_retention: 99999d2562047h\n"),
			[]string{`line 8: services[0].handlers[0].journal_retention: 99999d2562047h is more than 106751d23h` + longest}},
		{"several units", handler("        idle_timeout: 2562047h47m17s\n"),
			[]string{`line 8: services[0].handlers[0].idle_timeout: 2562047h47m17s is more than 2562047h47m16s` + longest}},
		{"retry interval", handler("        retry_policy: {max_interval: 99999999999999999999ns}\n"),
			[]string{`line 8: services[0].handlers[0].retry_policy.max_interval: 99999999999999999999ns is more than 9223372036854775807ns` + longest}},
		{"far below zero", handler("        lease_timeout: -2562048h\n"),
			[]string{`line 8: services[0].handlers[0].lease_timeout: -2562048h is negative: want a positive duration (e.g. 30s, 5m, 7d)`}},
		{"days too many, then no duration", handler("        journal_retention: 99999999999999999999dsoon\n"),
			[]string{`line 8: services[0].handlers[0].journal_retention: "99999999999999999999dsoon" is not a duration (want e.g. 30s, 5m, 7d)`}},
		{"100000 days fit", handler("        journal_retention: 100000d\n"), nil},
		{"max_journal_bytes in Ei", "max_journal_bytes: 8Ei\n" + servicesStart + goodHandler,
			[]string{`line 1: max_journal_bytes: 8Ei is more than 9223372036854775807 (8Ei less 1), the largest size there is`}},
		{"max_journal_bytes in bytes", "max_journal_bytes: 99999999999999999999\n" + servicesStart + goodHandler,
			[]string{`line 1: max_journal_bytes: 99999999999999999999 is more than 9223372036854775807, the largest size there is`}},
		{"max_journal_bytes in T", "max_journal_bytes: 9999999T\n" + servicesStart + goodHandler,
			[]string{`line 1: max_journal_bytes: 9999999T is more than 9223372036854775807 (over 9223372T), the largest size there is`}},
		{"max_journal_bytes far below zero", "max_journal_bytes: -8Ei\n" + servicesStart + goodHandler,
			[]string{`line 1: max_journal_bytes: -8Ei is negative: want a size (e.g. 65536, 64Ki, 128Mi)`}},
		{"max_journal_bytes in Pi", "max_journal_bytes: 1Pi\n" + servicesStart + goodHandler, nil},
		{"a whole number", "max_concurrent_invocations: 99999999999999999999\n" + servicesStart + goodHandler,
			[]string{`line 1: max_concurrent_invocations: 99999999999999999999 is more than 9223372036854775807, the largest whole number this field holds`}},
		{"a whole number far below zero", handler("        concurrency: -99999999999999999999\n"),
			[]string{`line 8: services[0].handlers[0].concurrency: -99999999999999999999 is less than -9223372036854775808, the smallest whole number this field holds`}},
	})
}
