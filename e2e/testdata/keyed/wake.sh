# An awakeable awaited by a Bash function (durability: steps), for
# TestKeyed, the twin of wake.py: every attempt appends a line to
# TAG.attempts; the step "announce" appends the awakeable's id to TAG.id
# once; `fnbridge await` prints the value, or exits 100 when the awakeable
# was rejected or the invocation cancelled (its message, on stderr, goes to
# TAG.err). stop cancels the invocation its input names. call_park calls
# the Python park of the service its input names and waits for it:
# cancelling call_park cancels that call too.

park() {
  local tag id value rc
  [[ $1 =~ \"tag\":\"([A-Za-z0-9_-]+)\" ]] || { echo "no tag in $1" >&2; exit 100; }
  tag=${BASH_REMATCH[1]}
  echo "attempt $$" >>"$tag.attempts"
  id=$(fnbridge awakeable) || exit
  fnbridge run announce -- bash -c 'printf "%s\n" "$2" >>"$1"; echo true' announce "$tag.id" "$id" >/dev/null || exit
  value=$(fnbridge await "$id" 2>"$tag.err")
  rc=$?
  case $rc in
    0) printf '{"value":%s}\n' "$value" ;;
    100) printf '{"rejected":true,"status":%d}\n' "$rc" ;;
    *) exit "$rc" ;;
  esac
}

stop() {
  local id
  [[ $1 =~ \"id\":\"(inv_[A-Za-z0-9]+)\" ]] || { echo "no id in $1" >&2; exit 100; }
  id=${BASH_REMATCH[1]}
  fnbridge cancel "$id" || exit
  printf '{"cancelled":"%s"}\n' "$id"
}

call_park() {
  local tag service out rc
  [[ $1 =~ \"tag\":\"([A-Za-z0-9_-]+)\" ]] || { echo "no tag in $1" >&2; exit 100; }
  tag=${BASH_REMATCH[1]}
  [[ $1 =~ \"service\":\"([A-Za-z0-9_]+)\" ]] || { echo "no service in $1" >&2; exit 100; }
  service=${BASH_REMATCH[1]}
  out=$(fnbridge call "$service/py" "{\"tag\":\"$tag\"}" 2>"$tag.parent.err")
  rc=$?
  case $rc in
    0) printf '{"child":%s}\n' "$out" ;;
    100) printf '{"parent":"cancelled","status":%d}\n' "$rc" ;;
    *) exit "$rc" ;;
  esac
}
true
