package bash_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
)

// lateSh starts, in invocation 1 ("arm_*"), a background job that outlives
// it and, once invocation 2 ("victim") runs, attacks it with everything it
// can reach: the worker loop's descriptors, the paths its own invocation
// used, and the worker's variables it inherited. The victim waits (bounded)
// until the attack is done, so the attack always lands inside it.
const lateSh = `
await() { local i; for ((i = 0; i < 1000; i++)); do [[ -e $PWD/$1 ]] && return 0; sleep 0.01; done; return 1; }

arm_status() {
	local loop=$$ out=${__fnb_out-} seq=${__fnb_seq-0} tok=${__fnb_tok-}
	(
		await victim-running
		for fd in 1 $out; do
			for line in "R 0" "D 0" "R $((seq + 1)) $tok 0" "D $((seq + 1)) $tok 0" "R $seq $tok 0"; do
				printf '%s\n' "$line" >"/proc/$loop/fd/$fd"
			done
		done
		: >"$PWD/forged"
	) </dev/null >/dev/null 2>&1 &
	printf armed
}

arm_request() {
	local loop=$$ in=${__fnb_in-} tok=${__fnb_tok-}
	(
		await victim-running
		printf '8\ninjected' >"/proc/$loop/fd/$in"
		printf '%s%012dinjected' "$tok" 8 >"/proc/$loop/fd/$in"
		: >"$PWD/forged"
	) </dev/null >/dev/null 2>&1 &
	printf armed
}

arm_files() {
	local me=$BASHPID out outputs=$FNBRIDGE_OUTPUTS
	out=$(readlink "/proc/$me/fd/1")
	(
		await victim-running
		printf 'FORGED' >>"$out"
		printf 'FORGED' >>"${outputs%/*}/stdout"
		echo "stolen=1" >>"$outputs"
		echo "stolen=1" >>"$FNBRIDGE_OUTPUTS"
		: >"$PWD/forged"
	) </dev/null >/dev/null 2>&1 &
	printf armed
}

victim() {
	printf 'mine'
	echo "mine=2" >>"$FNBRIDGE_OUTPUTS"
	: >"$PWD/victim-running"
	await forged || { echo "the late job never attacked" >&2; exit 4; }
	case $1 in
	fail) echo "victim failed on purpose" >&2; exit 3 ;;
	*) printf '%s' "$1" ;;
	esac
}

plain() { printf 'plain %s' "$1"; }
`

// startLate starts lateSh's dispatcher: the function named by the input's
// first word is called with the rest.
func startLate(t *testing.T) (*adaptertest.Fixture, functionruntime.Worker) {
	f := conformance.NewFixture(t, "late.run", map[string]string{"late.sh": lateSh + `
run() { local fn=${1%% *} arg=; [[ $1 == *" "* ]] && arg=${1#* }; "$fn" "$arg"; }
`})
	return f, f.Start(t)
}

// Rule (package doc, Wire protocol): a status line the worker did not
// write for the invocation in flight never becomes its result. A job left
// behind by invocation 1 writes forged "R"/"D" lines (old and new formats,
// with every sequence number and token it can see) to the loop's response
// descriptors while invocation 2 runs: invocation 2 must fail retryably or
// report its own status, and invocation 3 must get its own result.
func TestForgedStatusNeverAnswersAnotherInvocation(t *testing.T) {
	f, w := startLate(t)
	f.MustInvoke(t, w, "arm_status")
	res, err := f.Invoke(t, w, "victim fail")
	var he *functionruntime.HandlerError
	switch {
	case err == nil:
		t.Fatalf("invocation 2 succeeded with %q: a forged status line answered it", res.Output)
	case errors.As(err, &he) && (he.ExitCode != 3 || he.Terminal):
		t.Fatalf("invocation 2 failed with %+v, not its own status 3: a forged status line answered it", *he)
	case he == nil && !errors.Is(err, functionruntime.ErrWorkerCrashed):
		t.Fatalf("invocation 2: error = %v, want its own status 3 or a retryable worker failure", err)
	}
	if got := string(f.MustInvoke(t, w, "plain 3").Output); got != "plain 3" {
		t.Fatalf("invocation 3 returned %q, want its own output %q", got, "plain 3")
	}
}

// Rule (package doc, Wire protocol): bytes a left-behind job writes into the
// worker's request pipe are never run as a request: the invocation in flight
// gets its own payload's result or fails retryably.
func TestInjectedRequestIsNeverRun(t *testing.T) {
	f, w := startLate(t)
	f.MustInvoke(t, w, "arm_request")
	// The victim returns once the injection is done; the next request is
	// the one the injected bytes would have been read as.
	if got := string(f.MustInvoke(t, w, "victim ok").Output); got != "mineok" {
		t.Fatalf("invocation 2 returned %q", got)
	}
	res, err := f.Invoke(t, w, "plain 3")
	if err == nil && string(res.Output) != "plain 3" {
		t.Fatalf("invocation 3 returned %q, not its own output: the injected request ran in its place", res.Output)
	}
	if err != nil && !errors.Is(err, functionruntime.ErrWorkerCrashed) {
		t.Fatalf("invocation 3: error = %v, want its own result or a retryable worker failure", err)
	}
	if got := string(f.MustInvoke(t, w, "plain 4").Output); got != "plain 4" {
		t.Fatalf("invocation 4 returned %q", got)
	}
}

