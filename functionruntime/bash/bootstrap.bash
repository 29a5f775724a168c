# fnbridge bash worker bootstrap. It is embedded in the fnbridge binary,
# written to the worker's scratch directory and sourced by the stub in
# adapter.go:
#
#   bash --noprofile --norc -c <stub> fnbridge-bash-worker SCRATCH/worker.bash FILE FUNCTION SCRATCH MODE
#
# MODE is "subshell" (each invocation in a subshell of its own) or
# "inline" (each in the worker's own shell, see __fnb_inline). This
# script uses bash 4.4's ${var@a} and 4.2's [[ -v ]]; the stub refuses
# an older bash before sourcing it.
#
# The wire protocol is described in the Go package documentation
# (functionruntime/bash). Everything runs inside __fnb_main, which is parsed
# in full before the handler file is sourced, so aliases or functions that
# file defines cannot change how this script is read; builtins are called
# through `builtin` (or `command exec`, as `builtin exec` would undo its
# redirections) so functions named like them cannot intercept them. The
# handler string and the payload are only ever expanded inside double
# quotes: never evaluated as code.

# fnbridge in the invocation's own shell (durability: steps). `fnbridge run`
# takes its steps through the worker's step agent (`fnbridge agent`, see
# cmd/bridge/ctx_agent.go), started by the first step and kept for the
# worker's life, so a step costs no process of its own, and a builtin CMD
# (printf, echo, true, false, test, :) runs in the shell; --var VAR assigns
# the value instead of printing it (no $(...) subshell either). Every other
# command, and every other shell ($(...), pipelines, background jobs and
# children, whose $BASHPID differs), uses the fnbridge command on PATH, so
# two shells never share the agent. Like the command, CMD's arguments are
# data: never evaluated. Defined as fnbridge in every invocation's shell;
# without a step context only `fnbridge fail` (below) is its own, there
# and in the shell's subshells.
#
# The functions a step runs are kept short, their rare branches in
# functions of their own: bash copies a function's whole body on every
# call (and frees it after), which for the one long function this was
# cost about a twentieth of a step.
__fnb_fnbridge() {
	if [[ $- == *x* ]]; then
		# The function's xtrace shows its fnbridge line, not the ~60 lines
		# of this script a step runs (among them the attempt's token).
		builtin set +x
		__fnb_xs=0
		__fnb_fnbridge "$@" || __fnb_xs=$?
		builtin set -x
		builtin return "$__fnb_xs"
	fi
	if [[ ${1-} == run && $BASHPID == "${__fnb_ishell-}" && -n ${FNBRIDGE_CONTEXT-} ]]; then
		builtin shift
		__fnb_run "$@"
	elif [[ ${1-} == fail && -n ${__fnb_ishell-} ]]; then
		builtin shift
		__fnb_fail "$@"
	else
		command "${__fnb_bin:-fnbridge}" "$@"
	fi
}

