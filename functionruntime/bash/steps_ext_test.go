package bash_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc/steptest"
	"github.com/fnbridge/fnbridge/internal/procstat"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// stepsSh is the test file steps.sh. Each step's command appends its
// number to the file "marker", so a test can tell which commands ran.
const stepsSh = `
provision() {
	local a b c d
	a=$(fnbridge run step1 -- sh -c 'echo 1 >>marker; echo one') || return
	b=$(fnbridge run step2 -- sh -c 'echo 2 >>marker; echo two') || return
	c=$(fnbridge run step3 -- sh -c 'echo 3 >>marker; if [ -e fail-once ]; then rm fail-once; echo flaky >&2; exit 7; fi; echo three') || return
	d=$(fnbridge run step4 -- sh -c 'echo 4 >>marker; echo four') || return
	echo "$a $b $c $d"
}

child() { ./child.sh; }
piped() {
	local n
	n=$(head -c 1000000 /dev/zero | fnbridge run upload -- sh -c 'echo u >>marker; wc -c') || return
	echo "$n"
}

# Steps inside loops whose input is a pipe: in the function's own shell
# (process substitution, a here-string) and in a pipeline's subshell, where
# fnbridge is the command. Each step must leave the loop's input alone.
loops() {
	local out= x
	while read -r x; do fnbridge run "own $x" -- printf '%s' "$x" >/dev/null || exit; out+="$x,"; done < <(printf 'a\nb\nc\n')
	while read -r x; do fnbridge run "here $x" -- printf '%s' "$x" >/dev/null || exit; out+="$x,"; done <<<$'d\ne'
	out+=$(printf 'f\ng\nh\n' | while read -r x; do fnbridge run "piped $x" -- printf '%s' "$x" >/dev/null || exit; printf '%s,' "$x"; done) || exit
	echo "$out"
}

# A background step still running when the function fails: the attempt is
# over, and its step must not run on beside the retry.
bg_fail() {
	fnbridge run upload -- sh -c 'echo "$$" >bg.pid; exec sleep 60' >/dev/null &
	until [ -s bg.pid ]; do sleep 0.01; done
	exit 1
}

# A failure that leaves nothing running keeps its worker ($$ is the
# worker's shell).
fail_plain() {
	fnbridge run --var v a -- printf a || exit
	echo "$$" >>worker.pids
	exit 1
}

terminal() {
	fnbridge run plan -- sh -c 'echo p >>marker; echo "no such plan"; exit 100' || exit
	echo unreachable
}

suspend_ignored() {
	fnbridge sleep 60 || echo "sleep exited $?" >&2
	fnbridge invocation-id || exit
	echo unreachable
}

suspend_errexit() {
	set -e
	fnbridge sleep 60
	echo unreachable
}

suspend_then_block() {
	fnbridge sleep 60 || true
	[ "$1" = block ] && exec sleep 600
	echo next
}

env_of() {
	echo "${FNBRIDGE_CONTEXT-unset} ${FNBRIDGE_CONTEXT_TOKEN-unset} $(sh -c 'echo "${FNBRIDGE_CONTEXT_TOKEN-unset}"')"
}

key_of() {
	printf '%s|%s|%s' "${FNBRIDGE_CONTEXT-unset}" "${FNBRIDGE_KEY-unset}" "$(sh -c 'printf %s "${FNBRIDGE_KEY-unset}"')"
}

which_fnbridge() { type -P fnbridge || echo none; }

function_mode() {
	echo "${FNBRIDGE_CONTEXT-unset}"
	fnbridge invocation-id 2>&1
	echo "status $?"
}

exit75() { exit 75; }

inshell() {
	local v w z
	fnbridge run --var v s1 -- printf '%s\n\n' "$1 \$(touch pwned)" || return
	fnbridge run --var w s2 -- sh -c 'echo 2 >>marker; printf "%s" "$0"' "[$v]" || return
	fnbridge run s3 -- echo "$v" || return
	printf '<%s>' "$w"
	(fnbridge run --var z s4 -- true) 2>&1 || echo "subshell $?"
	z=$(fnbridge run s5 -- printf five) || return
	fnbridge run --var z s6 -- printf 'a\0b' 2>&1 || echo "nul $?"
	printf '%s|' "$z"
	for z in 'not a name' 1x é a-b 'a$b' ''; do
		fnbridge run --var "$z" s7 -- true 2>&1 || echo "badvar $?"
	done
	fnbridge run 2>&1 || echo "usage $?"
	fnbridge run -- true 2>&1 || echo "usage $?"
	fnbridge run '' -- true 2>&1 || echo "usage $?"
	fnbridge run s8 2>&1 || echo "usage $?"
	fnbridge run --retries 3 s8 -- true 2>&1 || echo "usage $?"
	fnbridge run s8 echo hi 2>&1 || echo "usage $?"
	fnbridge run s8 -- 2>&1 || echo "usage $?"
	fnbridge run s8 -- "" 2>&1 || echo "usage $?"
	(fnbridge run s8 -- "") 2>&1 || echo "usage $?"
}

# A umask leaving the owner no read or write: the step agent's FIFOs
# (in the worker's scratch directory, $__fnb_dir) are 0600 all the same.
umask_steps() {
	umask 0277
	fnbridge run --var v u1 -- printf one || return
	printf '%s %s' "$v" "$(stat -c %a "$__fnb_dir/a.req" "$__fnb_dir/a.ans" | tr '\n' ' ')"
}

# A step value holding a NUL is printed by cat, found before the function
# changed PATH.
nul_nopath() {
	local saved=$PATH st
	PATH=/nonexistent
	fnbridge run nul -- printf 'x\0y' >nul.out
	st=$?
	PATH=$saved
	printf 'status %s bytes %s' "$st" "$(wc -c <nul.out)"
}

inshell_fails() {
	local v name=${1% *} status=${1#* }
	set -e
	fnbridge run --var v ok -- printf ok
	fnbridge run --var v "$name" -- sh -c 'echo "$0" >>marker; echo "failed: $0"; exit "$1"' "$name" "$status"
	echo unreachable
}

inshell_help() {
	fnbridge run --help >help.out # in the function's own shell, not a pipeline's
	echo "help $?"
	head -n 1 help.out
}

inshell_noprog() {
	fnbridge run --var v nav -- cd / 2>&1 || echo " $?"
}

inshell_long() {
	fnbridge run "$(printf '%070000d' 0)" -- printf x 2>&1 || echo " $?"
	fnbridge run "$(printf '%017000d' 0)" -- printf x 2>&1 || echo " $?"
}

greet() { echo "hello $1"; }

inshell_fncmd() {
	fnbridge run hi -- greet you 2>&1 || echo "fn $?"
	fnbridge run pv -- printf -v got %s set 2>&1 || echo "printf-v $? [${got-unset}]"
	fnbridge run t -- true || return  # a builtin's name, not a function
}

# In a trap handler a bare return takes the status of the command before
# the trap: each step's own status must come back all the same.
inshell_traps() {
	trap 'fnbridge run t1 -- sh -c "echo declined; exit 100" >/dev/null 2>&1; echo "err-trap $?"' ERR
	false
	trap - ERR
	trap 'fnbridge run t2 -- sh -c "echo declined; exit 100" >/dev/null 2>&1; echo "exit-trap $?"' EXIT
	:
}

# A trap handler's step while a step executes is refused alone: the
# executing step still completes, and the next one runs.
inshell_trap_in_step() {
	trap 'fnbridge run on-term -- echo cleanup >/dev/null 2>&1; echo "trap $?"' TERM
	fnbridge run X -- sh -c 'kill -TERM "$PPID"; echo x' || { echo "X $?"; return; }
	fnbridge run Y -- echo y
}

# A loop whose own redirection takes the number of a descriptor to the
# step agent (its FIFOs are opened at the first step), and --var naming
# the worker's own variable.
inshell_fd_loop() {
	fnbridge run prepare -- echo prep >/dev/null || return
	printf 'h1\nh2\n' >hosts.txt
	eval "while read -r -u $__fnb_areq h; do fnbridge run \"deploy \$h\" -- echo \"\$h\" || return; done $__fnb_areq<hosts.txt"
	fnbridge run --var __fnb_f v -- echo 999 2>&1 || echo "var $?"
}

inshell_values() {
	local v w x
	fnbridge run --var v u1 -- printf '%s\001\177' "$1 ü€ " || return
	fnbridge run --var w u2 -- printf '%5000s|' x || return
	fnbridge run --var x u3 -- printf 'a\tb\\n' || return
	printf '<%s><%s><%s>' "$v" "${#w}" "$x"
	fnbridge run u4 -- printf '\xff\xc3' || return
	fnbridge run "plan ü" -- sh -c 'echo "kein Plan ü"; exit 100' 2>&1 || echo " $?"
}

# __fnb_apid is the bootstrap's: the pid of the worker's step agent.
# agent_gone PID: it has exited (a zombie until the server, its reaper
# since the agent is no child of the shell, reaps it, has no cmdline) and
# closed its files: an exiting process drops its memory, and with it its
# cmdline, before its descriptors, and the next step takes an agent whose
# stdin is still open for alive (on a loaded machine a step then waited
# 2 s on it and failed with status 3).
agent_gone() {
	local a=
	{ IFS= read -r -d '' a <"/proc/$1/cmdline"; } 2>/dev/null
	[[ -z $a && ! -e /proc/$1/fd/0 ]]
}

agent_dies() {
	local v w
	fnbridge run --var v a1 -- printf one || return
	kill -KILL "$__fnb_apid"
	until agent_gone "$__fnb_apid"; do sleep 0.01; done
	fnbridge run --var w a2 -- printf two || return
	printf '%s %s|' "$v" "$w"
	fnbridge run a3 -- kill -KILL "$__fnb_apid" 2>&1 || echo "status $?"
}

# An answer in the agent's FIFO that is not this shell's (the agent wrote
# it for a shell killed while it waited) is skipped, never taken for the
# next step's.
stale_answer() {
	local v w
	fnbridge run --var v n1 -- printf one || return
	printf 'x.1\t0\tr\t\n' >"$__fnb_dir/a.ans"
	# an earlier invocation's at the count of the next request
	printf '%d.%d\t0\tr\t\n' "$((__fnb_seq - 1))" "$((__fnb_rq + 1))" >"$__fnb_dir/a.ans"
	printf 'stale' >|"$__fnb_dir/a.val"
	fnbridge run --var w n2 -- printf two || return
	printf '%s %s' "$v" "$w"
}

# Steps that say when their CMD runs: hold, a builtin, through the step's
# a.out (./scratch names the scratch directory); ext, a program, with a
# mark of its own. "fail" fails the attempt after hold.
held_steps() {
	local v
	printf '%s' "$__fnb_dir" >scratch
	fnbridge run --var v hold -- printf hold-ran || { echo "status $?"; return; }
	[[ $1 != fail ]] || exit 1
	fnbridge run ext -- touch ran-ext || return
	fnbridge run --var v two -- printf two || return
	printf done
}

# A step of a background child holds a run: the shell's step is refused
# (409), and its CMD, a program, does not run.
child_holds() {
	# bg's run executes until b has had its answer, however slow the host.
	fnbridge run bg -- sh -c ': >bg.started; until [ -e b.done ]; do sleep 0.01; done' >/dev/null 2>&1 &
	until [[ -e bg.started ]]; do sleep 0.01; done
	fnbridge run b -- touch ran-b 2>/dev/null; echo "b status $?"
	: >b.done
	wait
	if [[ -e ran-b ]]; then echo "CMD of b ran"; else echo "CMD of b did not run"; fi
	rm -f ran-b bg.started b.done
}

# A trap handler's step while the function waits for its step's answer
# (the agent stopped meanwhile): bash runs the handler inside that wait
# and resumes it after. The handler's step is refused, as any beside an
# open step, and the wait gets its answer.
trap_in_wait() {
	local v
	fnbridge run first -- true || return
	trap 'fnbridge run --var w on-usr1 -- printf nested 2>/dev/null; echo "trap $? $w" >trap.out' USR1
	fnbridge run --var v X -- sh -c 'kill -STOP "$1"; (sleep 0.5; kill -USR1 "$2"; sleep 0.5; kill -CONT "$1") </dev/null >/dev/null 2>&1 & echo x' sh "$__fnb_apid" "$BASHPID" || { echo "X $?"; return; }
	echo "v=$v"
	cat trap.out
}

# stop_agent stops the worker's step agent (__fnb_apid is the
# bootstrap's: its pid) and returns once every thread of it is stopped.
# The agent is a Go program, several threads: a SIGSTOP stops them only
# once the thread the kernel gave it to is scheduled to take it, and
# meanwhile the others run. On a loaded machine one of them read the
# step that followed the kill and sent its start to the endpoint before
# the stop took hold. A poll on the threads' states, bounded: after 10 s
# it says so and fails.
stop_agent() {
	local IFS=$' \t\n' i t st running
	kill -STOP "$__fnb_apid"
	for ((i = 0; i < 1000; i++)); do
		running=
		for t in /proc/"$__fnb_apid"/task/*/stat; do
			# The state follows the last ") ": a name may hold spaces.
			st=
			{ IFS= read -r st <"$t"; } 2>/dev/null
			st=${st##*) }
			[[ -n $st && ${st:0:1} != T ]] && running=1
		done
		[[ -z $running ]] && return
		sleep 0.01
	done
	echo "the step agent $__fnb_apid did not stop within 10 s"
	return 1
}

# in_wait ME: in the background, sends USR1 to the function's shell ME
# until its handler, run inside the wait for a step's answer while the
# step agent is stopped, says so by creating trap.in; then lets the agent
# go on. The handler's steps thus reach the endpoint before the waiting
# step's, whatever the machine's load: a poll on that file, not a guess
# at how long the shell takes to reach its wait or a command to start.
# Bounded: a handler that never runs in the wait ends it after 30 s. The
# caller waits for this job before it clears the trap (a USR1 still in
# flight would end the shell).
in_wait() {
	local i
	(
		for ((i = 0; i < 600; i++)); do
			[[ -e trap.in ]] && break
			kill -USR1 "$1" || break
			sleep 0.05
		done
		kill -CONT "$__fnb_apid"
	) </dev/null >/dev/null 2>&1 &
}

# Trap handlers' steps while the function's step X waits (the agent
# stopped): USR1's step sends USR2, whose handler takes a step inside
# USR1's. Both go through the command; X gets its own value.
# (__fnb_my is the bootstrap's: set only in the wait for an answer.)
double_trap() {
	local v me=$BASHPID fired=
	fnbridge run first -- true || return
	trap 'fnbridge run on-usr2 -- printf two >/dev/null 2>&1; echo "usr2 $?" >>trap.out' USR2
	trap 'if [[ -z $fired && -n ${__fnb_my-} ]]; then fired=1; fnbridge run on-usr1 -- sh -c "kill -USR2 \$0" "$BASHPID" >/dev/null 2>&1; echo "usr1 $?" >>trap.out; : >trap.in; fi' USR1
	stop_agent || return
	in_wait "$me"
	fnbridge run --var v X -- printf x || { echo "X $?"; return; }
	wait
	echo "v=$v"
	cat trap.out
}

# A trap handler's steps while X waits: builtin CMDs (: too), and --var
# of a value with a NUL byte, refused as outside a trap.
nested_builtins() {
	local v me=$BASHPID fired=
	fnbridge run first -- true || return
	trap 'if [[ -z $fired && -n ${__fnb_my-} ]]; then fired=1; fnbridge run n2 -- : 2>>trap.out; echo "n2 $?" >>trap.out; fnbridge run --var w n1 -- printf "a\0b" 2>>trap.out; echo "n1 $? [$w]" >>trap.out; : >trap.in; fi' USR1
	stop_agent || return
	in_wait "$me"
	fnbridge run --var v X -- printf x || { echo "X $?"; return; }
	wait
	echo "v=$v"
	cat trap.out
}

# An IFS of the function's holding digits, a dot and a space changes
# nothing a step does (nonces, the nested flag, scratch paths all hold
# them): bash splits the words of "builtin local" as a command's.
ifs_digits() {
	local v w me=$BASHPID fired= IFS=$'0123456789. \t\n'
	fnbridge run --var v d1 -- printf one || return
	fnbridge run --var w d2 -- sh -c 'printf two' || return
	trap 'if [[ -z $fired && -n ${__fnb_my-} ]]; then fired=1; fnbridge run --var x n1 -- printf nested 2>>trap.out; echo "n1 $? [$x]" >>trap.out; : >trap.in; fi' USR1
	stop_agent || return
	in_wait "$me"
	fnbridge run d3 -- printf three || { echo "d3 $?"; return; }
	wait
	trap - USR1
	printf ' %s %s\n' "$v" "$w"
	cat trap.out
}

# A step whose stdout file is gone before the agent reads it (CMD
# unlinked it) fails like a failed CMD: its run is not left open. The
# function goes on regardless.
out_gone() {
	fnbridge run gone -- sh -c 'rm -f "$1"; printf x' sh "$__fnb_dir/a.out"
	fnbridge run after -- printf y
}

# A trap handler's bare return ends the wait for a step's answer: the
# step fails (its outcome is unknown here), never takes an older value.
# (The handler returns only from __fnb_answer, the function it
# interrupted, its FUNCNAME[0]: a return from a helper of the wait, run
# after a 2 s timeout on a loaded machine, has other outcomes.)
trap_return() {
	local v w me=$BASHPID
	fnbridge run --var v first -- printf one || return
	trap 'if [[ ${FUNCNAME[0]-} == __fnb_answer ]]; then : >trap.in; return; fi' USR1
	stop_agent || return
	in_wait "$me"
	fnbridge run --var w second -- printf two 2>/dev/null; echo "second $?"
	wait
	trap - USR1
	printf '%s [%s]' "$v" "$w"
}

# Under nocasematch, a program named Echo is a program, not the builtin.
nocase() {
	local v
	mkdir -p bin
	printf '#!/bin/sh\necho upper\n' >bin/Echo
	chmod +x bin/Echo
	PATH=$PWD/bin:$PATH
	shopt -s nocasematch
	fnbridge run --var v up -- Echo 2>&1; echo "rc=$? v=$v"
}

# --var under set -u: an unset local, a set one, an integer.
var_kinds() {
	set -u
	local a b=old
	local -i c
	fnbridge run --var a k1 -- printf one || return
	fnbridge run --var b k2 -- printf two || return
	fnbridge run --var c k3 -- printf 6 || return
	fnbridge run --var b k4 -- printf three || return
	printf '%s %s %s' "$a" "$b" "$((c + 1))"
}

# A TMOUT of the function's (here a microsecond) bounds its own reads,
# never the wait for a step's answer nor the reading of it.
tmout_steps() {
	local v w TMOUT=0.000001
	fnbridge run --var v t1 -- printf one || return
	fnbridge run --var w t2 -- sleep 0.05 || return
	printf '%s %s' "$v" "$w"
}

# A process that holds the pid the dead agent had (the kernel reuses
# pids; here the shell is simply told so) is not taken for the agent.
agent_pid_reused() {
	local v w
	fnbridge run --var v r1 -- printf one || return
	kill -KILL "$__fnb_apid"
	until agent_gone "$__fnb_apid"; do sleep 0.01; done
	sleep 60 </dev/null >/dev/null 2>&1 &
	local impostor=$!
	__fnb_apid=$impostor
	printf '%s\n' "$impostor" >|"$__fnb_dir/a.pid"
	fnbridge run r2 -- printf two 2>&1 || echo "status $?"
	__fnb_areq= # the next step looks for an agent again, as a new attempt would
	fnbridge run --var w r3 -- printf three || return
	kill "$impostor"
	[[ $__fnb_apid != "$impostor" ]] || echo "adopted the impostor"
	printf '|%s %s' "$v" "$w"
}

# A process that takes the agent's command line (exec -a) and its pid
# file, as a job an earlier invocation left behind could, is not taken for
# the agent: it is never sent a request, which carries the attempt's
# token; the step starts a real agent instead.
impostor_agent() {
	local v w
	fnbridge run --var v i1 -- printf one || return
	mkdir -p fake
	printf '%s\n' 'printf "%s\n" "$$" >|"$1/a.pid"; rm -f "$1/a.req" "$1/a.ans"; mkfifo "$1/a.req" "$1/a.ans"; touch ready; IFS= read -r line <"$1/a.req"; printf "%s\n" "$line" >stolen' >fake/agent
	(cd fake && exec -a fnbridge bash agent "$__fnb_dir") </dev/null >/dev/null 2>&1 &
	local impostor=$!
	until [[ -e fake/ready ]]; do sleep 0.01; done
	__fnb_areq= # the next step looks for an agent, as a later invocation's shell does
	fnbridge run --var w i2 -- printf two 2>&1 || echo "status $?"
	kill "$impostor" 2>/dev/null
	[[ ! -e fake/stolen ]] || echo "the impostor was sent: $(<fake/stolen)"
	printf '%s %s' "$v" "$w"
}

# A background child of a step's command that writes after the command
# exited (here: once l2 has begun) writes into no later step's value; in
# $(...) (the fnbridge command) a child that keeps stdout open does not
# hold the step up.
leftover() {
	local a b c
	fnbridge run --var a l1 -- sh -c '(while [ ! -e go ]; do sleep 0.01; done; echo late; touch wrote) & echo one' || return
	fnbridge run --var b l2 -- sh -c 'touch go; while [ ! -e wrote ]; do sleep 0.01; done; echo two' || return
	c=$(fnbridge run l3 -- sh -c 'sleep 30 & echo three') || return
	printf '%s|%s|%s' "$a" "$b" "$c"
}

# The function's own jobs, files, options and PATH are its own across
# steps: the agent the first step starts is no job of the shell and holds
# none of its files.
inshell_own() {
	local v w x n bg
	sleep 0.01 &
	bg=$!
	exec 9>held
	set -f # set -euf scripts: the agent's start still closes every file
	fnbridge run --var v o1 -- printf one || return
	set +f
	[[ $! == "$bg" ]] || echo "\$! is $! after a step, was $bg"
	wait
	echo "waited $?"
	exec 9>&-
	! ls -l "/proc/$__fnb_apid/fd" | grep -q held || echo "the agent holds the function's file"
	shopt -s nocasematch
	fnbridge run --var w o2 -- printf two || return
	shopt -u nocasematch
	n=$(printf '%5000s' '' | tr ' ' n)
	PATH=/nonexistent fnbridge run --var x "$n" -- printf long || return
	set -x
	fnbridge run o4 -- true 2>trace
	set +x
	! grep -q -e "$FNBRIDGE_CONTEXT_TOKEN" -e __fnb_run trace || echo "xtrace shows the bootstrap"
	local -r ro=1
	fnbridge run --var ro o5 -- printf x 2>&1 || echo " status $?"
	printf '%s %s %s' "$v" "$w" "$x"
}

# An agent that died and whose pid went to another process (simulated:
# a sleep's pid given as the agent's) is replaced at the next
# invocation's first step; inline, this shell serves that invocation too.
reuse() {
	fnbridge run --var v s1 -- printf one || exit
	if [[ $1 == fake ]]; then
		kill "$__fnb_apid"
		sleep 60 &
		__fnb_apid=$!
	fi
	printf '%s' "$v"
}

meta() {
	fnbridge run "step $1" -- printf '%s\n' "$1" || return
	fnbridge call Echo/echo "$1" || return
}
`

