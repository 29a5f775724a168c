package bash_test

// handlerSh is the test file h.sh. Each function serves one behaviour under
// test; lifecycle dispatches on $1 (see adaptertest.Adapter.Lifecycle).
const handlerSh = `
echo "sourcing h.sh"
echo "sourcing h.sh, on stderr" >&2
counter=0

dot() { printf '%s.' "$1"; }
argc() { printf '%s' "$#"; }
json() { echo '{"ok": true}'; }
text() { echo "hello world"; }
two_newlines() { printf 'a\n\n'; }
binary() { printf '\xff\xfe'; }
empty() { :; }
leak() {
	printf '%s %s %s' "${LEAKED:-unset}" "$counter" "$PWD"
	LEAKED=yes
	counter=$((counter + 1))
	export EXPORTED=yes
	cd /
}
where() {
	pwd
	[ -z "$1" ] || cd "$1" # the next invocation must not start there
}
env_dump() { env; }
fail() {
	echo "first line" >&2
	echo "something went wrong: $1" >&2
	exit 3
}
terminal() {
	echo "order $1 not found" >&2
	exit 100
}
ret() { return 7; }
outputs() {
	printf '%s' "$1" >>"$FNBRIDGE_OUTPUTS"
	echo done
}
chatty() {
	echo "to stderr" >&2
	echo "[debug] a bracketed level" >&2
	echo '{"level":"warning","message":"a JSON line"}' >&2
	printf 'partial' >&2
	echo out
}
bigline() {
	head -c "$1" /dev/zero | tr '\0' x >&2
	echo >&2
	echo done
}
lifecycle() {
	case $1 in
	pid) printf '%s' "$$" ;;
	sleep)
		: >sleeping
		sleep 60
		;;
	crash)
		# The worker dies while the function still runs. (A function that
		# returns right after may still get its status out, which is then
		# a true report of a function that completed.)
		kill -9 $$
		sleep 60
		;;
	spawn)
		sleep 300 &
		printf '%s' "$!"
		;;
	spawn_quiet)
		sleep 300 >/dev/null 2>&1 &
		printf '%s' "$!"
		;;
	ignore_term)
		trap '' TERM
		: >sleeping
		sleep 300
		;;
	*) printf '%s' "$1" ;;
	esac
}
`

// orphanSh is the handler file of the server-death test (see
// adaptertest.Adapter.Orphans). After "bg" its worker also holds a
// pre-forked idle subshell, which must die with the server too.
const orphanSh = `
run() {
  case $1 in
  bg)
    sleep 60 &
    echo "$$ $BASHPID $!"
    ;;
  long)
    sleep 60 &
    echo "$$ $BASHPID $!" >"$PWD/long.tmp"
    mv "$PWD/long.tmp" "$PWD/long"
    wait
    ;;
  esac
}
`
