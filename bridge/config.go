package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"mime"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/identity"
)

// Config is the bridge configuration file (see docs/ARCHITECTURE.md and the
// README's configuration reference). Relative paths are resolved against
// the directory of the file.
type Config struct {
	// Listen is the Restate endpoint address, host:port.
	Listen string `yaml:"listen"`
	// ProtocolMode is "bidi" (BIDI_STREAM) or "request_response".
	ProtocolMode string `yaml:"protocol_mode"`
	// IdentityKeys are Restate request-identity public keys
	// (publickeyv1_...); empty accepts unsigned requests.
	IdentityKeys []string `yaml:"identity_keys"`
	// AllowUnauthenticated lets `bridge serve` listen on a non-loopback
	// address without identity keys (see CheckExposure).
	AllowUnauthenticated bool `yaml:"allow_unauthenticated"`
	// Runtimes maps a runtime kind to a remote FunctionRuntime address
	// (host:port or unix:///path); a kind absent or empty runs embedded.
	Runtimes map[string]string `yaml:"runtimes"`
	// SharedRuntimes are runtime kinds whose remote runtime several
	// replicas share: its health does not gate this replica's readiness,
	// since its outage would make every replica unready (and stop the
	// handlers of every other kind); their invocations fail with 503
	// meanwhile, which Restate retries.
	SharedRuntimes []string `yaml:"shared_runtimes"`
	// Python is the default python block of every python handler that
	// sets none (see PythonConfig).
	Python PythonConfig `yaml:"python"`
	// ShutdownTimeout bounds graceful shutdown on SIGTERM.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// StartTimeout, MaxConcurrentInvocations and MaxJournalBytes are the
	// endpoint's bounds (restate.Config); zero takes restate's default
	// (restate.DefaultStartTimeout, DefaultMaxConcurrentInvocations,
	// DefaultMaxJournalFactor times the message size).
	StartTimeout             Duration `yaml:"start_timeout"`
	MaxConcurrentInvocations int      `yaml:"max_concurrent_invocations"`
	MaxJournalBytes          ByteSize `yaml:"max_journal_bytes"`
	// ContextListen is the context endpoint of durability: steps handlers
	// (unix:///abs/path or host:port); empty: a socket in a private
	// temporary directory (see resolveContextListen).
	ContextListen string `yaml:"context_listen"`
	// MetricsListen serves Prometheus /metrics (host:port); empty: off.
	MetricsListen string `yaml:"metrics_listen"`
	// Tracing configures the OTLP span export (telemetry_config.go).
	Tracing TracingConfig `yaml:"tracing"`
	// Instance is this replica's identity, the first part of its run UIDs
	// (see instance.go); empty in the file: the hostname.
	Instance string `yaml:"instance"`
	// Services are the Restate services this deployment serves.
	Services []ServiceConfig `yaml:"services"`

	// Path is the absolute path of the loaded file ("" when built in code).
	Path string `yaml:"-"`
	// InstanceFrom says where Instance came from (InstanceFromHostname,
	// ...), for the start-up log.
	InstanceFrom string `yaml:"-"`
	// ContextListenFrom says where ContextListen came from
	// (ContextListenFromConfig, ...), for its errors; "" when it is empty
	// or the Config was built in code.
	ContextListenFrom string `yaml:"-"`

	// oneOffRun is the one handler ("Service/handler") a one-off run
	// invokes, set by ForOneOffRun; "" when serving (steps.go).
	oneOffRun string
	// manifestOnly: nothing will be invoked (ForManifest).
	manifestOnly bool
}

// ServiceConfig is one Restate service.
type ServiceConfig struct {
	Name string `yaml:"name"`
	// Type is TypeService (the default), TypeVirtualObject or
	// TypeWorkflow (see keyed_config.go).
	Type          string            `yaml:"type"`
	Documentation string            `yaml:"documentation"`
	Metadata      map[string]string `yaml:"metadata"`
	// LazyState makes Restate send no eager state: every read is a
	// GetLazyState round trip (manifest enableLazyState, v3+).
	LazyState bool            `yaml:"lazy_state"`
	Handlers  []HandlerConfig `yaml:"handlers"`
}