const childSh = "#!/bin/sh\nfnbridge invocation-id && fnbridge random\n"

// stepsEnv is a real context endpoint and the bridge binary, which is
// the fnbridge command of the workers.
type stepsEnv struct {
	*steptest.Server
	bridge string
	a      *adaptertest.Adapter // how workers run invocations (conformance: in subshells)
}

func newStepsEnv(t testing.TB) *stepsEnv {
	t.Helper()
	e := &stepsEnv{Server: steptest.New(t), a: conformance}
	e.bridge = testtool.BridgeBin(t, e.Dir)
	return e
}

// steps is one registration of steps.<fn> with the fnbridge command.
type steps struct {
	*stepsEnv
	f *adaptertest.Fixture
	w functionruntime.Worker
}

func (e *stepsEnv) start(t *testing.T, fn string, env map[string]string) *steps {
	t.Helper()
	f := e.a.NewFixture(t, "steps."+fn, map[string]string{"steps.sh": stepsSh})
	if err := os.WriteFile(filepath.Join(f.Dir, "child.sh"), []byte(childSh), 0o755); err != nil {
		t.Fatal(err)
	}
	f.A = bash.New(bash.Options{Grace: adaptertest.Grace, ContextCommand: e.bridge})
	f.Spec.Env = env
	return &steps{stepsEnv: e, f: f, w: f.Start(t)}
}