# __fnb_run [--var VAR] NAME -- CMD [ARG...]: a step in the invocation's
# own shell.
__fnb_run() {
	# __fnb_nested: this step is taken while another's is open (from a
	# trap handler of the function, run between two commands of that
	# step): its __fnb_instep, seen here before this step's own hides it.
	# The answer's fields are this step's own too: a trap handler's step
	# must not change the kind this one acts on.
	builtin local __fnb_nested="${__fnb_instep-}" __fnb_instep= __fnb_var= __fnb_name __fnb_rc __fnb_v= __fnb_srq= __fnb_k= __fnb_st= __fnb_m=
	case ${1-} in
	--var)
		__fnb_var=${2-}
		builtin shift 2 || builtin shift
		[[ -n $__fnb_var ]] || __fnb_var=-  # an empty VAR: a usage error below
		;;
	--var=*)
		__fnb_var=${1#--var=}
		builtin shift
		[[ -n $__fnb_var ]] || __fnb_var=-
		;;
	esac
	__fnb_name=${1-}
	# VAR is a name: globs over spelled-out ASCII sets (no range, which
	# a locale may widen), a fifth of the cost of a regex, compiled anew
	# by every =~ of every step.
	if [[ ${2-} != -- || $# -lt 3 || -z $__fnb_name || -z $3 || $__fnb_name == *[$'\t\n']* || $__fnb_var == __fnb_* ]] || { [[ -n $__fnb_var ]] &&
		[[ $__fnb_var == [0123456789]* || $__fnb_var == *[!abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_]* ]]; }; then
		__fnb_run_odd "$__fnb_var" "$@"
		builtin return "$?"
	fi
	builtin shift 2
	# Not for a builtin the step runs in the shell, whatever a function of
	# that name: it costs a redirection, a dozen system calls per step.
	if [[ -z ${__fnb_inshell[x$1]-} ]] &&
		builtin declare -F -- "$1" >/dev/null && ! builtin type -P -- "$1" >/dev/null; then
		# exec would say "environment: line N: exec: f: not found" on
		# every attempt: say what a step runs instead.
		builtin printf 'fnbridge: run %s: %s is a shell function; a step runs a program (CMD is never shell code): export -f %s, then fnbridge run %s -- bash -c '\''%s "$@"'\'' %s ARG...\n' "$__fnb_name" "$1" "$1" "$__fnb_name" "$1" "$1" >&2
		builtin return 2
	fi
	if [[ $1 == printf && ${2-} == -v* ]]; then
		# The builtin printf runs in this shell: -v would set a variable
		# that a replay, which runs nothing, would leave unset.
		builtin printf 'fnbridge: run %s: printf -v sets a variable of this shell, which a replay would not set: fnbridge run --var VAR %s -- printf FORMAT [ARG...] assigns the journaled value instead\n' "$__fnb_name" "$__fnb_name" >&2
		builtin return 2
	fi
	if [[ -n $__fnb_nested ]]; then
		__fnb_instep=1 # a trap within this one's is nested too
		__fnb_run_nested "$@"
		builtin return "$?"
	fi
	__fnb_agent || builtin return "$?"
	((++__fnb_rq))
	__fnb_instep=1
	if [[ -n ${__fnb_live-} && ${#__fnb_name} -le 4096 && -n ${__fnb_inshell[x$1]-} ]]; then
		# Nothing to replay (a fresh attempt): the step executes, so its
		# start goes ahead (P, which the agent never answers) and CMD runs
		# at once; Q, naming that start, completes it, and its answer ends
		# the step (P's refusal, should the start not start the run).
		# Only for a builtin CMD, which runs in this shell and starts no
		# process: a program would run before a refusal known at once (a
		# run a child holds) could stop it, and a context call of its
		# children could reach the journal ahead of this step's start.
		# Not for a name that may be over the endpoint's 16 KiB.
		__fnb_srq=$__fnb_rq __fnb_k=x
		builtin printf 'P\t%d.%d\t%s\t%s\t%s\n' "$__fnb_seq" "$__fnb_rq" "$FNBRIDGE_CONTEXT" "$FNBRIDGE_CONTEXT_TOKEN" "$__fnb_name" >&"$__fnb_areq" || __fnb_unsent || builtin return "$?"
	else
		builtin printf 'S\t%d.%d\t%s\t%s\t%s\n' "$__fnb_seq" "$__fnb_rq" "$FNBRIDGE_CONTEXT" "$FNBRIDGE_CONTEXT_TOKEN" "$__fnb_name" >&"$__fnb_areq" || __fnb_unsent || builtin return "$?"
		__fnb_answer || builtin return "$?"
		[[ -n $__fnb_k ]] || __fnb_unread || builtin return "$?"
	fi
	if [[ $__fnb_k == x ]]; then
		# In an if, so that errexit cannot end the shell before the
		# outcome is journaled.
		case ${__fnb_inshell[x$1]-} in
		y)
			if builtin "$@" >|"$__fnb_dir/a.out"; then __fnb_rc=0; else __fnb_rc=$?; fi
			;;
		*)
			# A name that is no program: said as the fnbridge command says
			# it, not as bash's "environment: line N: exec: x: not found".
			if ( [[ $1 == */* ]] || builtin type -P -- "$1" >/dev/null || {
				builtin printf 'fnbridge: run %s: %s: no such program on PATH (a step runs a program, not a shell builtin or function)\n' "$__fnb_name" "$1" >&2
				builtin exit 127
			}
			command exec "$@") >|"$__fnb_dir/a.out" {__fnb_areq}>&- {__fnb_aans}>&-; then __fnb_rc=0; else __fnb_rc=$?; fi
			;;
		esac
		((++__fnb_rq))
		if [[ -n $__fnb_srq ]]; then
			builtin printf 'Q\t%d.%d\t%s\t%s\t%d.%d\t%d\t%s\n' "$__fnb_seq" "$__fnb_rq" "$FNBRIDGE_CONTEXT" "$FNBRIDGE_CONTEXT_TOKEN" "$__fnb_seq" "$__fnb_srq" "$__fnb_rc" "${1//[$'\t\n']/ }" >&"$__fnb_areq" || __fnb_unsent || builtin return "$?"
		else
			builtin printf 'C\t%d.%d\t%s\t%s\t%d\t%s\n' "$__fnb_seq" "$__fnb_rq" "$FNBRIDGE_CONTEXT" "$FNBRIDGE_CONTEXT_TOKEN" "$__fnb_rc" "${1//[$'\t\n']/ }" >&"$__fnb_areq" || __fnb_unsent || builtin return "$?"
		fi
		__fnb_k=
		__fnb_answer || builtin return "$?"
		[[ -n $__fnb_k ]] || __fnb_unread || builtin return "$?"
	fi
	# test, not [[ ]]: a function's nocasematch would let r and o match.
	if [ "$__fnb_k" = R ] || [ "$__fnb_k" = O ]; then
		__fnb_run_nul "$__fnb_var" "$__fnb_name"
		builtin return "$?"
	fi
	if [[ -n $__fnb_var ]]; then
		# Read, then assigned: read fails the same at the value's end
		# (there is no NUL after it) as for a readonly VAR; printf -v
		# fails only for the latter.
		LC_ALL=C IFS= builtin read -r -d '' __fnb_v <"$__fnb_dir/a.val" || :
		# A set variable without attributes (no readonly, integer, array)
		# takes the value without a redirection of bash's own error.
		# (-v first: under set -u, ${!v@a} of an unset v ends the shell.)
		if [[ -v $__fnb_var ]] && [[ -z ${!__fnb_var@a} ]]; then
			builtin printf -v "$__fnb_var" '%s' "$__fnb_v"
		else
			builtin printf -v "$__fnb_var" '%s' "$__fnb_v" 2>/dev/null || __fnb_run_readonly "$__fnb_var" "$__fnb_name" || builtin return "$?"
		fi
	else
		LC_ALL=C IFS= builtin read -r -d '' __fnb_v <"$__fnb_dir/a.val" || :
		builtin printf '%s' "$__fnb_v"
	fi
	builtin return 0
}

# __fnb_run_nested CMD [ARG...]: the step __fnb_run was given, taken from
# a trap handler while this shell's own step is open (its answer perhaps
# half read, its a.out and a.val in use): through the command, on a
# connection of its own, as a child's would be (a builtin CMD runs as
# the program of its name, : as true). --var VAR takes its stdout from a
# file of its own, refused, as in __fnb_run, when it holds a NUL.
__fnb_run_nested() {
	builtin local __fnb_nf="$__fnb_dir/n.$__fnb_seq.$((++__fnb_rq))"
	[[ $1 != : ]] || builtin set -- true "${@:2}"
	if [[ -z $__fnb_var ]]; then
		command "${__fnb_bin:-fnbridge}" run "$__fnb_name" -- "$@"
		builtin return "$?"
	fi
	command "${__fnb_bin:-fnbridge}" run "$__fnb_name" -- "$@" >|"$__fnb_nf" || { __fnb_rc=$?; command "$__fnb_rm" -f -- "$__fnb_nf"; builtin return "$__fnb_rc"; }
	if LC_ALL=C IFS= builtin read -r -d '' __fnb_v <"$__fnb_nf"; then
		command "$__fnb_rm" -f -- "$__fnb_nf"
		builtin printf 'fnbridge: run %s --var: the value holds a NUL byte, which a shell variable cannot; print it instead\n' "$__fnb_name" >&2
		builtin return 2
	fi
	command "$__fnb_rm" -f -- "$__fnb_nf"
	builtin printf -v "$__fnb_var" '%s' "$__fnb_v" 2>/dev/null || __fnb_run_readonly "$__fnb_var" "$__fnb_name"
}

# __fnb_unread: __fnb_answer returned without an answer (a trap handler's
# return ended it): the step's outcome is unknown to this shell.
__fnb_unread() {
	builtin printf 'fnbridge: run %s: a trap handler returned from the wait for the step'"'"'s answer; its outcome is unknown here and the attempt fails\n' "$__fnb_name" >&2
	builtin return 3
}

# __fnb_run_odd VAR NAME [ARG...]: a step __fnb_run does not take itself,
# VAR its --var ("" for none): a usage error, or a NAME with a tab or
# newline, which the FIFO lines cannot carry and the fnbridge command can.
__fnb_run_odd() {
	# Not local __fnb_var=$1: through builtin, local's arguments are
	# split like any command's.
	builtin local __fnb_var
	__fnb_var=$1
	builtin shift
	if [[ $# -eq 1 && -z $__fnb_var && ($1 == --help || $1 == -h) ]]; then
		command "${__fnb_bin:-fnbridge}" run --help  # as from any other shell
		builtin return "$?"
	fi
	if [[ ${2-} != -- || $# -lt 3 || -z ${1-} || -z ${3-} ]]; then
		__fnb_run_usage "$@"
		builtin return 2
	fi
	if [[ $__fnb_var == - ]]; then
		builtin printf 'fnbridge: run --var: VAR is empty (an unset variable?); usage: fnbridge run [--var VAR] NAME -- CMD [ARG...]\n' >&2
		builtin return 2
	elif [[ -n $__fnb_var ]] &&
		[[ $__fnb_var == [0123456789]* || $__fnb_var == *[!abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_]* ]]; then
		builtin printf 'fnbridge: run --var %s: not a shell variable name (letters, digits and _, not first a digit); usage: fnbridge run [--var VAR] NAME -- CMD [ARG...]\n' "$__fnb_var" >&2
		builtin return 2
	fi
	if [[ $__fnb_var == __fnb_* ]]; then
		builtin printf 'fnbridge: run --var %s: names starting with __fnb_ are the worker'"'"'s own; choose another\n' "$__fnb_var" >&2
		builtin return 2
	fi
	if [[ -n $__fnb_var ]]; then
		builtin printf 'fnbridge: run --var: a step name with a tab or newline needs v=$(fnbridge run NAME -- CMD)\n' >&2
		builtin return 2
	fi
	command "${__fnb_bin:-fnbridge}" run "$@"
}

# __fnb_run_usage NAME -- CMD...: says what is wrong with the operands,
# in the words of the command's own check (cmd/bridge/ctx.go, runUsage).
__fnb_run_usage() {
	builtin local __fnb_why
	if (($# == 0)); then
		__fnb_why='run: NAME -- CMD is missing'
	elif [[ $1 == -- ]]; then
		__fnb_why='run: NAME is missing before --'
	elif [[ -z $1 ]]; then
		__fnb_why='run: NAME is empty (an unset variable?)'
	elif (($# == 1)); then
		__fnb_why="run $1: -- CMD is missing after NAME"
	elif [[ $2 != -- && $1 == -* ]]; then
		__fnb_why="run: unknown option $1 (only --var VAR may come before NAME)"
	elif [[ $2 != -- ]]; then
		__fnb_why="run $1: want -- between NAME and CMD, not $2"
	elif (($# > 2)); then
		__fnb_why="run $1: CMD is empty (an unset variable?)"
	else
		__fnb_why="run $1: CMD is missing after --"
	fi
	builtin printf 'fnbridge: %s; usage: fnbridge run [--var VAR] NAME -- CMD [ARG...]\n' "$__fnb_why" >&2
}

# __fnb_run_nul VAR NAME: the step's value holds a NUL byte (the agent's
# answer R or O), which no shell variable holds: printed from the file.
__fnb_run_nul() {
	if [[ -n $1 ]]; then
		builtin printf 'fnbridge: run %s --var: the value holds a NUL byte, which a shell variable cannot; print it instead\n' "$2" >&2
		builtin return 2
	fi
	command "$__fnb_cat" -- "$__fnb_dir/a.val"
}

# __fnb_run_readonly VAR NAME: --var names a variable that cannot be
# assigned (readonly); the step is journaled, its value not assigned.
__fnb_run_readonly() {
	builtin printf 'fnbridge: run %s --var %s: cannot assign the value: the variable is readonly\n' "$2" "$1" >&2
	builtin return 2
}

# __fnb_fail [--code N] MESSAGE...: `fnbridge fail` in the invocation's
# shell and its subshells. It ends the invocation with a terminal failure
# whose code is N (default 500; the caller's HTTP status at Restate's
# ingress) and whose message is MESSAGE, also printed on stderr for the
# log: the record goes to the invocation's own file, which Go reads on
# exit status 100. In a subshell ($(...), a pipeline's part) it ends that
# subshell the same way, so a helper that fails never goes on to print a
# result, and `|| exit` passes the failure on with its code (see g below).
__fnb_fail() {
	builtin local __fnb_code=500 IFS=' '
	case ${1-} in
	--code)
		__fnb_code=${2-}
		builtin shift 2 || builtin shift
		;;
	--code=*)
		__fnb_code=${1#--code=}
		builtin shift
		;;
	esac
	if ! [[ $__fnb_code =~ ^[0-9]{1,5}$ ]] || ((10#$__fnb_code < 1 || 10#$__fnb_code > 65535)); then
		builtin printf 'fnbridge: fail --code %s: want a code from 1 to 65535; failing with 500\n' "$__fnb_code" >&2
		__fnb_code=500
	fi
	# Still terminal without a message, as asked, but never an empty one at
	# the caller (the fnbridge command says the same).
	(($#)) || builtin set -- "the function failed (fnbridge fail was given no message)"
	# The record first: with errexit on, a failed print to a closed stderr
	# would end the shell before it (and || : keeps it from doing so).
	# A subshell's record is g: it stands only if its message is still the
	# last stderr line when the invocation fails (|| exit right after), not
	# after the function handled the subshell's failure and went on.
	if [[ $BASHPID == "$__fnb_ishell" ]]; then
		builtin printf '%d %s' "$((10#$__fnb_code))" "$*" >|"$__fnb_dir/f.$__fnb_f"
	else
		builtin printf '%d %s' "$((10#$__fnb_code))" "$*" >|"$__fnb_dir/g.$__fnb_f"
	fi
	builtin printf '%s\n' "$*" >&2 || :
	builtin exit 100
}

# __fnb_is_agent PID: PID is alive and is this worker's step agent, not a
# process that was given the pid of an agent that died (kill -0 cannot
# tell them apart; /proc/PID/cmdline can: fnbridge agent DIR PID), nor
# another program that took that command line (exec -a) to be sent the
# attempt's token: its executable must be the fnbridge command's.
__fnb_is_agent() {
	builtin kill -0 "$1" 2>/dev/null || builtin return 1
	[[ -e /proc/$$/cmdline ]] || builtin return 0 # no /proc: kill -0 it is
	builtin local __fnb_a0= __fnb_a1= __fnb_a2=
	{ IFS= builtin read -r -d '' __fnb_a0 && IFS= builtin read -r -d '' __fnb_a1 &&
		IFS= builtin read -r -d '' __fnb_a2; } <"/proc/$1/cmdline" 2>/dev/null
	[[ $__fnb_a1 == agent && $__fnb_a2 == "$__fnb_dir" ]] &&
		{ [[ -z $__fnb_bin ]] || [[ /proc/$1/exe -ef $__fnb_bin ]]; }
}

# __fnb_agent opens this shell's FIFOs to the worker's step agent, starting
# the agent when there is none. An agent this shell already speaks to is
# checked by one stat of its stdin (the cheap check, on every step; an
# agent that died is a zombie until the server reaps it, and a zombie has
# no descriptors, where kill -0 would take it for alive): should it die
# and its pid be reused, __fnb_answer's wait tells within 2 s.
__fnb_agent() {
	# An invocation's first step checks the agent in full: in a worker
	# running invocations inline, this shell's descriptors outlive it, and
	# so would a reused pid.
	[[ -n ${__fnb_areq-} && -e /proc/$__fnb_apid/fd/0 ]] && __fnb_fds_ours &&
		{ ((__fnb_rq)) || __fnb_is_agent "$__fnb_apid"; } && builtin return 0
	__fnb_agent_open
}

# __fnb_fds_ours: the descriptors to the step agent are still its FIFOs.
# A redirection of the function's own (a loop's `done 11<file`) may hold
# their numbers for a while; the FIFOs are then opened again, on free
# numbers. Without /proc they are taken to be. (/proc/self is the shell
# that tests: each $BASHPID would cost a getpid.)
__fnb_fds_ours() {
	[[ ! -e /proc/self/fd || (/proc/self/fd/$__fnb_areq -ef $__fnb_dir/a.req && /proc/self/fd/$__fnb_aans -ef $__fnb_dir/a.ans) ]]
}

# __fnb_unsent: a request could not be written to the step agent: said,
# status 3, rather than waiting for an answer that cannot come.
__fnb_unsent() {
	builtin printf 'fnbridge: the request could not reach the step agent (descriptor %s); the attempt fails and Restate retries it\n' "$__fnb_areq" >&2
	__fnb_areq=
	builtin return 3
}

# __fnb_agent_open is __fnb_agent without an agent this shell speaks to.
__fnb_agent_open() {
	builtin local __fnb_l=
	__fnb_apid=
	{ IFS= builtin read -r __fnb_apid <"$__fnb_dir/a.pid"; } 2>/dev/null
	if [[ -z $__fnb_apid || ! -p $__fnb_dir/a.req ]] || ! __fnb_is_agent "$__fnb_apid"; then
		# Through a command substitution whose subshell starts it in the
		# background and exits: the agent is no job of this shell ($! and
		# wait stay the function's), and it prints "ready PID" and closes
		# its stdout, which ends the substitution.
		__fnb_l=$(__fnb_agent_start)
		if [[ $__fnb_l != "ready "[0-9]* ]]; then
			# The agent says why on its stdout ("error ..."), its stderr
			# being discarded.
			builtin printf 'fnbridge: the step agent (fnbridge agent) did not start%s\n' "${__fnb_l:+: ${__fnb_l#error }}" >&2
			builtin return 3
		fi
		__fnb_apid=${__fnb_l#ready }
		builtin printf '%s\n' "$__fnb_apid" >|"$__fnb_dir/a.pid"
	fi
	# The FIFOs this shell opened before, if they are still open on the
	# same numbers (a function's redirection may hold a number now), go
	# first: a worker running invocations inline would keep each pair.
	[[ -z ${__fnb_oreq-} || ! /proc/$BASHPID/fd/$__fnb_oreq -ef $__fnb_dir/a.req ]] || command exec {__fnb_oreq}>&-
	[[ -z ${__fnb_oans-} || ! /proc/$BASHPID/fd/$__fnb_oans -ef $__fnb_dir/a.ans ]] || command exec {__fnb_oans}>&-
	# Read and write: opening a FIFO so never blocks.
	command exec {__fnb_areq}<>"$__fnb_dir/a.req" {__fnb_aans}<>"$__fnb_dir/a.ans"
	__fnb_oreq=$__fnb_areq __fnb_oans=$__fnb_aans
}

# __fnb_agent_start starts the agent with none of this shell's
# descriptors beyond stdin (/dev/null), stdout and stderr (/dev/null): a
# file or lock the function holds at its first step, or a pipe's write
# end, would otherwise stay open in the agent for the worker's life.
__fnb_agent_start() {
	builtin local __fnb_o
	# The function's glob settings must not empty the list (set -f left
	# the pattern unexpanded, GLOBIGNORE=* drops every name): this runs in
	# a command substitution's subshell, so nothing needs restoring.
	builtin set +f
	builtin shopt -u nullglob failglob nocaseglob extglob
	GLOBIGNORE=
	for __fnb_o in "/proc/$BASHPID/fd/"*; do
		__fnb_o=${__fnb_o##*/}
		case $__fnb_o in
		0 | 1 | 2 | *[!0-9]*) ;;
		*) [[ -L /proc/$BASHPID/fd/$__fnb_o ]] && command exec {__fnb_o}>&- ;;
		esac
	done
	command exec "${__fnb_bin:-fnbridge}" agent "$__fnb_dir" "$$" </dev/null 2>/dev/null &
}

# __fnb_answer reads the agent's answer to this shell's last request
# (nonce $__fnb_seq.$__fnb_rq: the worker's count of invocations, which
# no other invocation of it shares, and the request's): __fnb_st,
# __fnb_k, __fnb_m; an error answer prints its message and returns its
# status. Every branch but the first answer being this request's success
# is __fnb_answer_more's.
#
# Bash reads a FIFO a byte at a time, and under -t each byte costs a
# pselect and two sigprocmask more: the wait, bounded so that a dead
# agent is noticed, is for the answer's first byte, and the rest of its
# line, which the agent writes with it in one write, is read without -t.
# A TMOUT the function set would time that read too (a fraction of a
# second may end it mid-line): then the line is read as one.
__fnb_answer() {
	builtin local __fnb_rc=0 __fnb_n __fnb_n2= __fnb_my="$__fnb_seq.$__fnb_rq"
	# In a list, so that errexit cannot end the shell on a timeout.
	if [[ -z ${TMOUT-} ]]; then
		IFS= builtin read -r -t 2 -N 1 -u "$__fnb_aans" __fnb_n &&
			IFS=$'\t' builtin read -r -u "$__fnb_aans" __fnb_n2 __fnb_st __fnb_k __fnb_m || __fnb_rc=$?
		__fnb_n+=$__fnb_n2
	else
		IFS=$'\t' builtin read -r -t 2 -u "$__fnb_aans" __fnb_n __fnb_st __fnb_k __fnb_m || __fnb_rc=$?
	fi
	[[ $__fnb_rc == 0 && $__fnb_n == "$__fnb_my" && $__fnb_k != e ]] || __fnb_answer_more "$__fnb_rc"
}

# __fnb_answer_more STATUS goes on from __fnb_answer's read, whose status
# was STATUS (its line in __fnb_n and the rest). An answer with another
# nonce is skipped: the agent wrote it for a shell killed while it waited
# (an earlier invocation of this worker), and it is nobody's now.
__fnb_answer_more() {
	builtin local __fnb_rc
	__fnb_rc=$1
	while :; do
		if ((__fnb_rc == 0)); then
			[[ $__fnb_n == "$__fnb_my" ]] && break
		elif ((__fnb_rc <= 128)) || ! __fnb_is_agent "$__fnb_apid"; then
			# A timeout only means a slow answer while the agent lives.
			builtin printf 'fnbridge: the step agent (pid %s) is gone\n' "$__fnb_apid" >&2
			__fnb_areq=
			builtin return 3
		fi
		IFS=$'\t' builtin read -r -t 2 -u "$__fnb_aans" __fnb_n __fnb_st __fnb_k __fnb_m && __fnb_rc=0 || __fnb_rc=$?
	done
	if [[ $__fnb_k == e ]]; then
		[[ -z $__fnb_m ]] || builtin printf 'fnbridge: %s\n' "$__fnb_m" >&2
		builtin return "$__fnb_st"
	fi
	builtin return 0
}

# __fnb_request_extras reads what a request header's letter announces
# (see __fnb_invocation): out of __fnb_invocation, whose body bash copies
# on every invocation, as most requests have neither.
__fnb_request_extras() {
	# A letter and 11 digits of length, then what the letter
	# says: c the step context, e the per-invocation
	# environment, b both (context first). Both are exported
	# for this invocation (and its children) only.
	__fnb_x=${__fnb_len:0:1} __fnb_len=${__fnb_len:1}
	# Durable steps: "<address> <token>" after its length as 4
	# digits.
	if [[ $__fnb_x != e ]]; then
		if ! IFS= builtin read -r -N 4 -u "$__fnb_in" __fnb_o || [[ $__fnb_o == *[!0-9]* ]] ||
			! IFS= builtin read -r -N "$((10#$__fnb_o))" -u "$__fnb_in" __fnb_o ||
			[[ $__fnb_o != [!\ ]*\ [!\ ]* ]]; then
			__fnb_malformed context
		fi
		# " fresh" after the token: the attempt replays nothing, so every
		# step executes and __fnb_run sends its start ahead.
		[[ $__fnb_o != *" fresh" ]] || __fnb_live=1 __fnb_o=${__fnb_o% fresh}
		builtin export FNBRIDGE_CONTEXT="${__fnb_o%% *}" FNBRIDGE_CONTEXT_TOKEN="${__fnb_o#* }"
	fi
	# The environment: the count of entries as 1 digit, then
	# each entry's length as 5 digits and NAME=VALUE, NAME
	# from the allow-list (Go checked it too). The entry is
	# one word to export: its value is never evaluated.
	if [[ $__fnb_x != c ]]; then
		if ! IFS= builtin read -r -N 1 -u "$__fnb_in" __fnb_n || [[ $__fnb_n != [1-9] ]]; then
			__fnb_n=bad
		fi
		while [[ $__fnb_n == [1-9] ]]; do
			if ! IFS= builtin read -r -N 5 -u "$__fnb_in" __fnb_o || [[ $__fnb_o == *[!0-9]* ]] ||
				! IFS= builtin read -r -N "$((10#$__fnb_o))" -u "$__fnb_in" __fnb_o; then
				__fnb_n=bad
				break
			fi
			case $__fnb_o in
			FNBRIDGE_KEY=* | TRACEPARENT=* | TRACESTATE=*)
				# Unset first: an attribute the handler file gave
				# the name (declare -i: arithmetic) must not
				# apply to the caller's value.
				builtin unset -v "${__fnb_o%%=*}"
				builtin export "$__fnb_o"
				;;
			*)
				__fnb_n=bad
				break
				;;
			esac
			__fnb_n=$((__fnb_n - 1))
		done
		if [[ $__fnb_n != 0 ]]; then
			__fnb_malformed environment
		fi
	fi
}

