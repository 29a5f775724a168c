package bash_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
)

// modes runs test once for each way a worker runs its invocations: each
// in a subshell of its own (the default), and inline, in the worker's own
// shell (bash.subshell: false).
func modes(t *testing.T, test func(t *testing.T, a *adaptertest.Adapter)) {
	for _, a := range []*adaptertest.Adapter{conformance, conformanceInline} {
		name := "subshell"
		if a.Inline {
			name = "inline"
		}
		t.Run(name, func(t *testing.T) { test(t, a) })
	}
}

// inlineSh is the test file of the inline invocations' own rules: run
// dispatches on the payload's first word, the rest its argument.
const inlineSh = `
n=0
run() {
	local arg=${1#* }
	case ${1%% *} in
	pid) printf '%s' "$$" ;;
	count) n=$((n + 1)); printf '%s' "$n" ;;
	settings)
		printf '%s|%s|%s|%s|%s|%s' "$-" "$(shopt -o pipefail | cut -f2)" "$(trap -p ERR)" "$PWD" "${FNBRIDGE_KEY-unset}" "${TRACEPARENT-unset}"
		set -u -o pipefail
		trap 'echo err' ERR
		cd /
		export FNBRIDGE_KEY=mine TRACEPARENT=mine
		set -m -k
		exec </dev/zero
		;;
	stdin) IFS= read -r -t 1 x; printf '[%s]' "$x" ;;
	echo) printf '%s' "$arg" ;;
	lc_all) export LC_ALL=C.UTF-8; printf ok ;;
	ifs) IFS=$'0123456789. \t\n'; printf ok ;;
	ro) readonly "$arg"; printf ok ;;
	usr1) trap 'echo "caught usr1"' USR1; printf ok ;;
	late) exec sh -c 'sleep 6; printf done' ;;
	strict_trap) set -e; trap 'false; echo after-false' EXIT; echo body ;;
	trap_e) set -e; trap 'echo bye' EXIT; echo body ;;
	open) exec {dyn}>opened 7>seven; printf ok ;;
	use) printf 'a' >&"$dyn" && printf 'b' >&7 && printf ok ;;
	close_all) for ((i = 3; i < 64; i++)); do eval "exec $i>&-"; done; printf done ;;
	unset_env) unset FNBRIDGE_OUTPUTS FNBRIDGE_INPUT_FILE; declare -u TRACESTATE; printf ok ;;
	child_env) sh -c 'printf "%s|%s" "${FNBRIDGE_INPUT_FILE:+input}" "${FNBRIDGE_OUTPUTS:+outputs}"' ;;
	unfnbridge) unset -f fnbridge; printf ok ;;
	reason) echo "the real reason" >&2; exit 3 ;;
	sub_fail) r=$(fnbridge fail --code 409 "order exists") || exit ;;
	quit) echo "leaving"; exit "$arg" ;;
	trapped) trap 'echo "trap ran"' EXIT; echo "returned" ;;
	replaced) exec printf 'exec %s' "$arg" ;;
	failing) fnbridge fail --code 409 "order $arg exists" ;;
	strict) set -e; false; echo "not reached" ;;
	mute) echo "muted line" >&2; exec 2>/dev/null ;;
	loud) echo "loud line" >&2; printf ok ;;
	job) sleep 60 & printf '%s' "$!" ;;
	jobs) printf '%s' "$(jobs -p | wc -l)"; wait; printf ' waited' ;;
	esac
}
`

// inline returns the fixture and a started worker of inlineSh, whose
// invocations run inline, with TRACEPARENT in its registration's env.
func inline(t *testing.T) (*adaptertest.Fixture, functionruntime.Worker) {
	t.Helper()
	return inlineWith(t, "")
}

// inlineWith is inline with prelude at the top of the file.
func inlineWith(t *testing.T, prelude string) (*adaptertest.Fixture, functionruntime.Worker) {
	t.Helper()
	f := conformanceInline.NewFixture(t, "in.run", map[string]string{"in.sh": prelude + inlineSh})
	f.Spec.Env = map[string]string{"TRACEPARENT": "registered"}
	return f, f.Start(t)
}

