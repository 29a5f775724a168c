# Example Bash handler for fnbridge: shell.respond "$1" where $1 is the JSON
# input, byte for byte (empty when the invocation has none: null below, so
# the output stays JSON). stdout is the output; stderr goes to the logs.
respond() {
  printf 'echoing %s bytes\n' "${#1}" >&2
  printf '{"runtime":"bash","input":%s}\n' "${1:-null}"
}