# __fnb_malformed WHAT ends the worker on a malformed request: the
# request's WHAT (header, context, environment) is not what Go writes.
__fnb_malformed() {
	builtin printf 'fnbridge: malformed request %s\n' "$1" >&2
	__fnb_end
}

# __fnb_end ends the whole worker: its process group, not just the
# worker process, which may be dead already.
__fnb_end() {
	builtin kill -KILL 0
	builtin exit 1
}

# __fnb_invocation is one invocation's subshell (see the loop in
# __fnb_main, whose variables it uses). A function rather than the
# subshell's body in place: bash turns a subshell's whole body into
# text on every fork (for its job table) and prints it when the
# subshell is killed, which put the worker's source in the
# invocation's failure message.
__fnb_invocation() {
	# Touch, before the request arrives, the memory the steps after
	# it write: each first write to a page shared with the loop
	# costs a copy-on-write fault, and faulting here, while idle,
	# takes most of them off the invocation's path. Not when the
	# request is already there (calls back to back): then it would
	# only delay it.
	__fnb_payload=prewarm __fnb_len=0 __fnb_hdr=prewarm
	if ! IFS= builtin read -r -t 0 -u "$__fnb_in" __fnb_o; then
		command exec {__fnb_o}>/dev/null
		command exec {__fnb_o}>&-
		builtin : >/dev/null
		for __fnb_o in "${__fnb_reapply[@]}" -; do :; done
	fi

	__fnb_request
	# This invocation's own files, named by its key (the outputs
	# file is created by the first write): a job an earlier
	# invocation left behind only knows paths Go has removed.
	command exec {__fnb_in}<&- {__fnb_out}>&- {__fnb_life}<&- >"$__fnb_dir/s.$__fnb_f"
	__fnb_give
	# The shell whose fnbridge function may use the step agent.
	__fnb_ishell=$BASHPID __fnb_areq= __fnb_aans= __fnb_apid= __fnb_rq=0
	[[ -z $__fnb_traps ]] || builtin eval "$__fnb_traps"
	for __fnb_o in "${__fnb_reapply[@]}"; do
		builtin set -o "$__fnb_o"
	done
	"$__fnb_fn" "$__fnb_payload"
	# A function that returned reports its status itself, before the
	# subshell exits, so the answer does not wait for the process
	# teardown and the loop's wakeup. It writes through the loop's
	# descriptors ($$ is the loop's PID), which the function cannot
	# redirect and its background children do not inherit. It does
	# not when the function set an EXIT trap, whose output and log
	# lines still belong to the invocation; `exit`, errexit, exec and
	# signals never get here. In all those cases the loop reports.
	# No trap of ours is set in the subshell: an EXIT trap would
	# make bash catch SIGTERM and friends, run it mid-builtin and
	# flush half-written output. (The group's redirection keeps
	# xtrace off the handler's log; $? still holds the status.)
	{
		__fnb_rc=$?
		builtin set +xv
		builtin trap -p EXIT >|"$__fnb_dir/trap"
		[[ ! -s $__fnb_dir/trap ]] &&
			builtin printf 'R %d %s %d\n' "$__fnb_seq" "$__fnb_tok" "$__fnb_rc" >|"/proc/$$/fd/$__fnb_out"
	} 2>/dev/null
	builtin exit "$__fnb_rc"
}