// pidOf is the worker shell's pid.
func pidOf(t *testing.T, f *adaptertest.Fixture, w functionruntime.Worker) string {
	t.Helper()
	return string(f.MustInvoke(t, w, "pid").Output)
}

// Rule (package doc, Inline invocations): what an invocation leaves in
// the shell, a global variable above all, the next one sees, on the same
// worker process: no process per invocation.
func TestInlineInvocationsShareTheShell(t *testing.T) {
	f, w := inline(t)
	pid := pidOf(t, f, w)
	for i := 1; i <= 3; i++ {
		if got := string(f.MustInvoke(t, w, "count").Output); got != strconv.Itoa(i) {
			t.Fatalf("call %d counted %q: the global did not carry over", i, got)
		}
	}
	if got := pidOf(t, f, w); got != pid {
		t.Fatalf("worker %s replaced by %s", pid, got)
	}
}

// Rule: what the loop needs, and the invocation's own context, are put
// back after each invocation: set options, the ERR trap, the working
// directory, the per-invocation environment and the registration's trace
// context.
func TestInlineSettingsArePutBack(t *testing.T) {
	f, w := inline(t)
	first := string(f.MustInvoke(t, w, "settings").Output)
	if want := "|off||" + f.Dir + "|unset|registered"; !strings.HasSuffix(first, want) || strings.Contains(first[:strings.IndexByte(first, '|')], "m") {
		t.Fatalf("first call saw %q, want it to end %q", first, want)
	}
	inv := f.Invocation("inv-env", []byte("settings"))
	inv.Env = map[string]string{functionruntime.EnvKey: "k1", functionruntime.EnvTraceparent: "caller's"}
	res, err := w.Invoke(t.Context(), inv)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Output), strings.TrimSuffix(first, "|unset|registered")+"|k1|caller's"; got != want {
		t.Fatalf("call with its own environment saw %q, want %q", got, want)
	}
	if got := string(f.MustInvoke(t, w, "settings").Output); got != first {
		t.Fatalf("third call saw %q, want %q as the first did", got, first)
	}
	if got := string(f.MustInvoke(t, w, "stdin").Output); got != "[]" {
		t.Fatalf("stdin after an invocation's exec <: %q, want the worker's /dev/null", got)
	}
	// LC_ALL the function exports must not make the loop count the next
	// payload in characters.
	f.MustInvoke(t, w, "lc_all")
	for _, p := range []string{"echo héé", "echo ü€ x"} {
		if got := string(f.MustInvoke(t, w, p).Output); got != strings.TrimPrefix(p, "echo ") {
			t.Fatalf("payload %q came back as %q", p, got)
		}
	}
}

// What an invocation opens with exec stays open for the next ones (the
// loop's own descriptors do not take its numbers), the variables the
// worker gives each invocation are exported to its children whatever an
// earlier one did to them, and fnbridge is the worker's in each.
func TestInlineDescriptorsEnvAndFnbridgeOfEarlierInvocations(t *testing.T) {
	f, w := inlineWith(t, "set -euo pipefail\ntrap 'echo worker-exit >&2' EXIT\n")
	pid := pidOf(t, f, w)
	f.MustInvoke(t, w, "open")
	for i := range 2 {
		if got := string(f.MustInvoke(t, w, "use").Output); got != "ok" {
			t.Fatalf("use %d: %q", i, got)
		}
	}
	f.MustInvoke(t, w, "unset_env")
	if got := string(f.MustInvoke(t, w, "child_env").Output); got != "input|outputs" {
		t.Fatalf("a child of the next invocation sees %q, want both files' variables", got)
	}
	f.MustInvoke(t, w, "unfnbridge")
	_, err := f.Invoke(t, w, "failing A-2")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.Type != "fnbridge.fail" || he.Code != 409 {
		t.Fatalf("fnbridge fail after an invocation unset it: %v, want the code 409 failure", err)
	}
	// A set -e file with an EXIT trap of its own serves on one worker.
	if got := pidOf(t, f, w); got == pid {
		t.Fatalf("fnbridge fail did not end worker %s", pid)
	} else {
		pid = got
	}
	f.MustInvoke(t, w, "count")
	if got := pidOf(t, f, w); got != pid {
		t.Fatalf("worker %s replaced by %s", pid, got)
	}
}

