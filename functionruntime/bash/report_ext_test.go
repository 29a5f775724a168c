package bash_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
)

// reportSh has one function whose cases end in each way a status can get
// out of an invocation's subshell: reported by the subshell when the
// function returns, or by the worker loop when it exits, execs or set an
// EXIT trap.
const reportSh = `
run() {
	case $1 in
	pid) printf '%s' "$$" ;;
	plain)
		echo "log plain" >&2
		printf 'plain'
		;;
	own_trap)
		trap 'echo "cleanup ran" >&2; printf " cleaned"' EXIT
		echo "log own_trap" >&2
		printf 'own'
		;;
	own_trap_fail)
		trap 'echo "cleanup before failing" >&2' EXIT
		echo "giving up" >&2
		exit 3
		;;
	exec) exec printf 'from exec' ;;
	exec_fail)
		echo "log exec_fail" >&2
		exec false
		;;
	xtrace)
		set -x
		printf 'traced'
		;;
	terminal)
		echo "no such order" >&2
		exit 100
		;;
	traps) trap -p ;;
	esac
}
`

// Rule (package doc, Wire protocol): each invocation's status reaches Go
// exactly once, whichever way its subshell ends, and every log line lands
// on the invocation that wrote it. The cases are interleaved so a status
// read for the wrong invocation, or a marker counted twice, shows up as a
// wrong output or a line logged under the wrong invocation ID.
func TestEveryWayOutReportsOnce(t *testing.T) {
	f := conformance.NewFixture(t, "report.run", map[string]string{"report.sh": reportSh})
	w := f.Start(t)
	pid := string(f.MustInvoke(t, w, "pid").Output)

	steps := []struct {
		input   string
		output  string // when it succeeds
		status  int    // exit status when it fails
		logLine string // a stderr line that must be logged on this invocation
	}{
		{input: "plain", output: "plain", logLine: "log plain"},
		{input: "own_trap", output: "own cleaned", logLine: "cleanup ran"},
		{input: "plain", output: "plain", logLine: "log plain"},
		{input: "exec", output: "from exec"},
		{input: "own_trap_fail", status: 3, logLine: "cleanup before failing"},
		{input: "plain", output: "plain", logLine: "log plain"},
		{input: "exec_fail", status: 1, logLine: "log exec_fail"},
		{input: "terminal", status: bash.TerminalExitStatus, logLine: "no such order"},
		{input: "xtrace", output: "traced"},
		{input: "exec", output: "from exec"},
		{input: "exec", output: "from exec"},
		{input: "plain", output: "plain", logLine: "log plain"},
	}
	for i, st := range steps {
		id := fmt.Sprintf("inv-%d-%s", i, st.input)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := w.Invoke(ctx, f.Invocation(id, []byte(st.input)))
		cancel()
		if st.status == 0 {
			if err != nil || string(res.Output) != st.output {
				t.Fatalf("step %d (%s): Invoke = %q, %v; want %q", i, st.input, res.Output, err, st.output)
			}
		} else {
			var he *functionruntime.HandlerError
			if !errors.As(err, &he) || he.ExitCode != st.status || he.Terminal != (st.status == bash.TerminalExitStatus) {
				t.Fatalf("step %d (%s): error = %v, want a HandlerError with exit status %d", i, st.input, err, st.status)
			}
		}
		if st.logLine == "" {
			continue
		}
		found := false
		for _, r := range f.Logs.Records(st.logLine) {
			if r["message"] == st.logLine && r["invocation_id"] == id {
				found = true
			}
		}
		if !found {
			t.Fatalf("step %d (%s): no %q record on invocation %s; messages: %q", i, st.input, st.logLine, id, f.Logs.Messages())
		}
	}
	// The worker sets no trap in the invocation's subshell: with one, bash
	// would catch SIGTERM and the like and run it in the middle of a
	// builtin, flushing half-written output, instead of dying at once.
	// Signals ignored when the test started (nohup ignores SIGHUP) stay
	// ignored in every child and show as `trap -- '' SIG`: those are
	// inherited, not set by the worker, so a plain bash is the baseline.
	inherited, err := exec.Command("bash", "--noprofile", "--norc", "-c", "trap -p").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(f.MustInvoke(t, w, "traps").Output), strings.TrimRight(string(inherited), "\n"); got != want {
		t.Fatalf("traps set in the invocation's subshell: %q, want only the inherited %q", got, want)
	}
	// The status the loop had to report (own trap, exec) did not desync
	// the protocol into a restart: the same worker served every step.
	if got := string(f.MustInvoke(t, w, "pid").Output); got != pid {
		t.Fatalf("worker pid %s after the steps, want the first worker %s", got, pid)
	}
	for _, m := range f.Logs.Messages() {
		if strings.Contains(m, "__fnb") || strings.Contains(m, "fnbridge-log-sync") {
			t.Fatalf("the worker's own reporting leaked into the logs: %q", m)
		}
	}
}