// invoke runs one invocation, with the step context of a unless a is nil.
func (s *steps) invoke(t *testing.T, a *stepctx.Attempt, input string) (functionruntime.Result, error) {
	t.Helper()
	return s.Invoke(t, s.f, s.w, a, input)
}

// fresh runs one invocation without input on an empty journal, which it
// returns.
func (s *steps) fresh(t *testing.T) (*stepctxtest.Journal, functionruntime.Result, error) {
	t.Helper()
	j := &stepctxtest.Journal{}
	res, err := s.invoke(t, s.Open(t, j), "")
	return j, res, err
}

// replay restarts j, as Restate's next attempt would, and invokes again
// with input: the replay must answer want.
func (s *steps) replay(t *testing.T, j *stepctxtest.Journal, input, want string) {
	t.Helper()
	j.Restart()
	res, err := s.invoke(t, s.Open(t, j), input)
	steptest.MustOutput(t, res, err, want)
}

// marker returns the marker file's lines and removes it.
func (s *steps) marker(t *testing.T) string {
	t.Helper()
	p := filepath.Join(s.f.Dir, "marker")
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	_ = os.Remove(p)
	return strings.ReplaceAll(strings.TrimSuffix(string(b), "\n"), "\n", ",")
}

// TestSteps runs the durable-steps behaviour of Bash functions against a
// real context endpoint; the subtests share one build of the bridge.
func TestSteps(t *testing.T) { modes(t, testSteps) }

