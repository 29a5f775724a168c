# inline.count: counts its calls in a global of the worker's shell and
# says whether it ran in that shell itself ($BASHPID is $$) or in a
# subshell; {"exit":true} exits after answering.
n=0
count() {
	local same=false
	n=$((n + 1))
	[[ $BASHPID != "$$" ]] || same=true
	printf '{"n":%d,"same_shell":%s}\n' "$n" "$same"
	[[ $1 != '{"exit":true}' ]] || exit 0
}