// Rule (package doc, Output and Outputs): stdout and FNBRIDGE_OUTPUTS are
// files of their own invocation. A job left behind by invocation 1 that
// writes, while invocation 2 runs, to the paths invocation 1 had (its
// stdout, its FNBRIDGE_OUTPUTS, the scratch directory's stdout) changes
// nothing of invocation 2's output or outputs.
func TestLateWriterCannotReachLaterInvocationFiles(t *testing.T) {
	f, w := startLate(t)
	f.MustInvoke(t, w, "arm_files")
	res := f.MustInvoke(t, w, "victim ok")
	if string(res.Output) != "mineok" {
		t.Fatalf("invocation 2's output = %q, want %q: a late writer reached it", res.Output, "mineok")
	}
	if len(res.Outputs) != 1 || res.Outputs["mine"] != "2" {
		t.Fatalf("invocation 2's outputs = %v, want only mine=2: a late writer reached them", res.Outputs)
	}
}

// Rule (package doc, Handler): special builtins and reserved words are
// refused as function names, naming the handler; bash in POSIX mode runs
// a special builtin before a function of the same name, so "eval" would
// run the payload as shell code.
func TestSpecialBuiltinNamesRefused(t *testing.T) {
	names := []string{
		"eval", "source", "exec", "exit", "builtin", "command", "trap", "set", "unset", "export", "readonly",
		"return", "shift", "times", "break", "continue", "declare", "typeset", "local", "let", "alias", "enable",
		"if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do", "done", "function",
		"select", "time", "coproc", "in",
		// The worker's own, defined in every invocation's shell after the
		// file: a handler fnbridge would let the payload pick a context
		// command (fnbridge fail, ...).
		"fnbridge", "__fnb_run",
	}
	for _, n := range names {
		err := bash.ValidateHandler("h." + n)
		if err == nil || !strings.Contains(err.Error(), `bash handler "h.`+n+`"`) || !strings.Contains(err.Error(), `function "`+n+`"`) {
			t.Errorf("ValidateHandler(%q) = %v, want an error naming the handler and the function", "h."+n, err)
		}
	}
	for _, ok := range []string{"evaluate", "exec_job", "my_set", "iffy"} {
		if err := bash.ValidateHandler("h." + ok); err != nil {
			t.Errorf("ValidateHandler(h.%s) = %v", ok, err)
		}
	}

	f := conformance.NewFixture(t, "p.eval", map[string]string{"p.sh": `
eval() { printf 'function %s' "$1"; }
set -o posix
`})
	err := f.StartErr(t)
	if !strings.Contains(err.Error(), `function "eval"`) {
		t.Fatalf("Start error = %v, want the refused function named", err)
	}
	if _, statErr := os.Stat(filepath.Join(f.Dir, "pwned")); statErr == nil {
		t.Fatal("the payload was evaluated")
	}
}

// Rule (package doc, Handler): `set -o posix` in the file applies to the
// sourcing only; invocations run with POSIX mode off, whatever else the
// file set.
func TestPosixModeNotCarriedIntoInvocations(t *testing.T) {
	f := conformance.NewFixture(t, "px.run", map[string]string{"px.sh": `
set -o posix
set -u
run() { [[ -o posix ]] && printf 'posix on' || printf 'posix off'; [[ -o nounset ]] && printf ', nounset on'; }
`})
	w := f.Start(t)
	if got := string(f.MustInvoke(t, w, "x").Output); got != "posix off, nounset on" {
		t.Fatalf("invocation ran with %q, want posix off and the file's other options kept", got)
	}
}

// Rule (package doc, Invocation): a payload over the kernel's single
// argument limit (128 KiB) reaches the function intact as $1, and the same
// bytes are in the file FNBRIDGE_INPUT_FILE names, which children can read.
func TestPayloadFile(t *testing.T) {
	f := conformance.NewFixture(t, "in.run", map[string]string{"in.sh": `
run() {
	[[ -f $FNBRIDGE_INPUT_FILE ]] || { echo "FNBRIDGE_INPUT_FILE=${FNBRIDGE_INPUT_FILE-unset} is no file" >&2; exit 1; }
	printf '%s' "$1" | cmp -s - "$FNBRIDGE_INPUT_FILE" || { echo "\$1 and the input file differ" >&2; exit 1; }
	cat "$FNBRIDGE_INPUT_FILE"
}
`})
	w := f.Start(t)
	big := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range big {
		big[i] = byte(1 + r.IntN(255))
	}
	for _, p := range [][]byte{big, []byte("\xff\xfe\x80 not UTF-8"), []byte("small"), {}} {
		res, err := w.Invoke(t.Context(), f.Invocation("in", p))
		if err != nil {
			t.Fatalf("%d-byte payload: %v", len(p), err)
		}
		if !bytes.Equal(res.Output, p) {
			t.Fatalf("%d-byte payload: the input file held %d different bytes", len(p), len(res.Output))
		}
	}
}

// A handler written as a path, or with the .sh that file.function implies,
// is refused with an error that says so, not one about an empty file name
// (a path was cut at its first '.').
func TestHandlerPathsAreExplained(t *testing.T) {
	for h, want := range map[string]string{
		"../py/handler.handle": "is a path: name the file without its directory",
		"/srv/fn/h.main":       "is a path",
		"lib/h.main":           "is a path",
		"handler.sh.main":      `the .sh is implied, write "handler.main"`,
	} {
		if err := bash.ValidateHandler(h); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `bash handler "`+h+`"`) {
			t.Errorf("ValidateHandler(%q) = %v, want %q", h, err, want)
		}
	}
}
