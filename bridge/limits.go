package bridge

import (
	"errors"
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

// Lower bounds of the limits: under them no worker of any runtime starts
// (functionruntime.MinWorkerOpenFiles and the others say what was
// measured), and every registration of the handler would fail. Each says
// why in words that follow the value the file wrote.
var limitLeast = map[string]struct {
	n    int64
	says string
}{
	"open_files": {functionruntime.MinWorkerOpenFiles, fmt.Sprintf("is fewer than %d, the fewest open files a worker starts with (a Python worker: stdio and its 3 pipes at 6 and up; a Bash worker needs %d)",
		functionruntime.MinWorkerOpenFiles, functionruntime.MinWorkerLimits("bash").OpenFiles)},
	"processes": {functionruntime.MinWorkerProcesses, fmt.Sprintf("is fewer than %d, the fewest processes a worker starts with (a Python worker and its guardian; a Bash worker needs %d)",
		functionruntime.MinWorkerProcesses, functionruntime.MinWorkerLimits("bash").Processes)},
	"memory": {functionruntime.MinWorkerMemory, "is less than " + functionruntime.FormatSize(functionruntime.MinWorkerMemory) +
		", the least memory a worker starts with (a Bash worker without a memory cgroup; a Python worker needs 8Mi to 13Mi)"},
}

// resolve parses every key, reporting each bad one under its field path;
// one past its bound (an int64's, if less) names the bound in the units
// the file wrote, and one under what any worker needs, or a worker of the
// handler's runtime kind, names that.
func (c *LimitsConfig) resolve(lp, kind string, bad func(path, format string, args ...any)) {
	d := functionruntime.DefaultWorkerLimits()
	field := func(key, v string, def int64, parse func(string) (int64, error), want string, most int64, mostIn func(int64, string) string, mostSays string) int64 {
		switch strings.TrimSpace(v) {
		case "":
			return def
		case "unlimited":
			return 0
		}
		written := strings.TrimSpace(v)
		n, err := parse(written)
		switch {
		case errors.Is(err, errTooLarge) || err == nil && n > most:
			bad(lp+"."+key, "%s is more than %s, %s", written, mostIn(most, written), mostSays)
		case err == nil && n == 0 && limitLeast[key].n > 0:
			// 0 is a count or a size, only too small: said so, with
			// "unlimited" for whoever meant no limit by it.
			bad(lp+"."+key, "0 %s (unlimited: no limit)", limitLeast[key].says)
		case err != nil || n <= 0:
			bad(lp+"."+key, "%q is not %s", v, want)
		case n < limitLeast[key].n:
			bad(lp+"."+key, "%s %s", written, limitLeast[key].says)
		}
		return n
	}
	count := func(s string) (int64, error) {
		n, err := strconv.ParseInt(s, 10, 64)
		if errors.Is(err, strconv.ErrRange) && n > 0 {
			return 0, errTooLarge
		}
		return n, err
	}
	countIn := func(most int64, _ string) string { return strconv.FormatInt(most, 10) }
	dur := func(s string) (int64, error) {
		t, err := goDuration(s)
		if err == nil && t < time.Second {
			err = errUnderASecond
		}
		return int64(t), err
	}
	durIn := func(most int64, written string) string { return durationIn(time.Duration(most), written) }
	const size = "the largest size a worker limit takes (unlimited lifts it)"
	c.resolved = functionruntime.WorkerLimits{
		Memory: field("memory", c.Memory, d.Memory, parseSize, "a size (e.g. 512Mi)", MaxLimitSize, sizeIn, size),
		Processes: field("processes", c.Processes, d.Processes, count, "a count (e.g. 256)",
			MaxProcesses, countIn, "the most processes the kernel allows (PID_MAX_LIMIT)"),
		// The runtime caps open_files at its own hard limit, which the
		// kernel keeps within fs.nr_open: no bound here but an int64's.
		OpenFiles: field("open_files", c.OpenFiles, d.OpenFiles, count, "a count (e.g. 1024)", math.MaxInt64, countIn, "the largest count there is"),
		FileSize:  field("file_size", c.FileSize, d.FileSize, parseSize, "a size (e.g. 1Gi)", MaxLimitSize, sizeIn, size),
		CPU: time.Duration(field("cpu", c.CPU, int64(d.CPU), dur, "a duration of at least 1s (e.g. 60s)",
			int64(MaxLimitCPU), durIn, "the longest cpu limit (unlimited lifts it)")),
	}
	c.hasResolved = true
	// Above what any worker needs, under what this kind's needs: refused
	// here too, or every registration of the handler would be (and its
	// invocations pause).
	least := functionruntime.MinWorkerLimits(kind)
	for _, l := range []struct {
		key, written, what string
		n, least           int64
	}{
		{"open_files", c.OpenFiles, "open files", c.resolved.OpenFiles, least.OpenFiles},
		{"processes", c.Processes, "processes", c.resolved.Processes, least.Processes},
	} {
		if l.n >= limitLeast[l.key].n && l.n < l.least {
			bad(lp+"."+l.key, "%s is fewer than %d, the fewest %s a %s worker starts with", strings.TrimSpace(l.written), l.least, l.what, kind)
		}
	}
}

// sizeUnits are the suffixes ParseSize accepts, Kubernetes style.
var sizeUnits = map[string]int64{
	"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
}

// ParseSize reads a byte size: an integer with an optional suffix (K, M,
// G, T, P, E decimal; Ki, Mi, Gi, Ti, Pi, Ei binary), as Kubernetes
// quantities.
func ParseSize(s string) (int64, bool) {
	n, err := parseSize(s)
	return n, err == nil
}

// parseSize is ParseSize telling a size too large for an int64
// (errTooLarge) from what is not a size.
func parseSize(s string) (int64, error) {
	unit, digits := sizeUnit(s)
	u, ok := sizeUnits[unit]
	if !ok {
		return 0, errNotSize
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && n > 0:
		return 0, errTooLarge
	case err != nil || n < 0:
		return 0, errNotSize
	case n > math.MaxInt64/u:
		return 0, errTooLarge
	}
	return n * u, nil
}

var (
	errNotSize      = errors.New("not a size")
	errUnderASecond = errors.New("under a second")
)

// sizeUnit splits a written size into its suffix and its number.
func sizeUnit(s string) (unit, digits string) {
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	return s[i:], s[:i]
}

// sizeIn writes limit for written, a size past it: in bytes and, when
// written has a unit, in that unit too: "9223372036854774784
// (9007199254740991Ki)", "9223372036854774784 (8Ei less 1Ki)" or
// "9223372036854774784 (over 9223372T)".
func sizeIn(limit int64, written string) string {
	unit, _ := sizeUnit(strings.TrimSpace(written))
	u, ok := sizeUnits[unit]
	if !ok || u == 1 {
		return strconv.FormatInt(limit, 10)
	}
	q, r := limit/u, limit%u
	switch short := u - r; {
	case r == 0:
		return fmt.Sprintf("%d (%d%s)", limit, q, unit)
	case short <= u>>10:
		return fmt.Sprintf("%d (%d%s less %s)", limit, q+1, unit, exactSize(short))
	}
	return fmt.Sprintf("%d (over %d%s)", limit, q, unit)
}

// exactSize writes n in the largest unit that divides it.
func exactSize(n int64) string {
	best, bestU := "", int64(1)
	for name, u := range sizeUnits {
		if n%u == 0 && (u > bestU || u == bestU && name < best) {
			best, bestU = name, u
		}
	}
	return fmt.Sprintf("%d%s", n/bestU, best)
}