// HandlerConfig is one Restate handler backed by a Python or Bash function.
type HandlerConfig struct {
	Name          string            `yaml:"name"`
	Documentation string            `yaml:"documentation"`
	Metadata      map[string]string `yaml:"metadata"`
	// Runtime is a runtime kind of package kinds: "python" or "bash".
	Runtime string `yaml:"runtime"`
	// Dir is the registration working directory, relative to the config file.
	Dir string `yaml:"dir"`
	// Handler names the function in the kind's grammar (kinds.Kind
	// CheckHandler): module.function (python) or file.function (bash).
	Handler string            `yaml:"handler"`
	Env     map[string]string `yaml:"env"`
	// Python chooses a python handler's interpreter (see PythonConfig).
	Python *PythonConfig `yaml:"python"`
	// Bash holds a bash handler's own settings (see BashConfig).
	Bash *BashConfig `yaml:"bash"`
	// Timeout bounds one invocation (InvokeFunction timeout_millis).
	Timeout Duration `yaml:"timeout"`
	// IdleTimeout unregisters a warm registration unused this long.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// Concurrency is the number of warm registrations, each serving one
	// invocation at a time.
	Concurrency int `yaml:"concurrency"`
	// MinWarm registrations are created at start and kept registered.
	MinWarm int `yaml:"min_warm"`
	// LeaseTimeout bounds how long an invocation waits for a free
	// registration before failing retryably with 429.
	LeaseTimeout Duration `yaml:"lease_timeout"`
	// InputContentType and OutputContentType flow into the manifest.
	InputContentType  string `yaml:"input_content_type"`
	OutputContentType string `yaml:"output_content_type"`
	// InactivityTimeout and AbortTimeout are Restate's per-handler
	// timeouts, advertised in the manifest where its version allows.
	InactivityTimeout Duration `yaml:"inactivity_timeout"`
	// inactivityDerived: InactivityTimeout was left out and derived from
	// timeout and lease_timeout.
	inactivityDerived bool
	AbortTimeout      Duration `yaml:"abort_timeout"`
	// JournalRetention keeps a completed invocation's journal this long
	// (restate invocations describe, the UI); IdempotencyRetention keeps
	// the result of a call made with an idempotency key; for a workflow's
	// run handler, WorkflowCompletionRetention keeps its result and state.
	// Zero leaves each to Restate. Manifest v3+.
	JournalRetention            Duration `yaml:"journal_retention"`
	IdempotencyRetention        Duration `yaml:"idempotency_retention"`
	WorkflowCompletionRetention Duration `yaml:"workflow_completion_retention"`
	// IngressPrivate hides the handler from Restate's ingress: only other
	// services (fnbridge.call, a Restate SDK) can call it. Manifest v3+.
	IngressPrivate bool `yaml:"ingress_private"`
	// RetryPolicy is Restate's per-handler retry policy (manifest v4+).
	RetryPolicy *RetryPolicyConfig `yaml:"retry_policy"`
	// Limits bound each of the handler's workers (see limits.go).
	Limits LimitsConfig `yaml:"limits"`
	// Durability is "function" (one journaled run around the whole
	// function) or "steps" (the function journals its own steps).
	Durability string `yaml:"durability"`
	// SuspendAfter is how long a steps-mode wait may block before the
	// invocation suspends.
	SuspendAfter Duration `yaml:"suspend_after"`
	// Shared makes a virtual object's handler shared: it runs
	// concurrently with the key's other invocations and cannot write
	// state (ServiceConfig.HandlerType).
	Shared bool `yaml:"shared"`

	// remoteRuntime: the handler's runtime is a remote server, which
	// resolves the interpreter on its own host (interpreterDigest).
	remoteRuntime bool
}

// RetryPolicyConfig is Restate's retry policy for one handler.
type RetryPolicyConfig struct {
	InitialInterval Duration `yaml:"initial_interval"`
	MaxInterval     Duration `yaml:"max_interval"`
	// ExponentiationFactor and MaxAttempts are nil when not given (Restate's
	// default); a given 0 is refused, never dropped.
	ExponentiationFactor *float64 `yaml:"exponentiation_factor"`
	MaxAttempts          *int     `yaml:"max_attempts"`
	// OnMaxAttempts is "pause" or "kill".
	OnMaxAttempts string `yaml:"on_max_attempts"`
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// UnmarshalYAML parses "1m30s"-style durations, with whole days in front
// ("7d", "1d12h": retentions are counted in days). One too long for a
// duration (some 292 years) is refused naming the longest, in the units
// the file wrote it in.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("want a duration like 30s or 5m, got %s", describeNode(n))
	}
	v, err := parseDuration(s)
	switch {
	case errors.Is(err, errTooLarge):
		return fmt.Errorf("%s is more than %s, the longest duration there is (some 292 years)", s, durationIn(math.MaxInt64, s))
	case errors.Is(err, errTooSmall):
		return fmt.Errorf("%s is negative: want a positive duration (e.g. 30s, 5m, 7d)", s)
	case err != nil:
		return fmt.Errorf("%q is not a duration (want e.g. 30s, 5m, 7d)", s)
	}
	*d = Duration(v)
	return nil
}

