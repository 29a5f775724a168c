// Package sysmon owns how often the Go runtime's system monitor wakes in
// the bridge's long-running processes (bridge serve and dev, bridge
// runtime serve, the Bash workers' step agents).
//
// The runtime's sysmon thread sleeps deeply while every P is idle, and an
// entry into a system call wakes it; from then on it polls every 20 µs
// until it has found nothing to do for a millisecond (golang/go#18236:
// the tick is not configurable). The bridge is idle between the frames it
// relays and makes system calls as soon as one arrives, so every frame
// restarts that polling: under the five-step benchmark sysmon's wake-ups
// (about nine nanosleeps per invocation, each a context switch) were a
// sixth of the bridge's CPU, and in every shape of the benchmark the
// bridge's CPU per invocation fell without them, by a tenth to a third
// (bench/NOTES.md).
//
// The one switch the runtime reads that keeps sysmon out of that cycle is
// GODEBUG's schedtrace: with it set, sysmon never sleeps deeply, and its
// poll interval doubles to 10 ms while there is nothing to retake. Apply
// re-executes the process once (same pid, arguments and descriptors) with
// schedtrace set to the largest interval the runtime accepts, about 24.8
// days, and then restores GODEBUG as the user had it, so child processes
// inherit the user's environment. The runtime prints a scheduler line
// ("SCHED ...") to standard error each time that interval has passed
// since the host booted: never on a host up for less than 24.8 days, once
// at start on one up longer, and once every 24.8 days after. GODEBUG
// naming schedtrace (schedtrace=0 turns it off) is left as it is.
package sysmon

import (
	"os"
	"strings"
	"syscall"
)

// Setting is the GODEBUG setting Apply adds: schedtrace's largest value
// (milliseconds, an int32).
const Setting = "schedtrace=2147483647"

// markerEnv is set in the re-executed process's environment, to the
// user's GODEBUG ("=" then its value) or "unset": it stops a second
// re-execution and lets Restore put GODEBUG back.
const markerEnv = "FNBRIDGE_SYSMON_GODEBUG"

// Plan returns the environment to re-execute with from environ (as
// os.Environ gives it), or nil when the process should run as it is: it
// was re-executed already, or GODEBUG names schedtrace (the user decided).
func Plan(environ []string) []string {
	godebug, had := "", false
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case markerEnv:
			return nil
		case "GODEBUG":
			if !had { // the runtime reads the first
				godebug, had = v, true
			}
		}
	}
	for _, field := range strings.Split(godebug, ",") {
		if k, _, _ := strings.Cut(field, "="); strings.TrimSpace(k) == "schedtrace" {
			return nil
		}
	}
	marker, tuned := "unset", Setting
	if had {
		marker = "=" + godebug
		if godebug != "" {
			tuned = godebug + "," + Setting
		}
	}
	out := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			out = append(out, kv)
		}
	}
	return append(out, "GODEBUG="+tuned, markerEnv+"="+marker)
}

// Apply makes the process run with Setting. In a process not yet
// re-executed it replaces the process image with /proc/self/exe (the
// binary this process runs, even if its file was replaced since) and
// returns only if that fails; in the re-executed one it restores GODEBUG
// and returns nil. It must run before the process starts anything that
// an exec would end (listeners, children, goroutines doing work).
func Apply() error {
	if Restore() {
		return nil
	}
	env := Plan(os.Environ())
	if env == nil {
		return nil
	}
	return syscall.Exec("/proc/self/exe", os.Args, env)
}

// Restore, in a process Apply re-executed, sets GODEBUG back to the
// user's value (or unsets it) and removes the marker, and reports whether
// it did. The runtime keeps the schedtrace it started with: it reads that
// setting only at start.
func Restore() bool {
	marker, ok := os.LookupEnv(markerEnv)
	if !ok {
		return false
	}
	if v, set := strings.CutPrefix(marker, "="); set {
		os.Setenv("GODEBUG", v)
	} else {
		os.Unsetenv("GODEBUG")
	}
	os.Unsetenv(markerEnv)
	return true
}
