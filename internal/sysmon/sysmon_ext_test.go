package sysmon_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/internal/sysmon"
)

func TestPlan(t *testing.T) {
	cases := []struct {
		name    string
		environ []string
		want    []string // nil: no re-execution
	}{
		{"no GODEBUG: the setting alone, and a marker saying so",
			[]string{"PATH=/bin"},
			[]string{"PATH=/bin", "GODEBUG=" + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG=unset"}},
		{"the user's GODEBUG settings are kept, ours after them",
			[]string{"GODEBUG=http2debug=1,madvdontneed=1", "HOME=/h"},
			[]string{"HOME=/h", "GODEBUG=http2debug=1,madvdontneed=1," + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG==http2debug=1,madvdontneed=1"}},
		{"an empty GODEBUG is remembered as set",
			[]string{"GODEBUG="},
			[]string{"GODEBUG=" + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG=="}},
		{"of two GODEBUG entries the first counts, as for the runtime; both go",
			[]string{"GODEBUG=gctrace=1", "GODEBUG=schedtrace=5"},
			[]string{"GODEBUG=gctrace=1," + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG==gctrace=1"}},
		{"schedtrace named by the user: left alone", []string{"GODEBUG=gctrace=1,schedtrace=1000"}, nil},
		{"schedtrace=0 is how to turn it off", []string{"GODEBUG=schedtrace=0"}, nil},
		{"already re-executed: never again", []string{"GODEBUG=" + sysmon.Setting, "FNBRIDGE_SYSMON_GODEBUG=unset"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sysmon.Plan(tc.environ); !slices.Equal(got, tc.want) {
				t.Errorf("Plan(%q) = %q, want %q", tc.environ, got, tc.want)
			}
		})
	}
}

// report is what the helper process prints after Apply.
type report struct {
	PID        int
	Args       []string
	GODEBUG    *string // as the program (and its children) see it
	Marker     bool
	StartedEnv string   // GODEBUG in /proc/self/environ: what the runtime started with
	ChildEnv   []string // GODEBUG and marker lines of a child's environment
}

func TestMain(m *testing.M) {
	if os.Getenv("SYSMON_TEST_HELPER") == "1" {
		helper()
		return
	}
	os.Exit(m.Run())
}

func helper() {
	if err := sysmon.Apply(); err != nil {
		os.Stderr.WriteString("Apply: " + err.Error() + "\n")
		os.Exit(2)
	}
	r := report{PID: os.Getpid(), Args: os.Args}
	if v, ok := os.LookupEnv("GODEBUG"); ok {
		r.GODEBUG = &v
	}
	_, r.Marker = os.LookupEnv("FNBRIDGE_SYSMON_GODEBUG")
	started, _ := os.ReadFile("/proc/self/environ")
	for _, kv := range bytes.Split(started, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("GODEBUG=")); ok {
			r.StartedEnv = string(v)
		}
	}
	out, _ := exec.Command("env").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "GODEBUG=") || strings.HasPrefix(line, "FNBRIDGE_SYSMON") {
			r.ChildEnv = append(r.ChildEnv, line)
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func runHelper(t *testing.T, godebug *string) report {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "extra-arg")
	cmd.Env = []string{"SYSMON_TEST_HELPER=1", "PATH=" + os.Getenv("PATH")}
	if godebug != nil {
		cmd.Env = append(cmd.Env, "GODEBUG="+*godebug)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v, stderr %q", err, stderr.String())
	}
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("helper output %q: %v", stdout.String(), err)
	}
	if r.PID != cmd.Process.Pid {
		t.Errorf("the helper ran as pid %d, started as %d: the re-execution must keep the process", r.PID, cmd.Process.Pid)
	}
	if !slices.Equal(r.Args, cmd.Args) {
		t.Errorf("arguments after Apply = %q, want %q", r.Args, cmd.Args)
	}
	if r.Marker {
		t.Error("the marker is still in the environment after Apply")
	}
	return r
}

func TestApplyRestartsWithTheSettingAndGivesTheUserTheirEnvironment(t *testing.T) {
	t.Run("no GODEBUG", func(t *testing.T) {
		r := runHelper(t, nil)
		if r.StartedEnv != sysmon.Setting {
			t.Errorf("the runtime started with GODEBUG %q, want %q", r.StartedEnv, sysmon.Setting)
		}
		if r.GODEBUG != nil {
			t.Errorf("GODEBUG after Apply = %q, want it unset as it was", *r.GODEBUG)
		}
		if len(r.ChildEnv) != 0 {
			t.Errorf("a child inherited %q", r.ChildEnv)
		}
	})
	t.Run("the user's GODEBUG", func(t *testing.T) {
		user := "madvdontneed=1"
		r := runHelper(t, &user)
		if want := user + "," + sysmon.Setting; r.StartedEnv != want {
			t.Errorf("the runtime started with GODEBUG %q, want %q", r.StartedEnv, want)
		}
		if r.GODEBUG == nil || *r.GODEBUG != user {
			t.Errorf("GODEBUG after Apply = %v, want %q", r.GODEBUG, user)
		}
		if want := []string{"GODEBUG=" + user}; !slices.Equal(r.ChildEnv, want) {
			t.Errorf("a child's environment has %q, want %q", r.ChildEnv, want)
		}
	})
	t.Run("schedtrace=0 turns it off", func(t *testing.T) {
		off := "schedtrace=0"
		r := runHelper(t, &off)
		if r.StartedEnv != off || r.GODEBUG == nil || *r.GODEBUG != off {
			t.Errorf("started with %q, GODEBUG %v: want %q untouched, no re-execution", r.StartedEnv, r.GODEBUG, off)
		}
	})
}