// errTooLarge and errTooSmall are a size, count or duration written as
// one but beyond what an int64 holds: a message says so, with the limit,
// rather than that it is not one.
var (
	errTooLarge = errors.New("too large")
	errTooSmall = errors.New("too far below zero")
)

// daysRE is a leading count of days and the rest of a duration.
var daysRE = regexp.MustCompile(`^([0-9]+)d(.*)$`)

// goDurationRE is time.ParseDuration's grammar: what it refuses that
// matches this only overflowed.
var goDurationRE = regexp.MustCompile(`^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`)

// goDuration is time.ParseDuration, telling an overflow (errTooLarge,
// errTooSmall) from what is not a duration.
func goDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil && goDurationRE.MatchString(s) {
		if strings.HasPrefix(s, "-") {
			return 0, errTooSmall
		}
		return 0, errTooLarge
	}
	return v, err
}

// parseDuration is goDuration with whole days in front ("7d", "1d12h").
func parseDuration(s string) (time.Duration, error) {
	m := daysRE.FindStringSubmatch(s)
	if m == nil {
		return goDuration(s)
	}
	if m[2] != "" && !goDurationRE.MatchString(m[2]) {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	const day = 24 * time.Hour
	days, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || days > math.MaxInt64/int64(day) {
		return 0, errTooLarge // only digits: too many of them
	}
	v := time.Duration(days) * day
	if m[2] == "" {
		return v, nil
	}
	rest, err := goDuration(m[2])
	switch {
	case errors.Is(err, errTooLarge) || err == nil && rest > math.MaxInt64-v:
		return 0, errTooLarge
	case err != nil || rest < 0:
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return v + rest, nil
}

// durationUnits are the units a duration is written in, longest first.
var durationUnits = []struct {
	name string
	d    time.Duration
}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"μs", time.Microsecond}, {"ns", 1}}

// durationUnitRE finds the units of a written duration.
var durationUnitRE = regexp.MustCompile(`[0-9.]([a-zµμ]+)`)

// durationIn writes limit (positive) in the units of written ("2562048h",
// "99999999999s", "106752d"): in its one unit, rounded down
// ("2562047h"), or, written in several, to its smallest one
// ("2562047h47m"). What is written in none is answered in Go's form.
func durationIn(limit time.Duration, written string) string {
	smallest := -1
	units := map[int]bool{}
	for _, m := range durationUnitRE.FindAllStringSubmatch(written, -1) {
		for i, u := range durationUnits {
			if u.name == m[1] {
				units[i] = true
				smallest = max(smallest, i)
			}
		}
	}
	if smallest < 0 {
		return Duration(limit).String()
	}
	u := durationUnits[smallest]
	if len(units) == 1 {
		return fmt.Sprintf("%d%s", limit/u.d, u.name)
	}
	limit = limit.Truncate(u.d)
	days := ""
	if units[0] { // days written: the same in front
		days = fmt.Sprintf("%dd", limit/(24*time.Hour))
		limit %= 24 * time.Hour
		if limit == 0 {
			return days
		}
	}
	return days + Duration(limit).String()
}

// Std returns the value as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String is the duration as a configuration would write it: "20m" and
// "1h30m", not Go's "20m0s" and "1h30m0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ByteSize is a byte count written as an integer or a size with a unit
// suffix ("64Ki", "128Mi"; see ParseSize). A negative value decodes, so
// that validation can report it under its field path.
type ByteSize int64

// UnmarshalYAML parses 65536, 64Ki and -1 alike. One too large for an
// int64 is refused naming the largest, in the unit the file wrote.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("want a size like 65536 or 64Ki, got %s", describeNode(n))
	}
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	v, err := parseSize(strings.TrimPrefix(s, "-"))
	switch {
	case errors.Is(err, errTooLarge) && neg:
		return fmt.Errorf("%s is negative: want a size (e.g. 65536, 64Ki, 128Mi)", s)
	case errors.Is(err, errTooLarge):
		return fmt.Errorf("%s is more than %s, the largest size there is", s, sizeIn(math.MaxInt64, s))
	case err != nil || s == "":
		return fmt.Errorf("%q is not a size (want e.g. 65536, 64Ki, 128Mi)", s)
	}
	if neg {
		v = -v
	}
	*b = ByteSize(v)
	return nil
}

