# Example durable steps in plain Bash (durability: steps): a provisioning
# script whose steps Restate journals. When a step fails, Restate retries
# the invocation, and every step that completed returns its recorded value
# without running again: the script resumes where it failed. No SDK: the
# fnbridge command comes with the runtime.
#
# The payload is the host to provision, e.g. "web-1". Each step's command
# appends a line to /tmp/fnbridge-provision.HOST.log, so you can see what
# ran; the DNS step fails on its first try (as a flaky API would).

provision() {
  local host vm dns cert log
  # The payload is data, never code: keep only what a host name may hold.
  host=$(printf '%s' "$1" | tr -dc 'a-z0-9-')
  [ -n "$host" ] || fnbridge fail --code 400 "want a host name such as \"web-1\", got: $1"
  log=/tmp/fnbridge-provision.$host.log

  # --var assigns the step's value (its command's stdout, trailing
  # newlines kept: print it with printf) to a variable.
  fnbridge run --var vm "create vm" -- sh -c '
    echo "create vm" >>"$1"; printf "vm-%s" "$2"' sh "$log" "$host" || exit

  # Any status but 0 and 100 fails the attempt: Restate retries it.
  fnbridge run --var dns "register dns" -- sh -c '
    if ! grep -q "^register dns" "$1" 2>/dev/null; then
      echo "register dns: timed out" >>"$1"; echo "dns API timed out" >&2; exit 1
    fi
    echo "register dns" >>"$1"; printf "%s.example.com" "$2"' sh "$log" "$host" || exit

  fnbridge run --var cert "issue certificate" -- sh -c '
    echo "issue certificate" >>"$1"; printf "cert-for-%s" "$2"' sh "$log" "$vm" || exit

  printf '{"host":"%s","vm":"%s","dns":"%s","cert":"%s"}\n' "$host" "$vm" "$dns" "$cert"
}