// Rule (package doc, Outputs): FNBRIDGE_OUTPUTS names the invocation's
// outputs file wherever the function goes. With a relative TMPDIR the
// worker's scratch paths must still be absolute, or a function that
// changes directory writes its outputs (and the worker its report)
// somewhere else.
func TestOutputsFileSurvivesCdWithRelativeTMPDIR(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	if err := os.Mkdir("scratch", 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", "scratch")
	f := conformance.NewFixture(t, "away.run", map[string]string{"away.sh": `
run() {
	cd /
	echo "where=$PWD" >>"$FNBRIDGE_OUTPUTS"
	printf 'moved'
}
`})
	w := f.Start(t)
	for i := range 2 {
		res := f.MustInvoke(t, w, "x")
		if string(res.Output) != "moved" || res.Outputs["where"] != "/" {
			t.Fatalf("call %d: output %q, outputs %v; want \"moved\" and where=/", i, res.Output, res.Outputs)
		}
	}
}

// `fnbridge fail [--code N] MESSAGE` in the function's own shell ends the
// invocation with a terminal failure carrying N (default 500) and MESSAGE,
// as a Python TerminalError(message, code) does; the message is logged
// too. A code out of range fails with 500 and says so. The worker serves
// the next invocation as before, and a plain exit 100 keeps its message
// from stderr. In a subshell of the function's shell ($(...), a pipeline's
// part) it ends that subshell with 100 at once: a die-style helper
// called as r=$(check) || exit fails the invocation with its code, and
// never lets the helper go on to print a result.
func TestFailWithACode(t *testing.T) {
	f := conformance.NewFixture(t, "fail.run", map[string]string{"fail.sh": `
check() {
	[[ $1 == ok* ]] || fnbridge fail --code 400 "bad input: $1"
	echo "validated"
}
run() {
	local r
	case $1 in
	sub) r=$(check "$1") || exit; printf '%s' "$r" ;;
	subx) set -x; r=$(check "$1") || exit; printf '%s' "$r" ;;
	plusline) echo "+ 3 rows rejected" >&2; exit 100 ;;
	plusassign) echo "+ rows=3 rejected" >&2; exit 100 ;;
	plussub) r=$(fnbridge fail --code 422 "+ 1 invalid row") || exit ;;
	pipe) set -o pipefail; check "$1" | cat || exit; echo "not reached" >&2 ;;
	subok) r=$(check "$1") || echo "handled" >&2; exit 100 ;;
	subthen) r=$(check "$1") || true; echo "card declined" >&2; exit 100 ;;
	subfine) r=$(check "$1") || true; printf fine ;;
	records) shopt -s nullglob; r=("$__fnb_dir"/[fg].*); printf '%d' "${#r[@]}" ;;
	gone) fnbridge fail --code 410 "order" "C-3 is gone"; echo "not reached" >&2 ;;
	plain) fnbridge fail "no reason given" ;;
	bare) fnbridge fail ;;
	bad) fnbridge fail --code=70000 "too big a code" ;;
	exit) echo "refused by exit" >&2; exit 100 ;;
	long) fnbridge fail --code 409 "$(printf '%070000d' 0)" ;;
	nostderr) set -e; exec 2>&-; fnbridge fail --code 422 "no stderr to say it" ;;
	ok) printf 'fine' ;;
	esac
}
`})
	w := f.Start(t)
	for _, c := range []struct {
		input, message string
		code           int
	}{
		{"gone", "order C-3 is gone", 410},
		{"plain", "no reason given", 500},
		{"bare", "the function failed (fnbridge fail was given no message)", 500},
		{"bad", "too big a code", 500},
		{"exit", "refused by exit", 0},
		{"nostderr", "no stderr to say it", 422},
		{"sub", "bad input: sub", 400},
		// Under set -x the trace of the assignment (+ r=) and of exit
		// follow the subshell's message: still its failure, code and all.
		{"subx", "bad input: subx", 400},
		// A message of the function's that starts like a trace.
		{"plusline", "+ 3 rows rejected", 0},
		{"plusassign", "+ rows=3 rejected", 0},
		{"plussub", "+ 1 invalid row", 422},
		{"pipe", "bad input: pipe", 400},
		// Handled, then a bare exit 100 of the function's own: its own
		// last line, not the handled subshell's failure.
		{"subok", "handled", 0},
		{"subthen", "card declined", 0},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := w.Invoke(ctx, f.Invocation("inv-"+c.input, []byte(c.input)))
		cancel()
		var he *functionruntime.HandlerError
		if !errors.As(err, &he) || !he.Terminal || he.Code != c.code || he.Message != c.message {
			t.Fatalf("%s: error = %#v, want a terminal failure %d %q", c.input, err, c.code, c.message)
		}
	}
	// A message over the record's bound keeps its code and its start.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := w.Invoke(ctx, f.Invocation("inv-long", []byte("long")))
	cancel()
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || !he.Terminal || he.Code != 409 || !strings.HasPrefix(he.Message, "0000") {
		t.Fatalf("long: error = %.200v, want a terminal failure 409 with the message's start", err)
	}
	if len(f.Logs.Records("not reached")) != 0 {
		t.Error("code after fnbridge fail ran")
	}
	if len(f.Logs.Records("order C-3 is gone")) == 0 {
		t.Error("the failure's message was not logged")
	}
	if len(f.Logs.Records("fnbridge: fail --code 70000: want a code from 1 to 65535; failing with 500")) == 0 {
		t.Error("the out-of-range code was not reported")
	}
	if res := f.MustInvoke(t, w, "ok"); string(res.Output) != "fine" {
		t.Errorf("after the failures: %q, want fine", res.Output)
	}
	// A subshell's failure the function handled, then success: its
	// record goes with the invocation.
	if res := f.MustInvoke(t, w, "subfine"); string(res.Output) != "fine" {
		t.Errorf("subfine: %q, want fine", res.Output)
	}
	if res := f.MustInvoke(t, w, "records"); string(res.Output) != "0" {
		t.Errorf("%s fnbridge fail records left in the scratch directory, want none", res.Output)
	}
}

// Rule (README, Between invocations of one handler): a process an
// earlier invocation left running never changes a later invocation's
// result. Its stderr shares the worker's log stream, so the line a later
// invocation's exit 100 would take as its message may be the leftover's:
// that message is then withheld, rather than given to another caller,
// and said to be. A leftover of the failing invocation's own does not
// withhold it.
func TestLeftoverStderrIsNoLaterFailureMessage(t *testing.T) {
	f := conformance.NewFixture(t, "left.run", map[string]string{"left.sh": `
run() {
	case $1 in
	# returns 20 ms after its job started: a clock tick (10 ms) or more
	# before the next request, as the check counts
	leave) ( while :; do echo "secret of caller A" >&2; sleep 0.02; done ) & sleep 0.02 ;;
	own) sleep 30 </dev/null >/dev/null 2>&1 & echo "B: card declined" >&2; exit 100 ;;
	fail) echo "B: card declined" >&2; sleep 0.1; exit 100 ;;
	esac
}
`})
	w := f.Start(t)
	var he *functionruntime.HandlerError
	if _, err := f.Invoke(t, w, "own"); !errors.As(err, &he) || !he.Terminal || he.Message != "B: card declined" {
		t.Fatalf("own: %v, want the terminal failure with its own last line", err)
	}
	f.MustInvoke(t, w, "leave")
	_, err := f.Invoke(t, w, "fail")
	if !errors.As(err, &he) || !he.Terminal {
		t.Fatalf("fail: %v, want a terminal failure", err)
	}
	if strings.Contains(he.Message, "secret of caller A") {
		t.Fatalf("a later invocation failed with the message %q, an earlier one's leftover's line", he.Message)
	}
	if !strings.Contains(he.Message, "exit status 100") || !strings.Contains(he.Message, "left running") {
		t.Errorf("message %q, want exit status 100 and why the line is not used", he.Message)
	}
}