// Defaults applied when a field is left out.
const (
	DefaultListen          = "127.0.0.1:9080"
	DefaultTimeout         = 30 * time.Second
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultConcurrency     = 1
	DefaultLeaseTimeout    = 5 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	// MaxTimeout caps a handler's timeout; longer work belongs in
	// several invocations.
	MaxTimeout = 15 * time.Minute
	// MaxIdleTimeout caps a handler's idle_timeout: a FunctionRuntime
	// server refuses a registration that asks for more.
	MaxIdleTimeout = functionruntime.DefaultMaxIdleTimeout
	// MaxConcurrency caps warm registrations per handler.
	MaxConcurrency = 256
	// MinJournalBytes is the least max_journal_bytes taken (0 aside):
	// below it, a count meant in MiB (128) holds no journal at all.
	MinJournalBytes = 1 << 10
)

// Protocol modes accepted in protocol_mode.
const (
	ModeBidi            = "bidi"
	ModeRequestResponse = "request_response"
)

var (
	// serviceNameRE is what restate-server accepts of a service or
	// handler name (its endpoint manifest schema), narrowed to what both
	// accept: no "." or "-", and "_" only followed by a letter or digit
	// at the start.
	serviceNameRE = regexp.MustCompile(`^([A-Za-z]|_[A-Za-z0-9])[A-Za-z0-9_]*$`)
)

// checkHostPort reports what is wrong with a host:port address: its shape,
// or a port that is neither a number from 0 to 65535 nor a service name
// (net's own parsing would only refuse it once something listens or
// dials, after the workers have started). An empty port is any free one,
// as for net.Listen.
func checkHostPort(addr string) error { return checkHostPortFrom(addr, 0) }

// checkHostPortFrom is checkHostPort naming lowest, the least port the
// caller takes (1 for an address that is dialled), in what its messages
// say is allowed. A port of 0 or left empty is still for the caller to
// refuse, in its own words.
func checkHostPortFrom(addr string, lowest int) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "address "+addr+": "))
	}
	if port == "" {
		return nil
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Errorf("port %q is not a number from %d to 65535", port, lowest)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q is neither a number from %d to 65535 nor a known service name", port, lowest)
	}
	return nil
}

// CheckListen reports what is wrong with a listen address (host:port, an
// empty port: any free one), as the file's listen is checked; `bridge
// serve --listen` checks its value with it before anything starts.
func CheckListen(addr string) error {
	if err := checkHostPort(addr); err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	return nil
}

// checkRuntimeAddress reports what is wrong with the address of a remote
// runtime (kind names it in the example). It is dialled, so a host:port
// needs a port from 1 to 65535, where a listen address may leave it to
// the system, and a unix:///path must name a socket file, not a
// directory.
func checkRuntimeAddress(kind, addr string) error {
	if unix, err := checkUnixAddress(addr, "unix:///run/fnbridge/"+kind+".sock"); unix || err != nil {
		return err
	}
	if err := checkHostPortFrom(addr, 1); err != nil {
		return fmt.Errorf("%q is neither host:port nor unix:///path: %v", addr, err)
	}
	_, port, _ := net.SplitHostPort(addr)
	const need = "the bridge dials this address, so it needs a port from 1 to 65535"
	if port == "" {
		return fmt.Errorf("%q has no port: %s", addr, need)
	}
	if n, err := net.LookupPort("tcp", port); err == nil && n == 0 {
		return fmt.Errorf("%q has port 0: %s", addr, need)
	}
	return nil
}

// checkUnixAddress checks addr as a unix socket address (unix says it is
// one, and err what is wrong with it), example being a good one: an
// absolute path to a socket file. unix:path and unix:/path are refused
// (they would be read as host "unix"; unix:9090 is that host, as written,
// and no unix address).
func checkUnixAddress(addr, example string) (unix bool, err error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		switch {
		case !filepath.IsAbs(path):
			return true, fmt.Errorf("%q: a unix socket's path must be absolute (%s)", addr, example)
		case strings.HasSuffix(path, "/") || strings.HasSuffix(path, "/.") || strings.HasSuffix(path, "/.."):
			return true, fmt.Errorf("%q names a directory, not a socket file (%s)", addr, example)
		}
		return true, nil
	}
	if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
		if _, err := strconv.Atoi(rest); err != nil {
			return true, fmt.Errorf("%q names no socket: write a unix socket as unix:///absolute/path (%s)", addr, example)
		}
	}
	return false, nil
}