# __fnb_request reads one invocation's request (see the loop in
# __fnb_main, whose variables it sets): its header, step context and
# environment, and payload.
__fnb_request() {
	# Request: the token (16 bytes), the length as 12 digits, then
	# exactly <length> payload bytes; one read for the header.
	# End of input (the server is gone or done with this worker) or
	# a malformed request, or one without this invocation's token
	# (bytes someone else wrote to the pipe), ends the whole worker:
	# its process group, not just the worker process, which may be
	# dead already.
	IFS= builtin read -r -N 28 -u "$__fnb_in" __fnb_hdr || __fnb_end
	__fnb_len=${__fnb_hdr:16} __fnb_live=
	case ${__fnb_hdr:0:16}:$__fnb_len in
	"$__fnb_tok":[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) ;;
	"$__fnb_tok":[ceb][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9])
		__fnb_request_extras
		;;
	*)
		__fnb_malformed header
		;;
	esac
	__fnb_len=$((10#$__fnb_len))
	__fnb_payload=
	if ((__fnb_len > 0)); then
		# In the C locale (see above): the length counts bytes.
		IFS= builtin read -r -u "$__fnb_in" -N "$__fnb_len" __fnb_payload || __fnb_end
	fi
	# A request the server wrote just before it died must not run:
	# the lifeline reads as ready only at its end (nothing is ever
	# written to it), and the guardian may not have struck yet.
	! builtin read -t 0 -u "$__fnb_life" || __fnb_end
}

# __fnb_give hands the shell over to the function: the locale and TMOUT
# the file left, which the loop keeps off. (Its traps and options are
# given back by the caller itself, right before the function: a RETURN
# trap or functrace would fire as this returns.)
__fnb_give() {
	if [[ $__fnb_lcvar == LC_ALL ]]; then
		LC_ALL=$__fnb_lc
	elif [[ $__fnb_lcset ]]; then
		LC_CTYPE=$__fnb_lc
	else
		builtin unset -v LC_CTYPE
	fi
	if [[ -n $__fnb_tmout ]]; then
		TMOUT=${__fnb_tmout%-}
		[[ -z $__fnb_tmoutx ]] || builtin export TMOUT
	fi
}

# __fnb_inline is one invocation in the worker's own shell (MODE inline,
# the handler's bash.subshell: false; see the loop in __fnb_main, whose
# variables it uses): no process of its own, the fork a subshell costs,
# so what the function leaves in the shell stays for the next one, but
# for what is put back here and in __fnb_call. Whatever would have ended
# its subshell (exit, errexit, exec, a signal, an EXIT trap it set) ends
# the worker instead: Go takes the worker's exit status as the
# invocation's (once the function's stdout file exists: the call began)
# and starts a fresh worker. The loop's own stdout is stderr here, so
# that a signal trap the function left, firing while the worker waits,
# prints to the log rather than into the response pipe.
__fnb_inline() {
	__fnb_x=
	__fnb_request
	__fnb_give
	__fnb_ishell=$BASHPID __fnb_rq=0
	# Defined again: an invocation may have unset or replaced it.
	fnbridge() { __fnb_fnbridge "$@"; }
	# The function, and what must happen in its redirections (see
	# __fnb_main, which defines __fnb_call). Not through eval: errexit
	# ending the shell inside one makes bash print a complaint of its
	# own as the invocation's last line.
	__fnb_call
	# Put back the rest of what the loop needs, and what keeps one
	# invocation's context out of the next: the C locale, the working
	# directory, no TMOUT, no step context or key, and the trace context
	# of the registration. A variable of these the function made readonly
	# would end the shell at its next assignment: the worker ends now
	# instead, after this invocation. Jobs the function left running are
	# disowned, so a later invocation's wait does not wait for them.
	# Each variable is unset first, which also drops any attribute the
	# function gave it (declare -u, -i), then set as the file left it.
	{
		builtin disown -a
		[[ ${LC_ALL@a}${LC_CTYPE@a}${TMOUT@a}${FNBRIDGE_CONTEXT@a}${FNBRIDGE_CONTEXT_TOKEN@a}${FNBRIDGE_KEY@a}${TRACEPARENT@a}${TRACESTATE@a}${FNBRIDGE_OUTPUTS@a}${FNBRIDGE_INPUT_FILE@a} != *r* ]] &&
			builtin unset -v LC_ALL LC_CTYPE TMOUT FNBRIDGE_CONTEXT FNBRIDGE_CONTEXT_TOKEN FNBRIDGE_KEY TRACEPARENT TRACESTATE FNBRIDGE_OUTPUTS FNBRIDGE_INPUT_FILE &&
			builtin export FNBRIDGE_OUTPUTS FNBRIDGE_INPUT_FILE &&
			__fnb_reset LC_ALL "$__fnb_la" "$__fnb_las" && __fnb_reset LC_CTYPE "$__fnb_lt" "$__fnb_lts" &&
			__fnb_reset TRACEPARENT "$__fnb_tp" "$__fnb_tps" && __fnb_reset TRACESTATE "$__fnb_ts" "$__fnb_tss" &&
			if [ "$__fnb_lcvar" = LC_ALL ]; then
				LC_ALL=C
			else
				LC_CTYPE=C
			fi &&
			{ [ "$PWD" = "$__fnb_home" ] || builtin cd -- "$__fnb_home"; }
	} 2>/dev/null || __fnb_inline_end "$__fnb_rc"
	# Unless the function closed every descriptor bash could put the
	# loop's back on.
	builtin printf 'D %d %s %d\n' "$__fnb_seq" "$__fnb_tok" "$__fnb_rc" >&"$__fnb_out" 2>/dev/null || __fnb_inline_end "$__fnb_rc"
}

# __fnb_reset NAME VALUE HOW sets NAME, unset, as the file left it: HOW is
# empty (it was unset), "s" (set) or "x" (set and exported).
__fnb_reset() {
	case $3 in
	x) builtin export "$1=$2" ;;
	s) builtin printf -v "$1" '%s' "$2" ;;
	esac
}