func testSteps(t *testing.T, a *adaptertest.Adapter) {
	adaptertest.Require(t, "bash")
	adaptertest.Require(t, "go")
	e := newStepsEnv(t)
	e.a = a

	// Rule: a recorded step prints its journaled stdout without running
	// its command; a step whose command fails retryably fails the attempt
	// (nothing journaled), and the next attempt resumes there.
	t.Run("resume where it failed", func(t *testing.T) {
		s := e.start(t, "provision", nil)
		j := &stepctxtest.Journal{}
		adaptertest.WriteFiles(t, s.f.Dir, map[string]string{"fail-once": ""})
		_, err := s.invoke(t, e.Open(t, j), "")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", ExitCode: 7, Message: "run step3: sh exited with status 7"})
		if got := s.marker(t); got != "1,2,3" {
			t.Fatalf("first attempt ran steps %s, want 1,2,3", got)
		}
		if f := j.Failures(); len(f) != 1 || !strings.Contains(f[0], "status 7") {
			t.Fatalf("retryable failures journaled: %q, want step3's", f)
		}
		j.Restart()
		res, err := s.invoke(t, e.Open(t, j), "")
		steptest.MustOutput(t, res, err, "one two three four")
		if got := s.marker(t); got != "3,4" {
			t.Fatalf("second attempt ran steps %s, want only 3,4 (1 and 2 replayed)", got)
		}
		for i, want := range []string{"one\n", "two\n", "three\n", "four\n"} {
			if en := j.Entries()[i]; en.Kind != "run" || en.Result == nil || string(en.Result.Value) != want {
				t.Fatalf("entry %d = %+v, want run with value %q (the exact stdout)", i, en, want)
			}
		}
	})

	// A replayed step prints its recorded value without reading its
	// stdin (the loops below are why); the producer's unread output is
	// dropped (README: put the producer in the step).
	t.Run("piped stdin on replay", func(t *testing.T) {
		s := e.start(t, "piped", nil)
		j, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "1000000")
		s.replay(t, j, "", "1000000")
		if got := s.marker(t); got != "u" {
			t.Fatalf("steps ran %q, want upload once", got)
		}
	})

	// Rule (issue 10): once an attempt ends, no code of it runs. A
	// background step of a function that failed is stopped before the
	// failure is answered, so Restate's retry never runs beside it; the
	// worker serves the retry.
	t.Run("a failed attempt's background step is stopped", func(t *testing.T) {
		s := e.start(t, "bg_fail", nil)
		_, err := s.invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", ExitCode: 1, Message: "exit status 1"})
		b, rerr := os.ReadFile(filepath.Join(s.f.Dir, "bg.pid"))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if rerr != nil || pid == 0 {
			t.Fatalf("bg.pid: %q %v", b, rerr)
		}
		if st, err := procstat.Read(pid); err == nil && !st.Dead() {
			t.Fatalf("the failed attempt's background step (pid %d, %c) still runs after its failure was answered", pid, st.State)
		}
		_ = os.Remove(filepath.Join(s.f.Dir, "bg.pid"))
		_, err = s.invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", ExitCode: 1, Message: "exit status 1"})

		// Only leftovers cost the worker: a plain failure keeps it. (An
		// inline invocation's exit ends its worker's shell, whatever it
		// left.)
		p := e.start(t, "fail_plain", nil)
		for range 2 {
			_, err := p.invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
			steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", ExitCode: 1, Message: "exit status 1"})
		}
		pids, _ := os.ReadFile(filepath.Join(p.f.Dir, "worker.pids"))
		if f := strings.Fields(string(pids)); len(f) != 2 || (f[0] == f[1]) == a.Inline {
			t.Fatalf("worker shells of two plain failures: %q, want the same one twice (inline: two)", pids)
		}
	})

	// A step in a loop reads none of the loop's input, the first time or
	// on replay, in the function's own shell and in a pipeline's: a
	// replayed step that read its piped stdin lost the loop's remaining
	// items.
	t.Run("steps in loops over a pipe", func(t *testing.T) {
		s := e.start(t, "loops", nil)
		j, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "a,b,c,d,e,f,g,h,")
		if n := len(j.Entries()); n != 8 {
			t.Fatalf("%d steps journaled, want 8", n)
		}
		s.replay(t, j, "", "a,b,c,d,e,f,g,h,")
	})

	// Rule: in the invocation's own shell fnbridge is a shell function:
	// --var assigns the value (newlines kept), builtins and programs both
	// take steps, arguments stay data, and a replay assigns the recorded
	// values without running anything. Other shells ($(...), subshells)
	// use the command, where --var is refused; a value with a NUL byte
	// cannot go into a variable.
	t.Run("shell function", func(t *testing.T) {
		s := e.start(t, "inshell", nil)
		j := &stepctxtest.Journal{}
		want := "hi $(touch pwned)\n\n\n<[hi $(touch pwned)\n\n]>fnbridge: run --var works only in the function's own shell, where fnbridge is a shell function; in a subshell or a child process capture stdout instead: v=$(fnbridge run NAME -- CMD)\nsubshell 2\n" +
			"fnbridge: run s6 --var: the value holds a NUL byte, which a shell variable cannot; print it instead\nnul 2\nfive|" + badVar("not a name") + badVar("1x") + badVar("é") + badVar("a-b") + badVar("a$b") +
			"fnbridge: run --var: VAR is empty (an unset variable?); usage: fnbridge run [--var VAR] NAME -- CMD [ARG...]\nbadvar 2\n" +
			runUsage("run: NAME -- CMD is missing") + runUsage("run: NAME is missing before --") + runUsage("run: NAME is empty (an unset variable?)") +
			runUsage("run s8: -- CMD is missing after NAME") + runUsage("run: unknown option --retries (only --var VAR may come before NAME)") +
			runUsage("run s8: want -- between NAME and CMD, not echo") + runUsage("run s8: CMD is missing after --") +
			runUsage("run s8: CMD is empty (an unset variable?)") + strings.TrimSuffix(runUsage("run s8: CMD is empty (an unset variable?)"), "\n")
		res, err := s.invoke(t, e.Open(t, j), "hi")
		steptest.MustOutput(t, res, err, want)
		if got := s.marker(t); got != "2" {
			t.Fatalf("the external step ran %q times, want once", got)
		}
		var names []string
		for _, en := range j.Entries() {
			names = append(names, en.Name+"="+string(en.Result.Value))
		}
		if got := strings.Join(names, ","); got != "s1=hi $(touch pwned)\n\n,s2=[hi $(touch pwned)\n\n],s3=hi $(touch pwned)\n\n\n,s5=five,s6=a\x00b" {
			t.Fatalf("journal %q", got)
		}
		if _, err := os.Stat(filepath.Join(s.f.Dir, "pwned")); err == nil {
			t.Fatal("an argument was evaluated")
		}
		s.replay(t, j, "changed", want)
		if got := s.marker(t); got != "" {
			t.Fatalf("the replay ran the external step (%q)", got)
		}
	})

	// Rule (Bash API): "its stdout is the journaled value": what CMD
	// printed, not what a child it left behind writes later, in the
	// function's own shell and in $(...) alike.
	t.Run("leftover children", func(t *testing.T) {
		s := e.start(t, "leftover", nil)
		j := &stepctxtest.Journal{}
		start := time.Now()
		res, err := s.invoke(t, e.Open(t, j), "")
		steptest.MustOutput(t, res, err, "one\n|two\n|three")
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("the steps took %s: l3 waited for its background child", d)
		}
		for i, want := range []string{"one\n", "two\n", "three\n"} {
			if en := j.Entries()[i]; en.Result == nil || string(en.Result.Value) != want {
				t.Fatalf("entry %d = %+v, want the value %q", i, en, want)
			}
		}
	})

	// Rule: every value comes back to the shell byte for byte in the
	// function's own locale, whatever its bytes (7-bit with control
	// characters, UTF-8, invalid UTF-8) or length, on the first attempt
	// and on replay; so does a terminal failure's message.
	t.Run("shell function values", func(t *testing.T) {
		s := e.start(t, "inshell_values", map[string]string{"LANG": "C.UTF-8"})
		j := &stepctxtest.Journal{}
		want := "<hi ü€ \x01\x7f><5001><a\tb\\n>\xff\xc3fnbridge: run plan ü: kein Plan ü\n 100"
		res, err := s.invoke(t, e.Open(t, j), "hi")
		steptest.MustOutput(t, res, err, want)
		s.replay(t, j, "changed", want)
	})

	// Rule: a step agent that died (and was reaped) is replaced by the
	// next step; one that dies while a step waits for its answer ends
	// that step with status 3
	// and a message naming it, and the journal keeps no completion for it.
	// Rule: `fnbridge run` in the function's shell leaves the function's
	// state alone: $! and a bare wait (the agent used to be a process
	// substitution: wait hung for the worker's life), its open files (the
	// agent held them and their locks, also under set -f, which left the
	// glob naming them unexpanded), nocasematch (every --var step
	// failed as holding a NUL), a long step name (the agent read it
	// garbled and the step hung), its PATH, set -x (which traced the
	// bootstrap, the attempt's token included); a readonly --var fails
	// the step's command with status 2 (it returned 0, unassigned).
	t.Run("shell function leaves the function's state alone", func(t *testing.T) {
		s := e.start(t, "inshell_own", nil)
		res, err := s.invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.MustOutput(t, res, err, "waited 0\nfnbridge: run o5 --var ro: cannot assign the value: the variable is readonly\n status 2\none two long")
	})

	t.Run("a reused agent pid is no agent", func(t *testing.T) {
		s := e.start(t, "reuse", nil)
		for _, in := range []string{"fake", "x"} {
			res, err := s.invoke(t, e.Open(t, &stepctxtest.Journal{}), in)
			steptest.MustOutput(t, res, err, "one")
		}
	})

	t.Run("shell function skips an answer not its own", func(t *testing.T) {
		s := e.start(t, "stale_answer", nil)
		j, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "one two")
		if en := j.Entries(); len(en) != 2 || string(en[1].Result.Value) != "two" {
			t.Fatalf("journal = %+v, want n2 executed with its own value", en)
		}
	})

	// Rule: in an attempt that replays nothing, a step's CMD runs
	// without waiting for the answer to its start (the start is on its
	// way first; the completion's answer ends the step), and the step is
	// journaled once. An attempt that replays waits for each start's
	// answer: a recorded step's CMD must not run.
	t.Run("a fresh attempt runs a builtin CMD while its start is served", func(t *testing.T) {
		s := e.start(t, "held_steps", nil)
		ran := func(name string) bool {
			if name == "ext" {
				_, err := os.Stat(filepath.Join(s.f.Dir, "ran-ext"))
				return err == nil
			}
			dir, err := os.ReadFile(filepath.Join(s.f.Dir, "scratch"))
			if err != nil {
				return false
			}
			out, _ := os.ReadFile(filepath.Join(string(dir), "a.out"))
			return string(out) == map[string]string{"hold": "hold-ran", "two": "two"}[name]
		}
		var mu sync.Mutex // early is written on the endpoint's goroutine
		early := map[string]bool{}
		j := &stepctxtest.Journal{BeforeRunStart: func(ctx context.Context, name string) {
			mu.Lock()
			defer mu.Unlock()
			if _, seen := early[name]; seen {
				return // replayed
			}
			if name == "hold" {
				// Held until CMD has run: a shell that waited for this
				// answer would never get there.
				deadline := time.Now().Add(20 * time.Second)
				for !ran(name) && time.Now().Before(deadline) && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
			early[name] = ran(name)
		}}
		a := e.Open(t, j)
		if !a.Fresh() {
			t.Fatal("an attempt of an empty journal is not fresh")
		}
		if _, err := s.invoke(t, a, "fail"); err == nil {
			t.Fatal("the first attempt did not fail")
		}
		j.Restart()
		a = e.Open(t, j)
		if a.Fresh() {
			t.Fatal("an attempt with a recorded step is fresh")
		}
		res, err := s.invoke(t, a, "")
		steptest.MustOutput(t, res, err, "done")
		mu.Lock()
		defer mu.Unlock()
		if !early["hold"] || early["ext"] || early["two"] {
			t.Fatalf("CMD run before its start was served: %v; want hold (a builtin, fresh attempt) early, ext (a program) and two (a replaying attempt) not", early)
		}
		var names []string
		for _, en := range j.Entries() {
			if en.Result == nil {
				t.Fatalf("journal = %+v, want every step completed", j.Entries())
			}
			names = append(names, en.Name+"="+string(en.Result.Value))
		}
		if got := strings.Join(names, " "); got != "hold=hold-ran ext= two=two" {
			t.Fatalf("journal = %s, want each step once", got)
		}
	})

	t.Run("a step refused because a child holds a run does not run its program", func(t *testing.T) {
		s := e.start(t, "child_holds", nil)
		_, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "b status 3\nCMD of b did not run")
	})

	t.Run("a trap handler's step while a step waits for its answer", func(t *testing.T) {
		s := e.start(t, "trap_in_wait", nil)
		j, res, err := s.fresh(t)
		// bash runs the handler inside the wait, or, when the signal
		// comes as the read returns, right after it: then X's run is
		// over and the handler's step executes.
		if err != nil || (string(res.Output) != "v=x\n\ntrap 3 " && string(res.Output) != "v=x\n\ntrap 0 nested") {
			t.Fatalf("output = %q (%v), want v=x and the handler's step refused (3) or, after X, done", res.Output, err)
		}
		// After X, the handler's step is journaled too.
		wantSteps := 2
		if string(res.Output) == "v=x\n\ntrap 0 nested" {
			wantSteps = 3
		}
		if en := j.Entries(); len(en) != wantSteps || en[1].Name != "X" || en[1].Result == nil || string(en[1].Result.Value) != "x\n" {
			t.Fatalf("journal = %+v, want first and X with its value (and on-usr1 when the handler ran after X)", en)
		}
	})

	// Rule: a step whose start is refused fails as the refusal says,
	// also when its CMD ran meanwhile (a fresh attempt does not wait for
	// the start's answer), and nothing is journaled for it.
	t.Run("a refused start wins over its completion", func(t *testing.T) {
		s := e.start(t, "held_steps", nil)
		j := &stepctxtest.Journal{RunStartError: stepctx.Cancelled()}
		res, err := s.invoke(t, e.Open(t, j), "")
		steptest.MustOutput(t, res, err, "status 100")
		if en := j.Entries(); len(en) != 0 {
			t.Fatalf("journal = %+v, want nothing journaled", en)
		}
		if l := s.f.Logs.Records("cancelled"); len(l) == 0 {
			t.Errorf("the refusal was not said: logs %v", s.f.Logs.Records(""))
		}
		j = &stepctxtest.Journal{RunStartError: stepctx.ErrSuspended}
		a := e.Open(t, j)
		_, err = s.invoke(t, a, "")
		if en := j.Entries(); len(en) != 0 || !errors.Is(a.Err(), stepctx.ErrSuspended) {
			t.Fatalf("journal = %+v, attempt ended with %v (%v); want nothing journaled, suspended", en, a.Err(), err)
		}
	})

	t.Run("trap handlers' steps during a step", func(t *testing.T) {
		for _, c := range []struct{ fn, want, or, x string }{
			{"double_trap", "v=x\nusr2 0\nusr1 0", "", "x"},
			{"nested_builtins", "v=x\nn2 0\nfnbridge: run n1 --var: the value holds a NUL byte, which a shell variable cannot; print it instead\nn1 2 []", "", "x"},
			// The return ends the wait (the answer cannot come before
			// it: the agent goes on once the handler has run), and the
			// step fails: never "one", the first step's value.
			{"trap_return", "second 3\none []", "", ""},
			{"ifs_digits", "three one two\nn1 0 [nested]", "", ""},
		} {
			s := e.start(t, c.fn, nil)
			j, res, err := s.fresh(t)
			if err != nil || (string(res.Output) != c.want && (c.or == "" || string(res.Output) != c.or)) {
				t.Fatalf("%s: output = %q (%v), want %q", c.fn, res.Output, err, c.want)
			}
			for _, en := range j.Entries() {
				if en.Name == "X" && (en.Result == nil || string(en.Result.Value) != c.x) {
					t.Fatalf("%s: journal = %+v, want X with %q", c.fn, j.Entries(), c.x)
				}
			}
		}
	})

	t.Run("nocasematch leaves a program named like a builtin a program", func(t *testing.T) {
		s := e.start(t, "nocase", nil)
		res, err := s.invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.MustOutput(t, res, err, "rc=0 v=upper\n")
	})

	t.Run("shell function --var kinds under set -u", func(t *testing.T) {
		s := e.start(t, "var_kinds", nil)
		res, err := s.invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.MustOutput(t, res, err, "one three 7")
	})

	// Rule (issue 10: a retryable failure of a step ends the attempt):
	// a step whose stdout cannot be read is journaled as a retryable
	// failure, never left open for the next step to trip over.
	t.Run("shell function step whose stdout is gone", func(t *testing.T) {
		s := e.start(t, "out_gone", nil)
		j := &stepctxtest.Journal{}
		_, err := s.invoke(t, e.Open(t, j), "")
		if err == nil || !strings.Contains(err.Error(), `step "gone" failed and will be retried: reading sh's stdout: `) {
			t.Fatalf("invocation ended with %v, want the attempt ended by the step's failure, naming the unread stdout", err)
		}
		if f := j.Failures(); len(f) != 1 || !strings.Contains(f[0], "reading sh's stdout") {
			t.Fatalf("retryable failures journaled = %q, want the step's", f)
		}
	})

	t.Run("shell function under a TMOUT of the function's", func(t *testing.T) {
		s := e.start(t, "tmout_steps", nil)
		res, err := s.invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.MustOutput(t, res, err, "one ")
	})

	t.Run("shell function agent dies", func(t *testing.T) {
		s := e.start(t, "agent_dies", nil)
		j, res, err := s.fresh(t)
		if err != nil || !regexp.MustCompile(`^one two\|fnbridge: the step agent \(pid [0-9]+\) is gone\nstatus 3$`).Match(res.Output) {
			t.Fatalf("output = %q (%v), want both values, then the dead agent named and status 3", res.Output, err)
		}
		if en := j.Entries(); len(en) != 3 || en[1].Name != "a2" || string(en[1].Result.Value) != "two" || en[2].Result != nil {
			t.Fatalf("journal = %+v, want a1, a2 completed and a3 started only", en)
		}
	})

	// Rule: a live process that is not the agent but has its pid (reused
	// by the kernel) ends a step waiting on it with status 3 within the
	// answer's 2 s wait, not at the handler's timeout, and is never
	// adopted as the agent: the next step starts a new one.
	t.Run("shell function agent pid reused", func(t *testing.T) {
		s := e.start(t, "agent_pid_reused", nil)
		j := &stepctxtest.Journal{}
		start := time.Now()
		res, err := s.invoke(t, e.Open(t, j), "")
		if err != nil || !regexp.MustCompile(`^fnbridge: the step agent \(pid [0-9]+\) is gone\nstatus 3\n\|one three$`).Match(res.Output) {
			t.Fatalf("output = %q (%v), want the impostor named as a gone agent, status 3, then both values", res.Output, err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("took %v: the step waited on the impostor past its answer wait", d)
		}
	})

	// Rule (issue: a leftover is never sent a later attempt's token): a
	// process with the agent's command line and pid file but another
	// executable is no agent.
	t.Run("shell function agent impostor", func(t *testing.T) {
		s := e.start(t, "impostor_agent", nil)
		j, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "one two")
		if en := j.Entries(); len(en) != 2 || en[1].Name != "i2" || string(en[1].Result.Value) != "two" {
			t.Fatalf("journal = %+v, want i1 and i2 completed", en)
		}
	})

	// Rule: exit 100 is a journaled terminal failure, and the same on
	// replay, whichever context the shell function runs in: a trap
	// handler's step reports its own status, not the trapped command's.
	t.Run("steps in trap handlers", func(t *testing.T) {
		s := e.start(t, "inshell_traps", nil)
		j, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "err-trap 100\nexit-trap 100")
		s.replay(t, j, "", "err-trap 100\nexit-trap 100")
	})

	// The agent inherits the function's umask: 0277 made its FIFOs 0400,
	// which an owner other than root cannot open for writing ("the step
	// agent did not start" on every attempt).
	t.Run("a umask without owner write", func(t *testing.T) {
		s := e.start(t, "umask_steps", nil)
		_, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "one 600 600 ")
	})

	t.Run("a NUL value printed with PATH changed", func(t *testing.T) {
		s := e.start(t, "nul_nopath", nil)
		j, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "status 0 bytes 3")
		s.replay(t, j, "", "status 0 bytes 3")
	})

	t.Run("a loop redirecting an agent descriptor", func(t *testing.T) {
		s := e.start(t, "inshell_fd_loop", nil)
		_, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "h1\nh2\nfnbridge: run --var __fnb_f: names starting with __fnb_ are the worker's own; choose another\nvar 2")
	})

	t.Run("a trap's refused step leaves the executing one", func(t *testing.T) {
		s := e.start(t, "inshell_trap_in_step", nil)
		j, res, err := s.fresh(t)
		steptest.MustOutput(t, res, err, "trap 3\nx\ny")
		if en := j.Entries(); len(en) != 2 || en[0].Name != "X" || en[0].Result == nil || en[1].Name != "Y" {
			t.Fatalf("journal = %+v, want X and Y completed", en)
		}
	})

	// Rule: the shell function fails like the command: exit 100 is a
	// terminal failure, journaled (errexit does not skip that), another
	// status fails the attempt with that status.
	t.Run("shell function failures", func(t *testing.T) {
		s := e.start(t, "inshell_fails", nil)
		j := &stepctxtest.Journal{}
		_, err := s.invoke(t, e.Open(t, j), "plan 100")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", Terminal: true, ExitCode: 100, Message: "failed: plan"})
		if en := j.Entries(); len(en) != 2 || en[1].Result == nil || en[1].Result.Failure == nil || en[1].Result.Failure.Message != "failed: plan" {
			t.Fatalf("journal = %+v, want ok and the terminal failure", en)
		}
		_, err = s.invoke(t, e.Open(t, &stepctxtest.Journal{}), "flaky 7")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", ExitCode: 7, Message: "run flaky: sh exited with status 7"})
		// --help alone shows the command's help, as in any other shell.
		res, err := e.start(t, "inshell_help", nil).invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.MustOutput(t, res, err, "help 0\nRun CMD (executed directly, not through a shell) as the durable step NAME.")
		// A CMD that is no program (a builtin such as cd) fails the step as
		// the fnbridge command says it, not in bash's words.
		res, err = e.start(t, "inshell_noprog", nil).invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.MustOutput(t, res, err, "fnbridge: run nav: cd: no such program on PATH (a step runs a program, not a shell builtin or function)\nfnbridge: run nav: cd exited with status 127; the attempt fails and Restate retries it\n 127")
		// A step name past the bound is refused, said once, whether the
		// agent's line or the endpoint finds it too long.
		res, err = e.start(t, "inshell_long", nil).invoke(t, e.Open(t, &stepctxtest.Journal{}), "")
		steptest.MustOutput(t, res, err, "fnbridge: run: the step name is longer than 16384 bytes, the most a step name may have\n 2\n"+
			"fnbridge: run's \"name\" is 17000 bytes; a step name may have at most 16384 (HTTP 400)\n 2")
		// A shell function as CMD is refused before the step starts, saying
		// what a step runs, not bash's "exec: greet: not found"; so is the
		// builtin printf's -v, which would set a variable of the function's
		// shell that a replay leaves unset.
		j = &stepctxtest.Journal{}
		res, err = e.start(t, "inshell_fncmd", nil).invoke(t, e.Open(t, j), "")
		steptest.MustOutput(t, res, err, "fnbridge: run hi: greet is a shell function; a step runs a program (CMD is never shell code): export -f greet, then fnbridge run hi -- bash -c 'greet \"$@\"' greet ARG...\nfn 2\n"+
			"fnbridge: run pv: printf -v sets a variable of this shell, which a replay would not set: fnbridge run --var VAR pv -- printf FORMAT [ARG...] assigns the journaled value instead\nprintf-v 2 [unset]")
		if en := j.Entries(); len(en) != 1 || en[0].Name != "t" {
			t.Fatalf("journal = %+v, want only step t", en)
		}
	})

	// Rule: the context is in the environment, so a child process the
	// function starts takes steps too; random values replay.
	t.Run("child process", func(t *testing.T) {
		s := e.start(t, "child", nil)
		j := &stepctxtest.Journal{ID: "inv_child", Seed: 42}
		first, err := s.invoke(t, e.Open(t, j), "")
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^inv_child\n[0-9]+$`).Match(first.Output) {
			t.Fatalf("output = %q, want the invocation id and a random integer", first.Output)
		}
		j.Restart()
		again, err := s.invoke(t, e.Open(t, j), "")
		steptest.MustOutput(t, again, err, string(first.Output))
	})

	// Rule: a step's command exiting 100 is a terminal failure, journaled
	// and replayed (without running the command) as exit 100.
	t.Run("terminal failure", func(t *testing.T) {
		s := e.start(t, "terminal", nil)
		j := &stepctxtest.Journal{}
		want := functionruntime.HandlerError{Type: "exit", Terminal: true, ExitCode: 100, Message: "no such plan"}
		_, err := s.invoke(t, e.Open(t, j), "")
		steptest.WantHandlerError(t, err, want)
		en := j.Entries()
		if len(en) != 1 || en[0].Result == nil || en[0].Result.Failure == nil || en[0].Result.Failure.Message != "no such plan" {
			t.Fatalf("journal = %+v, want the run's terminal failure", en)
		}
		j.Restart()
		_, err = s.invoke(t, e.Open(t, j), "")
		steptest.WantHandlerError(t, err, want)
		if got := s.marker(t); got != "p" {
			t.Fatalf("the command ran %q times over two attempts, want once", got)
		}
	})

	// Rule: once the attempt suspended, every fnbridge call exits 75; a
	// function that exits 75 with a step context ends as attempt-ended
	// (retryable), also when it ignored the first 75.
	t.Run("suspension", func(t *testing.T) {
		for _, fn := range []string{"suspend_ignored", "suspend_errexit"} {
			s := e.start(t, fn, nil)
			j := &stepctxtest.Journal{HoldSleeps: true}
			a := e.Open(t, j)
			_, err := s.invoke(t, a, "")
			steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, ExitCode: 75, Message: "suspended"})
			if !errors.Is(a.Err(), stepctx.ErrSuspended) {
				t.Fatalf("%s: attempt ended with %v, want suspended", fn, a.Err())
			}
		}
	})

	// Rule: what the function does after the suspension is moot: the
	// bridge cancels the invocation, which kills its processes.
	t.Run("suspension then cancel", func(t *testing.T) {
		s := e.start(t, "suspend_then_block", nil)
		a := e.Open(t, &stepctxtest.Journal{HoldSleeps: true})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		go func() {
			<-a.Done() // as the bridge does when the attempt suspends
			cancel()
		}()
		_, err := s.w.Invoke(ctx, s.Invocation(s.f, a, "block"))
		if !errors.Is(err, context.Canceled) || !errors.Is(a.Err(), stepctx.ErrSuspended) {
			t.Fatalf("invoke = %v (attempt: %v), want cancelled after the suspension", err, a.Err())
		}
		// The next invocation gets a fresh worker (fnbridge fails in
		// function mode, which the function ignores).
		res, err := s.invoke(t, nil, "")
		steptest.MustOutput(t, res, err, "next")
	})

	// Rule: FNBRIDGE_CONTEXT and FNBRIDGE_CONTEXT_TOKEN are exported for
	// the invocation given a step context only; the fnbridge on PATH is
	// the runtime's, ahead of the registration's PATH.
	t.Run("environment", func(t *testing.T) {
		fake := t.TempDir()
		if err := os.WriteFile(filepath.Join(fake, "fnbridge"), []byte("#!/bin/sh\necho fake\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		s := e.start(t, "env_of", map[string]string{"PATH": fake + ":/usr/bin:/bin"})
		a := e.Open(t, &stepctxtest.Journal{})
		res, err := s.invoke(t, a, "")
		steptest.MustOutput(t, res, err, e.Addr+" "+a.Token()+" "+a.Token())
		res, err = s.invoke(t, a, strings.Repeat("x", 100<<10)) // the request in three writes
		steptest.MustOutput(t, res, err, e.Addr+" "+a.Token()+" "+a.Token())
		res, err = s.invoke(t, nil, "")
		steptest.MustOutput(t, res, err, "unset unset unset")

		w := e.start(t, "which_fnbridge", map[string]string{"PATH": fake + ":/usr/bin:/bin"})
		res, err = w.invoke(t, nil, "")
		if err != nil || filepath.Base(string(res.Output)) != "fnbridge" || strings.HasPrefix(string(res.Output), fake) {
			t.Fatalf("command -v fnbridge = %q (%v), want the runtime's, not %s", res.Output, err, fake)
		}
		if target, err := os.Readlink(string(res.Output)); err != nil || target != e.bridge {
			t.Fatalf("%s links to %q (%v), want %s", res.Output, target, err, e.bridge)
		}
	})

	// Rule: the per-invocation environment comes with the step context or
	// without it, byte for byte (newlines and quotes included), to the
	// function and its children, for that invocation only.
	t.Run("invocation environment", func(t *testing.T) {
		s := e.start(t, "key_of", nil)
		key := "line one\nline 'two' \"ü\" $(touch pwned)"
		a := e.Open(t, &stepctxtest.Journal{})
		for _, input := range []string{"", strings.Repeat("x", 100<<10)} { // the request in one write, then three
			for _, sc := range []*stepctx.Attempt{a, nil} {
				inv := s.Invocation(s.f, sc, input)
				inv.Env = map[string]string{functionruntime.EnvKey: key}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := s.w.Invoke(ctx, inv)
				cancel()
				addr := "unset"
				if sc != nil {
					addr = e.Addr
				}
				steptest.MustOutput(t, res, err, addr+"|"+key+"|"+key)
			}
		}
		res, err := s.invoke(t, a, "")
		steptest.MustOutput(t, res, err, e.Addr+"|unset|unset")
	})

	// Rule: in function mode (no step context) fnbridge fails with a clear
	// message, and exit 75 is an ordinary retryable status.
	t.Run("function mode", func(t *testing.T) {
		s := e.start(t, "function_mode", nil)
		res, err := s.invoke(t, nil, "")
		steptest.MustOutput(t, res, err, "unset\nfnbridge: FNBRIDGE_CONTEXT and FNBRIDGE_CONTEXT_TOKEN are not set: context calls work only inside a function that fnbridge runs with durable steps (durability: steps), and in the processes it starts with its environment (not under env -i or a scrubbed environment)\nstatus 3")
		x := e.start(t, "exit75", nil)
		_, err = x.invoke(t, nil, "")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", ExitCode: 75, Message: "exit status 75"})
		// With a step context too, when no fnbridge call said the attempt
		// ended: the function's own 75 is not called a suspension.
		a := e.Open(t, &stepctxtest.Journal{})
		_, err = x.invoke(t, a, "")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", ExitCode: 75, Message: "exit status 75"})
		if a.Err() != nil {
			t.Fatalf("the attempt ended (%v), want it open", a.Err())
		}
	})

	// Rule: payloads and arguments with shell metacharacters are data.
	t.Run("metacharacters", func(t *testing.T) {
		s := e.start(t, "meta", nil)
		payload, err := json.Marshal("x $(touch pwned) `touch pwned` ; touch pwned | * \" ' \\ \n end")
		if err != nil {
			t.Fatal(err)
		}
		j := &stepctxtest.Journal{}
		res, err := s.invoke(t, e.Open(t, j), string(payload))
		// The step prints the payload, the call echoes it back.
		steptest.MustOutput(t, res, err, string(payload)+"\n"+string(payload))
		if en := j.Entries(); len(en) != 2 || en[0].Name != "step "+string(payload) || string(en[1].Call.Input) != string(payload) {
			t.Fatalf("journal = %+v, want the step named after the payload and the call with it as input", en)
		}
		if _, err := os.Stat(filepath.Join(s.f.Dir, "pwned")); err == nil {
			t.Fatal("a metacharacter in the payload ran as shell code")
		}
	})
}

// Rule: without a bridge executable (the default outside the bridge, or
// NoContextCommand) there is no fnbridge on PATH; a file that makes the
// context variables readonly fails to register; a step context that the
// request cannot carry is refused before anything runs.
func TestStepsSetup(t *testing.T) {
	for _, opts := range []bash.Options{{}, {ContextCommand: "/bin/sh", NoContextCommand: true}} {
		f := conformance.NewFixture(t, "steps.which_fnbridge", map[string]string{"steps.sh": stepsSh})
		opts.Grace = adaptertest.Grace
		f.A = bash.New(opts)
		if got := string(f.MustInvoke(t, f.Start(t), "").Output); got != "none" {
			t.Fatalf("options %+v: command -v fnbridge = %q, want none", opts, got)
		}
	}

	for _, ro := range []string{"FNBRIDGE_CONTEXT", "FNBRIDGE_KEY", "TRACEPARENT"} {
		f := conformance.NewFixture(t, "ro.main", map[string]string{"ro.sh": "readonly " + ro + "=x\nmain() { :; }\n"})
		if err := f.StartErr(t); !strings.Contains(err.Error(), "ro.sh makes FNBRIDGE_CONTEXT, FNBRIDGE_CONTEXT_TOKEN or one of FNBRIDGE_KEY, TRACEPARENT, TRACESTATE readonly") {
			t.Fatalf("readonly %s: Start = %v, want the readonly variables named", ro, err)
		}
	}

	f := conformance.NewFixture(t, "steps.env_of", map[string]string{"steps.sh": stepsSh})
	w := f.Start(t)
	for _, sc := range []functionruntime.StepContext{
		{Address: "unix:///x y", Token: "t"}, {Address: "unix:///x", Token: "a\nb"}, {Address: "unix:///x"},
		{Address: "unix:///" + strings.Repeat("x", 9990), Token: "t"},
	} {
		inv := f.Invocation("inv-1", nil)
		inv.Context = &sc
		if _, err := w.Invoke(context.Background(), inv); err == nil || !strings.Contains(err.Error(), "step context") {
			t.Fatalf("step context %+v: %v, want it refused", sc, err)
		}
	}
	steptest.MustOutput(t, f.MustInvoke(t, w, ""), nil, "unset unset unset")
}

// badVar is the shell function's refusal of --var NAME, as the inshell
// handler prints it.
func badVar(name string) string {
	return "fnbridge: run --var " + name + ": not a shell variable name (letters, digits and _, not first a digit); usage: fnbridge run [--var VAR] NAME -- CMD [ARG...]\nbadvar 2\n"
}

// runUsage is the shell function's usage error saying why, as the
// inshell handler prints it.
func runUsage(why string) string {
	return "fnbridge: " + why + "; usage: fnbridge run [--var VAR] NAME -- CMD [ARG...]\nusage 2\n"
}
