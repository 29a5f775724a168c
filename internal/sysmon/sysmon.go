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
	"errors"
	"os"
	"path/filepath"
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

// commEnv carries the process's name (/proc/self/comm) across the
// re-execution: the kernel names a process after the file it executes,
// which would make it "exe" in ps, top and pgrep.
const commEnv = "FNBRIDGE_SYSMON_COMM"

// ErrNotMainThread is Apply's answer on a thread other than the
// process's first: the parent-death signal a supervisor set
// (PR_SET_PDEATHSIG) belongs to that thread and survives an exec only
// from it. A program calls runtime.LockOSThread in an init function to
// keep main there.
var ErrNotMainThread = errors.New("sysmon: not on the main thread, where the re-execution keeps the parent-death signal")

// Apply makes the process run with Setting. In a process not yet
// re-executed it replaces the process image with /proc/self/exe (the
// binary this process runs, even if its file was replaced since) and
// returns only if that fails; in the re-executed one it restores GODEBUG
// and the process's name and returns nil. It must run on the main thread
// (ErrNotMainThread) before the process starts anything that an exec
// would end (listeners, children, goroutines doing work).
func Apply() error {
	if Restore() {
		return nil
	}
	env := Plan(os.Environ())
	if env == nil {
		return nil
	}
	if syscall.Gettid() != os.Getpid() {
		return ErrNotMainThread
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return err
	}
	env = append(env, commEnv+"="+strings.TrimSuffix(string(comm), "\n"))
	return syscall.Exec("/proc/self/exe", os.Args, env)
}

// Restore, in a process Apply re-executed, sets GODEBUG back to the
// user's value (or unsets it), gives the process and its threads their
// name again, removes the markers, and reports whether it did. The
// runtime keeps the schedtrace it started with: it reads that setting
// only at start. A marker without Setting at the end of GODEBUG did not
// come from Apply (a copied environment): it is dropped, GODEBUG left as
// it is, and Restore reports false, so that Apply goes on as in any
// process.
func Restore() bool {
	marker, ok := os.LookupEnv(markerEnv)
	if !ok {
		return false
	}
	comm := os.Getenv(commEnv)
	os.Unsetenv(markerEnv)
	os.Unsetenv(commEnv)
	if g := os.Getenv("GODEBUG"); g != Setting && !strings.HasSuffix(g, ","+Setting) {
		return false
	}
	if v, set := strings.CutPrefix(marker, "="); set {
		os.Setenv("GODEBUG", v)
	} else {
		os.Unsetenv("GODEBUG")
	}
	if comm != "" {
		rename(comm)
	}
	return true
}

// rename gives every thread of the process the name comm (the main
// thread's is the process's): the runtime started its first threads
// before main, under the name the exec gave them. A thread started
// while a pass runs copies the name of one not renamed yet, so passes
// repeat until one finds every thread named (a few at most; then a new
// thread can only copy comm).
func rename(comm string) {
	for range 10 {
		tasks, _ := filepath.Glob("/proc/self/task/*/comm")
		renamed := 0
		for _, name := range tasks {
			if b, err := os.ReadFile(name); err == nil && strings.TrimSuffix(string(b), "\n") == comm {
				continue
			}
			if f, err := os.OpenFile(name, os.O_WRONLY, 0); err == nil {
				_, _ = f.WriteString(comm)
				f.Close()
				renamed++
			}
		}
		if renamed == 0 {
			return
		}
	}
}