# __fnb_record VALUE HOW NAME records NAME as it is in the variables named
# VALUE and HOW, for __fnb_reset.
__fnb_record() {
	builtin printf -v "$1" '%s' "${!3-}"
	if [[ -z ${!3+s} ]]; then
		builtin printf -v "$2" ''
	elif [[ ${!3@a} == *x* ]]; then
		builtin printf -v "$2" x
	else
		builtin printf -v "$2" s
	fi
}

# __fnb_inline_end STATUS ends the worker after an invocation whose
# function left the shell so that it cannot serve another (a readonly
# locale, TMOUT or FNBRIDGE_ variable, its directory gone): STATUS is the
# invocation's, through the exit status, as for exit.
__fnb_inline_end() {
	builtin printf 'fnbridge: the function left the shell unfit for the next invocation (a readonly LC_ALL, LC_CTYPE, TMOUT, TRACEPARENT, TRACESTATE or FNBRIDGE_ variable, or its working directory gone); the worker starts afresh\n' >&2
	command exec >/dev/null {__fnb_in}<&- {__fnb_out}>&- {__fnb_life}<&-
	builtin exit "$1"
}

__fnb_main() {
	local __fnb_file=$1 __fnb_fn=$2 __fnb_dir=$3 __fnb_mode=$4
	# The builtins a step runs in the shell, looked up by exact name, x
	# first (an empty CMD is no subscript): a function's nocasematch
	# changes [[ == ]] and case, not this.
	local -A __fnb_inshell=([xprintf]=y [xecho]=y [xtrue]=y [xfalse]=y [xtest]=y [x:]=y)
	local __fnb_err __fnb_tp __fnb_tps __fnb_ts __fnb_tss __fnb_la __fnb_las __fnb_lt __fnb_lts __fnb_exit0= __fnb_monitor=
	local __fnb_in __fnb_out __fnb_status __fnb_len __fnb_payload __fnb_rc __fnb_o
	local __fnb_key __fnb_tok __fnb_f __fnb_hdr __fnb_seq=0 __fnb_x __fnb_n __fnb_lc __fnb_lcset __fnb_lcvar __fnb_traps __fnb_home
	local __fnb_tmout= __fnb_tmoutx= __fnb_ie
	local -a __fnb_reapply=()
	builtin set --

	# Move the protocol pipes and the lifeline off fds 3, 4 and 5, out of
	# the handler's way, and close every other descriptor the server may
	# have leaked to us: the worker starts with stdin, stdout, stderr, the
	# protocol pipes and the lifeline only.
	local __fnb_life
	command exec {__fnb_in}<&3 {__fnb_out}>&4 {__fnb_life}<&5 3<&- 4>&- 5<&-
	local __fnb_fd
	for __fnb_fd in /proc/$BASHPID/fd/*; do
		__fnb_fd=${__fnb_fd##*/}
		case $__fnb_fd in
		0 | 1 | 2 | "$__fnb_in" | "$__fnb_out" | "$__fnb_life" | *[!0-9]*) ;;
		*)
			# Skips the descriptor the glob itself used, closed by now. (No
			# redirection on this loop: bash would park a copy of stderr on
			# a descriptor the loop then closes.)
			[[ -L /proc/$BASHPID/fd/$__fnb_fd ]] && command exec {__fnb_fd}>&-
			;;
		esac
	done

	# The guardian (see package proc): only the server holds the lifeline's
	# write end, so reading it ends exactly when the server is gone, and
	# then this whole process group goes, the invocation's subshell and
	# whatever it started included. It holds nothing else open, so it never
	# keeps a pipe alive, and it dies of the group SIGTERM like the rest.
	(
		command exec {__fnb_in}<&- {__fnb_out}>&- </dev/null >/dev/null 2>&1
		builtin read -r -u "$__fnb_life" __fnb_o
		builtin kill -KILL 0
	) &
	# No job an inline invocation's wait could wait for (a subshell has a
	# job table of its own).
	[[ $__fnb_mode != inline ]] || builtin disown $!

	# The fnbridge command by its path, found before the handler file or
	# a function can change PATH, so that their steps still find it.
	__fnb_bin=$(builtin type -P fnbridge) || __fnb_bin=
	# cat (a step value holding a NUL is printed by it) and rm (a nested
	# step's file) the same way, without a fork each: hash looks them up.
	__fnb_cat=cat __fnb_rm=rm
	! builtin hash cat 2>/dev/null || __fnb_cat=${BASH_CMDS[cat]-cat}
	! builtin hash rm 2>/dev/null || __fnb_rm=${BASH_CMDS[rm]-rm}

	# Source the handler file once, without the protocol pipes. A file
	# under set -e that a failing command ends would end the worker with
	# nothing but bash's own complaint about this function's locals; the
	# ERR trap names the file, the line and the status instead (it runs
	# exactly where errexit would exit), and is removed after the source
	# unless the file set its own.
	__fnb_x='__fnb_status=$?; [[ $- != *e* ]] || { builtin printf "fnbridge: %s: line %s: a command failed with status %s, and set -e ended the file\n" "${BASH_SOURCE[0]##*/}" "$LINENO" "$__fnb_status" >&2; builtin exit "$__fnb_status"; }'
	builtin trap "$__fnb_x" ERR
	# Where the function runs: the file may cd at its top level.
	__fnb_home=$PWD
	[[ $__fnb_home == /* && $__fnb_home -ef . ]] || __fnb_home=$(builtin pwd -P)
	builtin source "$__fnb_file" {__fnb_in}<&- {__fnb_out}>&- {__fnb_life}<&-
	__fnb_status=$?
	# builtin and command are how this script reaches bash's own
	# commands: functions of those names in the file would take every
	# read and write of the loop. In POSIX mode, which the assignment
	# alone turns on, special builtins come before functions: export -f
	# tells a function (it fails for a name that is none), unset -f
	# removes it, and unsetting the variable ends POSIX mode (no set,
	# which the file may have made a function too). The file is refused.
	# A file that left POSIX mode on (its variable perhaps readonly, which
	# the assignment would die of) is checked as it is.
	# POSIX mode turns inherit_errexit on, and leaving it does not turn
	# it off: the file's setting is put back with posix off below.
	__fnb_ie=-u
	! builtin shopt -q inherit_errexit || __fnb_ie=-s
	__fnb_o= __fnb_n=
	if [[ :$SHELLOPTS: != *:posix:* ]]; then
		POSIXLY_CORRECT=y
		__fnb_n=on
	fi
	export -f builtin 2>/dev/null && __fnb_o+=" builtin"
	export -f command 2>/dev/null && __fnb_o+=" command"
	unset -f builtin command
	[[ -z $__fnb_n ]] || unset -v POSIXLY_CORRECT
	if [[ -n $__fnb_o ]]; then
		builtin printf 'E shadow%s\n' "$__fnb_o" >&"$__fnb_out"
		builtin exit 1
	fi
	[[ $(builtin trap -p ERR) != "trap -- '$__fnb_x' ERR" ]] || builtin trap - ERR

	# The file may have set options (set -euo pipefail, set -x, ...) that
	# would break this loop: switch them off here and back on inside each
	# invocation's subshell, where they belong. Not posix: it runs special
	# builtins before functions, so a function named eval would be the
	# builtin and the payload code; it stays off (also against
	# POSIXLY_CORRECT).
	for __fnb_o in xtrace verbose errexit nounset pipefail noclobber errtrace functrace allexport; do
		case ":$SHELLOPTS:" in
		*":$__fnb_o:"*)
			__fnb_reapply+=("$__fnb_o")
			builtin set +o "$__fnb_o"
			;;
		esac
	done
	# Switched off first here, xtrace goes back on last in each invocation's
	# shell, so its trace starts at the function, not in this script.
	if [[ ${__fnb_reapply[0]-} == xtrace ]]; then
		__fnb_reapply=("${__fnb_reapply[@]:1}" xtrace)
	fi
	builtin set +o posix
	builtin shopt "$__fnb_ie" inherit_errexit

	if ((__fnb_status != 0)); then
		builtin printf 'E source %d\n' "$__fnb_status" >&"$__fnb_out"
		builtin exit 1
	fi
	# Every invocation's subshell starts in the registered working
	# directory, whatever the file did with cd (a Python worker returns
	# there after its import too).
	if ! builtin cd -- "$__fnb_home" 2>/dev/null; then
		builtin printf 'E cwd\n' >&"$__fnb_out"
		builtin exit 1
	fi
	# The step context and the per-invocation environment are set per
	# invocation only (never readonly, so the export in an invocation's
	# subshell cannot fail). The trace context may come from the
	# registration's env, so it is only tested, in a subshell.
	if ! builtin unset -v FNBRIDGE_CONTEXT FNBRIDGE_CONTEXT_TOKEN FNBRIDGE_KEY 2>/dev/null ||
		! (builtin unset -v TRACEPARENT TRACESTATE) 2>/dev/null; then
		builtin printf 'E readonly\n' >&"$__fnb_out"
		builtin exit 1
	fi
	if ! builtin declare -F -- "$__fnb_fn" >/dev/null; then
		builtin printf 'E nofunc\n' >&"$__fnb_out"
		builtin exit 1
	fi
	# Requests are counted in bytes, so the loop and each subshell read
	# them in the C locale, set once here: each temporary LC_ALL=C costs
	# two setlocale calls, the dearest part of a read. Only LC_CTYPE
	# decides how read counts, and giving one category back costs a
	# fraction of all of them, so the loop switches LC_CTYPE, or LC_ALL
	# when the file set it (it overrides every category). The function
	# gets the variable back as the file left it (set or not, exported
	# or not).
	if [[ -n ${LC_ALL-} ]]; then
		__fnb_lcvar=LC_ALL __fnb_lc=$LC_ALL __fnb_lcset=set
	else
		__fnb_lcvar=LC_CTYPE __fnb_lc=${LC_CTYPE-} __fnb_lcset=${LC_CTYPE+set}
	fi
	if [[ $__fnb_mode == inline ]]; then
		# Both as the file left them, given back after each invocation.
		__fnb_record __fnb_la __fnb_las LC_ALL
		__fnb_record __fnb_lt __fnb_lts LC_CTYPE
	fi
	if ! (builtin unset -v "$__fnb_lcvar") 2>/dev/null; then
		builtin printf 'E readonly %s\n' "$__fnb_lcvar" >&"$__fnb_out"
		builtin exit 1
	fi
	if [[ $__fnb_lcvar == LC_ALL ]]; then
		LC_ALL=C
	else
		LC_CTYPE=C
	fi
	# TMOUT bounds every read without -t: the file's would end this loop's
	# wait for the next request (and the waiting subshell's), and the
	# worker with it, after that many idle seconds. Taken off here, given
	# back (value and export) in each invocation's shell.
	if [[ -n ${TMOUT+set} ]]; then
		__fnb_tmout=${TMOUT}-
		[[ $(builtin declare -p TMOUT 2>/dev/null) != "declare -"*x* ]] || __fnb_tmoutx=x
		if ! builtin unset -v TMOUT 2>/dev/null; then
			builtin printf 'E readonly TMOUT\n' >&"$__fnb_out"
			builtin exit 1
		fi
	fi
	# Each invocation's subshell asks for its EXIT trap (trap -p below),
	# and bash first reads every signal's original disposition, two system
	# calls per signal, unless it knows them already: read them once here,
	# and every subshell inherits them. (It also makes this loop catch the
	# terminating signals, to exit as they would have it exit; a subshell
	# starts with the default dispositions all the same.)
	builtin trap -p EXIT >/dev/null
	# The handler file's ERR, DEBUG and RETURN traps are not this loop's,
	# whose stdout is the response pipe (an ERR trap that echoes would
	# answer for the worker): taken off here. Functions and subshells do
	# not inherit them unless errtrace or functrace is set, so only then
	# are they set again in each invocation's shell.
	__fnb_traps=$(builtin trap -p ERR DEBUG RETURN)
	[[ -z $__fnb_traps ]] || builtin trap - ERR DEBUG RETURN
	# Each name tested on its own: a join of the list would depend on the
	# IFS the file set (strict-mode headers make it a newline and a tab).
	__fnb_n=
	for __fnb_o in "${__fnb_reapply[@]}"; do
		[[ $__fnb_o != errtrace && $__fnb_o != functrace ]] || __fnb_n=y
	done
	[[ -n $__fnb_n ]] || __fnb_traps=
	# From here on this loop's stdout is the response pipe, which saves a
	# redirection per message; each subshell points its own stdout at the
	# output file.
	command exec >&"$__fnb_out"
	# Every invocation's shell has fnbridge as a function (steps, fail),
	# defined once here, after the handler file, for the subshells to
	# inherit.
	fnbridge() { __fnb_fnbridge "$@"; }
	if [[ $__fnb_mode == inline ]]; then
		# The function's stderr, given back after each invocation (one
		# that redirected its own with exec would keep it otherwise), and
		# the trace context the file left, given back after each one (see
		# __fnb_inline).
		command exec {__fnb_err}>&2
		# __fnb_call, defined here to write the descriptors' numbers in:
		# redirections of numbers, unlike those of {variables}, are undone
		# when it returns (an exec of the function's own included), and
		# what it runs inherits none of the loop's descriptors (a child
		# bash forks holds them until it execs): their numbers hold
		# /dev/null meanwhile, rather than being free, so that a
		# descriptor the function opens (exec {fd}>file, the step agent's)
		# never gets one of them and is overwritten as the call returns.
		# The function's stdin is /dev/null, as the worker's. The file's
		# traps and options are given back inside it, and taken off before
		# it returns, so that none of them acts on the loop (a RETURN trap
		# would fire as it returns). The file's EXIT trap is off meanwhile,
		# as in a subshell: an invocation's exit does not run it (its lines
		# would be taken for the invocation's). An EXIT trap the function
		# sets, which its subshell would have run as it ended, ends the
		# worker here, run with the function's options and its stdout
		# still the invocation's.
		builtin eval '__fnb_call() {
	[[ -z $__fnb_exit0 ]] || builtin trap - EXIT
	[[ -z $__fnb_traps ]] || builtin eval "$__fnb_traps"
	for __fnb_o in "${__fnb_reapply[@]}"; do
		builtin set -o "$__fnb_o"
	done
	"$__fnb_fn" "$__fnb_payload"
	{
		__fnb_rc=$? __fnb_n=$-
		builtin set +xv
		builtin trap -p EXIT >|"$__fnb_dir/trap"
	} 2>/dev/null
	if [[ -s $__fnb_dir/trap ]]; then
		[[ $__fnb_n != *v* ]] || builtin set -v
		[[ $__fnb_n != *x* ]] || builtin set -x
		builtin exit "$__fnb_rc"
	fi
	{
		builtin set +euaCETkt +o pipefail +o posix
		[[ -n $__fnb_monitor ]] || builtin set +m
		builtin trap - ERR DEBUG RETURN
		[[ -z $__fnb_exit0 ]] || builtin eval "$__fnb_exit0"
	} 2>/dev/null
} >|"$__fnb_dir/s.$__fnb_f" </dev/null'" 2>&$__fnb_err $__fnb_err<&0 $__fnb_in<&0 $__fnb_out<&0 $__fnb_life<&0"
		__fnb_record __fnb_tp __fnb_tps TRACEPARENT
		__fnb_record __fnb_ts __fnb_tss TRACESTATE
		# The file's own EXIT trap (the worker's, run when it exits: as
		# bash's trap -p prints it, the file's own code, quoted by bash)
		# and job control, which a function's set -m must not leave on:
		# its later jobs would leave the worker's process group.
		builtin trap -p EXIT >|"$__fnb_dir/trap"
		IFS= builtin read -r -d '' __fnb_exit0 <"$__fnb_dir/trap" || :
		[[ $- != *m* ]] || __fnb_monitor=y
	fi
	builtin printf 'K %s\n' "$BASH_VERSION"
	[[ $__fnb_mode != inline ]] || command exec >&2 # see __fnb_inline

	# One subshell per invocation, so `exit N` and variables stay inside it.
	# Each subshell is forked *before* its request arrives and waits for it,
	# which takes the fork off the invocation's critical path. It alone
	# reads the request; this loop only reports how it ended.
	while :; do
		# The next invocation's key, sent by Go ahead of its request: a
		# token that request carries and every status line of it echoes,
		# and the name of its files. Read here, after the last invocation's
		# subshell is gone, so nothing that invocation left behind ever had
		# it in its memory; Go accepts no status line without it.
		if ! IFS= builtin read -r -N 32 -u "$__fnb_in" __fnb_key; then
			builtin kill -KILL 0
			builtin exit 1
		fi
		case $__fnb_key in
		*[!0-9a-f]*)
			builtin printf 'fnbridge: malformed request key\n' >&2
			builtin kill -KILL 0
			builtin exit 1
			;;
		esac
		__fnb_tok=${__fnb_key:0:16} __fnb_f=${__fnb_key:16}
		((++__fnb_seq))
		FNBRIDGE_OUTPUTS=$__fnb_dir/o.$__fnb_f FNBRIDGE_INPUT_FILE=$__fnb_dir/i.$__fnb_f
		if [[ $__fnb_mode == inline ]]; then
			__fnb_inline # it writes its "D"
			continue
		fi
		( __fnb_invocation )
		__fnb_rc=$?
		# "D" always follows, so Go knows this invocation is over.
		builtin printf 'D %d %s %d\n' "$__fnb_seq" "$__fnb_tok" "$__fnb_rc"
	done
}

__fnb_main "$@"