// checkContentType refuses what is not a media type (type/subtype, with
// parameters); an input's may be a pattern (*/*, text/*), as Restate
// matches requests against it.
func checkContentType(ct string, pattern bool) error {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("not a media type (%v)", strings.TrimPrefix(err.Error(), "mime: "))
	}
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || typ == "" || sub == "" {
		return errors.New("not a media type: want type/subtype, such as application/json")
	}
	if !pattern && (typ == "*" || sub == "*") {
		return errors.New("an output's content type is one type, not a pattern")
	}
	return nil
}

// nameRule says serviceNameRE in words, for its error messages.
const nameRule = "letters, digits and _, starting with a letter, or with _ and a letter or digit"

// kindChoices is what a runtime field may hold, for its error messages.
var kindChoices = "(" + strings.Join(kinds.Names(), " | ") + ")"

// LoadConfig reads, decodes (unknown fields are errors), resolves and
// validates a configuration file. A problem with its content is a
// *ConfigError naming the file as given, the line and the field path.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		return nil, errors.New("the configuration file's path is empty (--config names the configuration file)")
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory (--config names the configuration file, e.g. %s)", path, filepath.Join(path, "bridge.yaml"))
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, as the user gave it
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: no such file (--config names the configuration file)", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfg, err := ParseConfig(data, filepath.Dir(abs))
	if err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			ce.File = path
		}
		return nil, err
	}
	cfg.Path = abs
	return cfg, nil
}

// ParseConfig decodes and validates configuration bytes; relative handler
// directories resolve against baseDir. Every problem is reported at once,
// as a *ConfigError.
func ParseConfig(data []byte, baseDir string) (*Config, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ConfigError{Problems: []ConfigProblem{{Message: "file is empty: want at least one service under services"}}}
		}
		return nil, &ConfigError{Problems: []ConfigProblem{syntaxProblem(err)}}
	}
	cfg := &Config{}
	d := newConfigDecoder()
	d.decode(&doc, reflect.ValueOf(cfg).Elem(), "")
	d.refuseWrittenZeros(cfg)
	problems := append(d.problems, moreDocuments(dec)...)
	if err := cfg.resolve(baseDir); err != nil {
		problems = append(problems, d.withLines(err)...)
	}
	if len(problems) > 0 {
		sortProblems(problems)
		return nil, &ConfigError{Problems: problems}
	}
	return cfg, nil
}

// moreDocuments reads what follows the configuration's document: nothing,
// or empty documents (a trailing ---), are fine; a document with content
// would be ignored, so it is a problem where it starts, and so is one
// that is not valid YAML.
func moreDocuments(dec *yaml.Decoder) []ConfigProblem {
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return []ConfigProblem{syntaxProblem(err)}
		}
		if len(doc.Content) == 0 {
			continue
		}
		if n := doc.Content[0]; n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Value == "" {
			continue // nothing written after the ---
		}
		return []ConfigProblem{{Line: doc.Line, Message: "a second YAML document starts here: the configuration is one document (remove this --- or what follows it)"}}
	}
}

// caseClash says why names differing only in case are refused.
const caseClash = "run UIDs are lower-case, so the two would share workers: rename one"