// A variable the loop assigns that the function made readonly would end
// the shell at the next request, whose invocation never ran: the worker
// ends right after the invocation that did it, whose outcome stands, and
// the next invocation is served by a fresh worker.
func TestInlineReadonlyEndsTheWorkerAfterItsInvocation(t *testing.T) {
	for _, v := range []string{"FNBRIDGE_OUTPUTS", "FNBRIDGE_INPUT_FILE", "LC_CTYPE", "LC_ALL", "TMOUT", "TRACEPARENT"} {
		t.Run(v, func(t *testing.T) {
			f, w := inline(t)
			pid := pidOf(t, f, w)
			for i := range 3 {
				if got := string(f.MustInvoke(t, w, "ro "+v).Output); got != "ok" {
					t.Fatalf("call %d: output %q, want ok", i, got)
				}
				next := pidOf(t, f, w)
				if next == pid {
					t.Fatalf("call %d: worker %s serves on with %s readonly", i, pid, v)
				}
				pid = next
			}
		})
	}
}

// A global IFS the function leaves holding digits, a dot and blanks
// changes nothing in how the loop reads the next requests (their
// lengths, sequence numbers and payloads are digits) or answers them.
func TestInlineIFSOfAnEarlierInvocation(t *testing.T) {
	f, w := inline(t)
	pid := pidOf(t, f, w)
	f.MustInvoke(t, w, "ifs")
	for i, p := range []string{"echo 10.5 x", "count", "echo 1 2 3"} {
		want := strings.TrimPrefix(p, "echo ")
		if p == "count" {
			want = "1"
		}
		if got := string(f.MustInvoke(t, w, p).Output); got != want {
			t.Fatalf("request %d (%q) after IFS=digits answered %q, want %q", i, p, got, want)
		}
	}
	if got := pidOf(t, f, w); got != pid {
		t.Fatalf("worker %s replaced by %s", pid, got)
	}
}

// A signal trap the function left, firing while the worker waits for its
// next request, prints to the log, not into the response pipe.
func TestInlineIdleSignalTrapStaysOffThePipe(t *testing.T) {
	f, w := inline(t)
	f.MustInvoke(t, w, "usr1")
	pid, err := strconv.Atoi(pidOf(t, f, w))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	// The trap runs while the worker waits, or as its wait for the next
	// request ends: either way before that request is answered.
	if got := pidOf(t, f, w); got != strconv.Itoa(pid) {
		t.Fatalf("worker %d replaced by %s", pid, got)
	}
	proctest.Eventually(t, 5*time.Second, "the trap's line logged", func() bool {
		return slices.Contains(f.Logs.Messages(), "caught usr1")
	})
}

// An exec'd program's exit status and output are the invocation's, however
// long it runs (it closes the response pipe at once): it is no crash.
func TestInlineExecOfALongProgram(t *testing.T) {
	t.Parallel()
	f, w := inline(t)
	if got := string(f.MustInvoke(t, w, "late").Output); got != "done" {
		t.Fatalf("output %q, want done", got)
	}
}

