package bridge

import (
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// A limit no worker can start with fails at start, naming the field and
// the least it takes, in the file's words; the least itself is taken.
func TestLimitsBelowWhatAnyWorkerNeedsAreRefused(t *testing.T) {
	for _, tc := range []struct{ limits, want string }{
		{"{open_files: 8}", "line 9: services[0].handlers[0].limits.open_files: 8 is fewer than 9, the fewest open files a worker starts with (a Python worker: stdio and its 3 pipes at 6 and up; a Bash worker needs 14)"},
		{"{open_files: 1}", "line 9: services[0].handlers[0].limits.open_files: 1 is fewer than 9, the fewest open files a worker starts with (a Python worker: stdio and its 3 pipes at 6 and up; a Bash worker needs 14)"},
		{"{processes: 1}", "line 9: services[0].handlers[0].limits.processes: 1 is fewer than 2, the fewest processes a worker starts with (a Python worker and its guardian; a Bash worker needs 3)"},
		{"{memory: 1000Ki}", "line 9: services[0].handlers[0].limits.memory: 1000Ki is less than 1Mi, the least memory a worker starts with (a Bash worker without a memory cgroup; a Python worker needs 8Mi to 13Mi)"},
		{"{memory: 1M}", "line 9: services[0].handlers[0].limits.memory: 1M is less than 1Mi, the least memory a worker starts with (a Bash worker without a memory cgroup; a Python worker needs 8Mi to 13Mi)"},
	} {
		_, err := limitsConfig(t, "        limits: "+tc.limits+"\n")
		if err == nil || err.Error() != tc.want {
			t.Errorf("limits: %s: error:\n%v\nwant:\n%s", tc.limits, err, tc.want)
		}
	}
	cfg, err := limitsConfig(t, "        limits: {open_files: 9, processes: 2, memory: 1Mi}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := functionruntime.DefaultWorkerLimits()
	want.OpenFiles, want.Processes, want.Memory = functionruntime.MinWorkerOpenFiles, functionruntime.MinWorkerProcesses, functionruntime.MinWorkerMemory
	if got := cfg.Services[0].Handlers[0].Limits.Worker(); got != want {
		t.Fatalf("limits = %+v, want %+v", got, want)
	}
}

// A Bash worker needs more than the least any worker needs (the
// descriptors bash opens at 10 and up, a subshell per invocation beside
// the guardian): a limit between the two fails at start too, naming the
// kind, instead of failing every registration of the handler (its
// invocations paused); the Bash least itself is taken.
func TestLimitsBelowWhatTheKindNeedsAreRefused(t *testing.T) {
	bashConfig := func(limits string) (*Config, error) {
		return kindLimitsConfig(t, "bash", "        limits: "+limits+"\n")
	}
	for _, tc := range []struct{ limits, want string }{
		{"{open_files: 9}", "line 9: services[0].handlers[0].limits.open_files: 9 is fewer than 14, the fewest open files a bash worker starts with"},
		{"{open_files: 13}", "line 9: services[0].handlers[0].limits.open_files: 13 is fewer than 14, the fewest open files a bash worker starts with"},
		{"{processes: 2}", "line 9: services[0].handlers[0].limits.processes: 2 is fewer than 3, the fewest processes a bash worker starts with"},
		// Under what any worker needs: said once, in those words.
		{"{open_files: 8}", "line 9: services[0].handlers[0].limits.open_files: 8 is fewer than 9, the fewest open files a worker starts with (a Python worker: stdio and its 3 pipes at 6 and up; a Bash worker needs 14)"},
	} {
		_, err := bashConfig(tc.limits)
		if err == nil || err.Error() != tc.want {
			t.Errorf("limits: %s: error:\n%v\nwant:\n%s", tc.limits, err, tc.want)
		}
	}
	cfg, err := bashConfig("{open_files: 14, processes: 3, memory: unlimited}")
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Services[0].Handlers[0].Limits.Worker()
	if least := functionruntime.MinWorkerLimits("bash"); got.OpenFiles != least.OpenFiles || got.Processes != least.Processes {
		t.Fatalf("limits = %+v, want the bash least %+v", got, least)
	}
}