// resolve applies defaults, makes paths absolute and validates everything,
// collecting every problem so a user fixes the file in one pass; the error
// is a *ConfigError whose problems have field paths but no lines yet.
func (c *Config) resolve(baseDir string) error {
	var problems []ConfigProblem
	bad := func(path, format string, args ...any) {
		problems = append(problems, ConfigProblem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	} else if err := CheckListen(c.Listen); err != nil {
		bad("listen", "%v", err)
	}
	switch c.ProtocolMode {
	case "":
		c.ProtocolMode = ModeBidi
	case ModeBidi, ModeRequestResponse:
	default:
		bad("protocol_mode", "%q is not allowed (bidi | request_response)", c.ProtocolMode)
	}
	for i, k := range c.IdentityKeys {
		// The endpoint's own parser (restate/identity), so that what loads
		// is what the endpoint takes.
		if _, err := identity.ParseKey(k); err != nil {
			bad(fmt.Sprintf("identity_keys[%d]", i), "%q is not a Restate public key: %v (bridge keygen prints one)", k, err)
		}
	}
	runtimeKinds := make([]string, 0, len(c.Runtimes))
	for kind := range c.Runtimes {
		runtimeKinds = append(runtimeKinds, kind)
	}
	sort.Strings(runtimeKinds) // problems on one line keep one order
	for i, kind := range c.SharedRuntimes {
		if c.Runtimes[kind] == "" {
			bad(fmt.Sprintf("shared_runtimes[%d]", i), "%q names no remote runtime: it must be a kind that runtimes: gives an address", kind)
		}
	}
	for _, kind := range runtimeKinds {
		addr := c.Runtimes[kind]
		if _, ok := kinds.Lookup(kind); !ok {
			bad("runtimes."+kind, "unknown runtime kind %s", kindChoices)
			continue
		}
		if addr != "" {
			if err := checkRuntimeAddress(kind, addr); err != nil {
				bad("runtimes."+kind, "%v", err)
			}
		}
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = Duration(DefaultShutdownTimeout)
	} else if c.ShutdownTimeout < 0 {
		bad("shutdown_timeout", "must be positive")
	}
	if c.StartTimeout < 0 {
		bad("start_timeout", "%s is negative (0: the default of %s)", c.StartTimeout, Duration(restate.DefaultStartTimeout))
	}
	if c.MaxConcurrentInvocations < 0 {
		bad("max_concurrent_invocations", "%d is negative (0: the default of %d)", c.MaxConcurrentInvocations, restate.DefaultMaxConcurrentInvocations)
	}
	if c.MaxJournalBytes < 0 {
		bad("max_journal_bytes", "%d is negative (0: the default, %d times the 32 MiB message size)", c.MaxJournalBytes, restate.DefaultMaxJournalFactor)
	} else if int64(c.MaxJournalBytes) > math.MaxInt {
		bad("max_journal_bytes", "%d is out of range", c.MaxJournalBytes)
	} else if c.MaxJournalBytes > 0 && c.MaxJournalBytes < MinJournalBytes {
		// 128 meant as MiB would pause every invocation with 571.
		bad("max_journal_bytes", "%d bytes is too small to hold an invocation's journal: want at least 1Ki (a bare number is bytes: 128Mi, not 128)", c.MaxJournalBytes)
	}
	c.resolveContextListen(bad)
	c.resolveTelemetry(bad)
	c.resolvePython(baseDir, bad)
	c.resolveInstance(bad)
	if len(c.Services) == 0 {
		bad("services", "want at least one service")
	}
	// Names are compared ignoring case too: run UIDs are lower-case
	// (runUID), so two names differing only in case would share workers.
	seenSvc := map[string]int{} // lower-cased name → index of its first service
	for si := range c.Services {
		s := &c.Services[si]
		sp := fmt.Sprintf("services[%d]", si)
		if s.Name == "" {
			bad(sp+".name", "missing: the Restate service name (%s)", nameRule)
		} else if !serviceNameRE.MatchString(s.Name) {
			bad(sp+".name", "%q is not a valid service name (%s)", s.Name, nameRule)
		} else if lower := strings.ToLower(s.Name); strings.HasPrefix(lower, "restate") || lower == "openapi" {
			// restate-server refuses these at registration (META0005).
			bad(sp+".name", "%q is reserved by Restate, which refuses to register a service whose name starts with \"restate\" (in any case) or is \"openapi\"", s.Name)
		} else if first, dup := seenSvc[strings.ToLower(s.Name)]; !dup {
			seenSvc[strings.ToLower(s.Name)] = si
		} else if c.Services[first].Name == s.Name {
			bad(sp+".name", "duplicate service %q", s.Name)
		} else {
			bad(sp+".name", "%q differs from services[%d].name %q only in case; %s", s.Name, first, c.Services[first].Name, caseClash)
		}
		if len(s.Handlers) == 0 {
			bad(sp+".handlers", "want at least one handler")
		}
		seenH := map[string]int{}
		for hi := range s.Handlers {
			h := &s.Handlers[hi]
			hp := fmt.Sprintf("%s.handlers[%d]", sp, hi)
			if h.Name == "" {
				bad(hp+".name", "missing: the Restate handler name (%s)", nameRule)
			} else if !serviceNameRE.MatchString(h.Name) {
				bad(hp+".name", "%q is not a valid handler name (%s)", h.Name, nameRule)
			} else if first, dup := seenH[strings.ToLower(h.Name)]; !dup {
				seenH[strings.ToLower(h.Name)] = hi
			} else if s.Handlers[first].Name == h.Name {
				bad(hp+".name", "duplicate handler %q in service %q", h.Name, s.Name)
			} else {
				bad(hp+".name", "%q differs from %s.handlers[%d].name %q only in case; %s", h.Name, sp, first, s.Handlers[first].Name, caseClash)
			}
			h.resolve(hp, baseDir, bad)
			h.resolvePython(hp, c.Python, bad)
			h.resolveBash(hp, bad)
			h.remoteRuntime = c.Runtimes[h.Runtime] != ""
		}
		s.resolveKeyed(sp, bad)
	}
	if len(problems) > 0 {
		return &ConfigError{Problems: problems}
	}
	return nil
}

func (h *HandlerConfig) resolve(hp, baseDir string, bad func(path, format string, args ...any)) {
	if k, ok := kinds.Lookup(h.Runtime); ok && h.Handler == "" {
		bad(hp+".handler", "missing (%s)", k.HandlerForm)
	} else if ok {
		if err := k.CheckHandler(h.Handler); err != nil {
			bad(hp+".handler", "%v", err)
		}
	} else if h.Runtime == "" {
		bad(hp+".runtime", "missing %s", kindChoices)
	} else {
		bad(hp+".runtime", "%q is not allowed %s", h.Runtime, kindChoices)
	}
	if h.Dir == "" {
		bad(hp+".dir", "missing: the directory holding the handler's code")
	} else {
		if !filepath.IsAbs(h.Dir) {
			h.Dir = filepath.Join(baseDir, h.Dir)
		}
		h.Dir = filepath.Clean(h.Dir)
		if st, err := os.Stat(h.Dir); errors.Is(err, fs.ErrNotExist) {
			bad(hp+".dir", "%q does not exist", h.Dir)
		} else if err != nil {
			bad(hp+".dir", "%q cannot be read: %v", h.Dir, errors.Unwrap(err))
		} else if !st.IsDir() {
			bad(hp+".dir", "%q is not a directory", h.Dir)
		}
	}
	names := make([]string, 0, len(h.Env))
	for k := range h.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	h.resolveEnv(hp, names, bad)
	switch {
	case h.Timeout == 0:
		h.Timeout = Duration(DefaultTimeout)
	case h.Timeout < 0 || h.Timeout.Std() > MaxTimeout:
		bad(hp+".timeout", "%s is out of range (0 < timeout <= %s)", h.Timeout, Duration(MaxTimeout))
	case h.Timeout.Std() < time.Millisecond:
		// The runtime takes whole milliseconds, and reads 0 as its own
		// default: 500us would bound nothing.
		bad(hp+".timeout", "%s is under a millisecond, the runtime's unit: want at least 1ms", h.Timeout)
	}
	switch {
	case h.IdleTimeout == 0:
		h.IdleTimeout = Duration(DefaultIdleTimeout)
	case h.IdleTimeout < Duration(time.Second):
		bad(hp+".idle_timeout", "%s is too short (at least 1s)", h.IdleTimeout)
	case h.IdleTimeout.Std() > MaxIdleTimeout:
		// The runtime refuses such a registration: every invocation
		// would pause.
		bad(hp+".idle_timeout", "%s is too long (at most %s, the runtime's bound)", h.IdleTimeout, Duration(MaxIdleTimeout))
	}
	switch {
	case h.Concurrency == 0:
		h.Concurrency = DefaultConcurrency
	case h.Concurrency < 0 || h.Concurrency > MaxConcurrency:
		bad(hp+".concurrency", "%d is out of range (1..%d)", h.Concurrency, MaxConcurrency)
	}
	if h.MinWarm < 0 || (h.Concurrency > 0 && h.MinWarm > h.Concurrency) {
		bad(hp+".min_warm", "%d is out of range (0..concurrency)", h.MinWarm)
	}
	switch {
	case h.LeaseTimeout == 0:
		h.LeaseTimeout = Duration(DefaultLeaseTimeout)
	case h.LeaseTimeout < 0:
		bad(hp+".lease_timeout", "must be positive")
	case h.LeaseTimeout.Std() > MaxTimeout:
		bad(hp+".lease_timeout", "%s is out of range (0 < lease_timeout <= %s)", h.LeaseTimeout, Duration(MaxTimeout))
	}
	if h.InputContentType == "" {
		h.InputContentType = "application/json"
	} else if err := checkContentType(h.InputContentType, true); err != nil {
		bad(hp+".input_content_type", "%q: %v", h.InputContentType, err)
	} else if k, ok := kinds.Lookup(h.Runtime); ok && k.JSONInputOnly && !isJSON(h.InputContentType) {
		// Every invocation would fail: the adapter decodes JSON only.
		bad(hp+".input_content_type", "%q: a %s handler takes JSON input (application/json, or a type ending in +json)", h.InputContentType, h.Runtime)
	}
	if h.OutputContentType == "" {
		h.OutputContentType = "application/json"
	} else if err := checkContentType(h.OutputContentType, false); err != nil {
		bad(hp+".output_content_type", "%q: %v", h.OutputContentType, err)
	}
	h.resolveRestateTimeouts(hp, bad)
	for _, r := range []struct {
		field string
		d     Duration
	}{{"journal_retention", h.JournalRetention}, {"idempotency_retention", h.IdempotencyRetention}, {"workflow_completion_retention", h.WorkflowCompletionRetention}} {
		switch {
		case r.d < 0:
			bad(hp+"."+r.field, "must be positive (leave it out for Restate's default)")
		case r.d > 0 && r.d < Duration(time.Millisecond):
			// The manifest counts milliseconds: this would reach Restate as 0.
			bad(hp+"."+r.field, "%s is under a millisecond, the manifest's unit (0 or left out: Restate's default)", r.d)
		default:
			wholeMillis(hp+"."+r.field, r.d, bad)
		}
	}
	h.Limits.resolve(hp+".limits", h.Runtime, bad)
	h.resolveDurability(hp, bad)
	if rp := h.RetryPolicy; rp != nil {
		if rp.InitialInterval < 0 {
			bad(hp+".retry_policy.initial_interval", "%s is negative: want a positive interval", rp.InitialInterval)
		}
		if rp.MaxInterval < 0 {
			bad(hp+".retry_policy.max_interval", "%s is negative: want a positive interval", rp.MaxInterval)
		}
		wholeMillis(hp+".retry_policy.initial_interval", rp.InitialInterval, bad)
		wholeMillis(hp+".retry_policy.max_interval", rp.MaxInterval, bad)
		if rp.InitialInterval > 0 && rp.MaxInterval > 0 && rp.MaxInterval < rp.InitialInterval {
			bad(hp+".retry_policy.max_interval", "%s is less than initial_interval %s", rp.MaxInterval, rp.InitialInterval)
		}
		switch f := rp.ExponentiationFactor; {
		case f == nil:
		case math.IsNaN(*f):
			// Every comparison is false for it: refused here, it would be
			// dropped from the manifest without a word.
			bad(hp+".retry_policy.exponentiation_factor", ".nan is not a number: want a finite factor of at least 1 (e.g. 2)")
		case math.IsInf(*f, 0):
			inf := ".inf" // as YAML writes it
			if *f < 0 {
				inf = "-.inf"
			}
			bad(hp+".retry_policy.exponentiation_factor", "%s is not a finite number: want a finite factor of at least 1 (e.g. 2)", inf)
		case *f < 1:
			bad(hp+".retry_policy.exponentiation_factor", "%v is below 1: want a finite factor of at least 1 (1: the same interval every time), or leave it out for Restate's default", *f)
		}
		if rp.MaxAttempts != nil && *rp.MaxAttempts < 1 {
			bad(hp+".retry_policy.max_attempts", "%d is too few: want at least 1 (the first attempt counts; 1: never retried), or leave it out for Restate's default", *rp.MaxAttempts)
		}
		switch rp.OnMaxAttempts {
		case "", "pause", "kill":
		default:
			bad(hp+".retry_policy.on_max_attempts", "%q is not allowed (pause | kill)", rp.OnMaxAttempts)
		}
	}
}

// resolveEnv refuses what the runtime would refuse of the registration's
// env (functionruntime's checkEnv, with the limits every runtime the
// bridge starts or `bridge runtime serve` runs has: the defaults): a name
// EnvNameProblem refuses, a value with a NUL byte or not UTF-8, more
// variables than functionruntime.DefaultMaxEnvVars, or more than
// functionruntime.DefaultMaxEnvBytes counted as the runtime counts them.
// names are the env's names, sorted.
func (h *HandlerConfig) resolveEnv(hp string, names []string, bad func(path, format string, args ...any)) {
	if len(h.Env) > functionruntime.DefaultMaxEnvVars {
		bad(hp+".env", "has %d variables, at most %d allowed", len(h.Env), functionruntime.DefaultMaxEnvVars)
	}
	for _, k := range names {
		if problem := functionruntime.EnvNameProblem(k); problem != "" {
			bad(hp+".env."+k, "%s", problem)
		} else if problem := functionruntime.EnvValueProblem(h.Env[k]); problem != "" {
			bad(hp+".env."+k, "%s", problem)
		}
	}
	if total := functionruntime.EnvBytes(h.Env); total > functionruntime.DefaultMaxEnvBytes {
		bad(hp+".env", "totals %d bytes (name=value plus terminator each), at most %d allowed", total, functionruntime.DefaultMaxEnvBytes)
	}
}
