package bridge

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// LimitsConfig is a handler's `limits:` block: what each of its workers
// (every process it forks included) may use. A key left out takes its
// default (functionruntime.DefaultWorkerLimits); "unlimited" lifts it.
type LimitsConfig struct {
	Memory    string `yaml:"memory"`     // size: 512Mi, 1G
	Processes string `yaml:"processes"`  // count
	OpenFiles string `yaml:"open_files"` // count
	FileSize  string `yaml:"file_size"`  // size
	CPU       string `yaml:"cpu"`        // duration: 60s, 15m

	resolved    functionruntime.WorkerLimits
	hasResolved bool
}

// Worker returns the resolved limits; a handler that did not come through
// the configuration check gets the defaults.
func (c *LimitsConfig) Worker() functionruntime.WorkerLimits {
	if !c.hasResolved {
		return functionruntime.DefaultWorkerLimits()
	}
	return c.resolved
}

// digestForm is the limits' part of the registration digest: empty for
// the defaults, so a registration that sets none keeps the digest it had
// before limits existed.
func (c *LimitsConfig) digestForm() string {
	if w := c.Worker(); w != functionruntime.DefaultWorkerLimits() {
		return w.Encode()
	}
	return ""
}

// Upper bounds of the limits: past them the kernel refuses the value, or
// the runtime's conversion to the unit it sets overflows, and every
// registration of the handler fails ("cannot apply worker limits").
// "unlimited" lifts a limit instead.
const (
	// MaxProcesses is the kernel's PID_MAX_LIMIT (2^22): a worker
	// cgroup's pids.max refuses more with EINVAL.
	MaxProcesses = 4 << 20
	// MaxLimitSize bounds memory and file_size: 8 EiB less 1 KiB, the
	// most that rounds up to whole KiB (RLIMIT_DATA's unit) in an int64.
	MaxLimitSize = math.MaxInt64 - (1<<10 - 1)
	// MaxLimitCPU bounds cpu: some 292 years, the whole hours that still
	// round up to whole seconds (RLIMIT_CPU's unit) in a time.Duration.
	MaxLimitCPU = 2562047 * time.Hour
)

// resolve parses every key, reporting each bad one under its field path.
func (c *LimitsConfig) resolve(lp string, bad func(path, format string, args ...any)) {
	d := functionruntime.DefaultWorkerLimits()
	field := func(key, v string, def int64, parse func(string) (int64, bool), want string, most int64, mostSays string) int64 {
		switch strings.TrimSpace(v) {
		case "":
			return def
		case "unlimited":
			return 0
		}
		n, ok := parse(strings.TrimSpace(v))
		switch {
		case !ok || n <= 0:
			bad(lp+"."+key, "%q is not %s", v, want)
		case n > most:
			bad(lp+"."+key, "%s is more than %s", strings.TrimSpace(v), mostSays)
		}
		return n
	}
	count := func(s string) (int64, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	dur := func(s string) (int64, bool) {
		t, err := time.ParseDuration(s)
		return int64(t), err == nil && t >= time.Second
	}
	size := fmt.Sprintf("%d, the largest size a worker limit takes (unlimited lifts it)", int64(MaxLimitSize))
	c.resolved = functionruntime.WorkerLimits{
		Memory: field("memory", c.Memory, d.Memory, ParseSize, "a size (e.g. 512Mi)", MaxLimitSize, size),
		Processes: field("processes", c.Processes, d.Processes, count, "a count (e.g. 256)",
			MaxProcesses, fmt.Sprintf("%d, the most processes the kernel allows (PID_MAX_LIMIT)", MaxProcesses)),
		// The runtime caps open_files at its own hard limit, which the
		// kernel keeps within fs.nr_open: no bound here.
		OpenFiles: field("open_files", c.OpenFiles, d.OpenFiles, count, "a count (e.g. 1024)", math.MaxInt64, ""),
		FileSize:  field("file_size", c.FileSize, d.FileSize, ParseSize, "a size (e.g. 1Gi)", MaxLimitSize, size),
		CPU: time.Duration(field("cpu", c.CPU, int64(d.CPU), dur, "a duration of at least 1s (e.g. 60s)",
			int64(MaxLimitCPU), Duration(MaxLimitCPU).String()+", the longest cpu limit (unlimited lifts it)")),
	}
	c.hasResolved = true
}

// sizeUnits are the suffixes ParseSize accepts, Kubernetes style.
var sizeUnits = map[string]int64{
	"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}

// ParseSize reads a byte size: an integer with an optional suffix (K, M,
// G, T decimal; Ki, Mi, Gi, Ti binary), as Kubernetes quantities.
func ParseSize(s string) (int64, bool) {
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	unit, ok := sizeUnits[s[i:]]
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if !ok || err != nil || n < 0 || n > math.MaxInt64/unit {
		return 0, false
	}
	return n * unit, true
}