// An EXIT trap the function sets runs with the options it left, as its
// subshell's would; one the file set is the worker's, and ends no
// invocation.
func TestInlineExitTraps(t *testing.T) {
	f, w := inline(t)
	_, err := f.Invoke(t, w, "strict_trap")
	var he *functionruntime.HandlerError
	if !errors.As(err, &he) || he.ExitCode != 1 {
		t.Fatalf("err = %v, want exit status 1: false under set -e in the trap", err)
	}
	f, w = inlineWith(t, "trap 'echo worker-exit >&2' EXIT\n")
	// Nor does it run when an invocation's exit ends the worker, as in a
	// subshell: its lines would be taken for the invocation's.
	_, err = f.Invoke(t, w, "reason")
	if !errors.As(err, &he) || he.Message != "exit status 3: the real reason" {
		t.Fatalf("err = %v, want exit status 3 with the function's last line", err)
	}
	_, err = f.Invoke(t, w, "sub_fail")
	if !errors.As(err, &he) || he.Type != "fnbridge.fail" || he.Code != 409 || he.Message != "order exists" {
		t.Fatalf("err = %#v, want the subshell's fnbridge fail, code 409", err)
	}
	pid := pidOf(t, f, w)
	if got := string(f.MustInvoke(t, w, "count").Output); got != "1" {
		t.Fatalf("count: %q", got)
	}
	if got := pidOf(t, f, w); got != pid {
		t.Fatalf("worker %s replaced by %s: the file's EXIT trap ended an invocation", pid, got)
	}
}

// Rule: whatever would have ended an invocation's subshell ends an inline
// invocation's worker instead, with the outcome the subshell would have
// given: exit (its status and output), an EXIT trap (its output after the
// function's), exec, fnbridge fail, a set -e failure. The next invocation
// gets a fresh worker, which serves.
func TestInlineExitEndsTheWorker(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		fail    *functionruntime.HandlerError
	}{
		{in: "quit 0", out: "leaving"},
		{in: "quit 3", fail: &functionruntime.HandlerError{Type: "exit", ExitCode: 3, Message: "exit status 3"}},
		{in: "trapped", out: "returned\ntrap ran"},
		{in: "replaced x", out: "exec x"},
		{in: "failing A-1", fail: &functionruntime.HandlerError{Terminal: true, Type: "fnbridge.fail", Code: 409, ExitCode: 100, Message: "order A-1 exists"}},
		{in: "strict", fail: &functionruntime.HandlerError{Type: "exit", ExitCode: 1, Message: "exit status 1"}},
		{in: "trap_e", out: "body\nbye"},
		{in: "close_all", out: "done"}, // the loop's descriptors cannot be put back
	} {
		t.Run(tc.in, func(t *testing.T) {
			f, w := inline(t)
			pid := pidOf(t, f, w)
			for i := range 2 { // the second on a fresh worker: a trap runs once
				res, err := f.Invoke(t, w, tc.in)
				var he *functionruntime.HandlerError
				switch {
				case tc.fail == nil && (err != nil || string(res.Output) != tc.out):
					t.Fatalf("call %d: output %q, %v; want %q", i, res.Output, err, tc.out)
				case tc.fail != nil && (!errors.As(err, &he) || *he != *tc.fail):
					t.Fatalf("call %d: error %#v, want %#v", i, err, tc.fail)
				}
				next := pidOf(t, f, w)
				if next == pid {
					t.Fatalf("call %d: worker %s still serves: the invocation's end did not end it", i, pid)
				}
				pid = next
			}
		})
	}
}

// Rule: the function's stderr is given back after it (an exec 2>/dev/null
// silences only that invocation), and background jobs it left are no
// jobs of the next one: a bare wait there does not wait for them.
func TestInlineStderrAndJobsArePutBack(t *testing.T) {
	f, w := inline(t)
	pid := pidOf(t, f, w)
	f.MustInvoke(t, w, "mute")
	if got := string(f.MustInvoke(t, w, "loud").Output); got != "ok" {
		t.Fatalf("loud: %q", got)
	}
	if !slices.Contains(f.Logs.Messages(), "loud line") {
		t.Fatalf("the line after a muted invocation was not logged: %q", f.Logs.Messages())
	}
	child, err := strconv.Atoi(string(f.MustInvoke(t, w, "job").Output))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(child, syscall.SIGKILL) }()
	if got := string(f.MustInvoke(t, w, "jobs").Output); got != "0 waited" {
		t.Fatalf("the next invocation sees %q of the last one's jobs, want \"0 waited\"", got)
	}
	if got := pidOf(t, f, w); got != pid {
		t.Fatalf("worker %s replaced by %s", pid, got)
	}
}
