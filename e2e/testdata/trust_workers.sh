# Handlers of e2e/trust_workers_test.go. run dispatches on its JSON string
# input "function tag": arm_* (invocation 1) leaves a background job that,
# once victim (invocation 2) runs, attacks it with everything it can
# reach; the victim waits (bounded) until the attack is done, so it always
# lands inside it. Marker files are named by the tag.

await() { local i; for ((i = 0; i < 2000; i++)); do [[ -e $PWD/$1 ]] && return 0; sleep 0.01; done; return 1; }

arm_status() {
	local tag=$1 loop=$$ out=${__fnb_out-} seq=${__fnb_seq-0} tok=${__fnb_tok-}
	(
		await "$tag-victim-running"
		for fd in 1 $out; do
			for line in "R 0" "D 0" "R $((seq + 1)) $tok 0" "D $((seq + 1)) $tok 0" "R $seq $tok 0"; do
				printf '%s\n' "$line" >"/proc/$loop/fd/$fd"
			done
		done
		: >"$PWD/$tag-forged"
	) </dev/null >/dev/null 2>&1 &
	printf '"armed"'
}

arm_files() {
	local tag=$1 me=$BASHPID out outputs=$FNBRIDGE_OUTPUTS
	out=$(readlink "/proc/$me/fd/1")
	(
		await "$tag-victim-running"
		printf 'FORGED' >>"$out"
		printf 'FORGED' >>"${outputs%/*}/stdout"
		echo "stolen=1" >>"$outputs"
		echo "stolen=1" >>"$FNBRIDGE_OUTPUTS"
		: >"$PWD/$tag-forged"
	) </dev/null >/dev/null 2>&1 &
	printf '"armed"'
}

# The first attempt waits for the attack; should the attack end the worker
# (a forged status line does), Restate retries, and the retry answers at
# once.
victim() {
	local tag=$1 first=1
	echo "$tag $BASHPID" >>"$PWD/victim-attempts"
	[[ -e $PWD/$tag-victim-running ]] && first=
	printf '{"victim":"%s"' "$tag"
	echo "mine=2" >>"$FNBRIDGE_OUTPUTS"
	: >"$PWD/$tag-victim-running"
	if [[ $first ]]; then
		await "$tag-forged" || { echo "the late job never attacked" >&2; exit 100; }
	fi
	printf '}'
}

run() {
	local words=${1//\"/}
	local fn=${words%% *} tag=${words#* }
	case $fn in
	arm_status | arm_files | victim) "$fn" "$tag" ;;
	*) printf '{"plain":"%s"}' "$words" ;;
	esac
}

# A 1 MiB payload: $1 intact, the same bytes in $FNBRIDGE_INPUT_FILE, and
# external commands (which could not take it as an argument) read the file.
payload() {
	[[ -f $FNBRIDGE_INPUT_FILE ]] || { echo "FNBRIDGE_INPUT_FILE=${FNBRIDGE_INPUT_FILE-unset} is no file" >&2; exit 100; }
	printf '%s' "$1" | cmp -s - "$FNBRIDGE_INPUT_FILE" || { echo "\$1 and the input file differ" >&2; exit 100; }
	local sum bytes
	sum=$(sha256sum <"$FNBRIDGE_INPUT_FILE") bytes=$(wc -c <"$FNBRIDGE_INPUT_FILE")
	printf '{"arg_bytes":%d,"file_bytes":%d,"sha256":"%s"}' "${#1}" "$bytes" "${sum%% *}"
}
