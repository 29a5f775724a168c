# The Bash counter object of TestKeyed and TestChaos (type:
# virtual_object). add (exclusive, durability: steps) adds its input, a
# whole number, to the key's "count" state and answers the value before and
# after, so the test can chain every add of a key from 0 to the total. Each
# attempt of an add appends "attempt INVOCATION_ID" to add.attempts, and
# one that the file "block" holds between its read and its write also
# "between INVOCATION_ID". get (shared) reads the count; whoami
# (durability: function) answers its key, which is all a function-mode
# handler of an object may know, and how a state read fails there.

add() {
  local n=$1 key before after rc id
  [[ $n =~ ^[0-9]+$ ]] || { echo "add wants a whole number, got: $n" >&2; exit 100; }
  key=$(fnbridge key) || exit
  # Code outside steps runs on every attempt: one line per attempt.
  id=$(fnbridge invocation-id) || exit
  echo "attempt $id" >>add.attempts
  # Absent state prints nothing and exits 1; anything else but 0 stops.
  before=$(fnbridge state get count); rc=$?
  case $rc in
    0) ;;
    1) [[ -z $before ]] || exit 1; before=0 ;;
    *) exit "$rc" ;;
  esac
  # Between the read and the write: while the file "block" exists, wait
  # (the test SIGKILLs the bridge here).
  if [[ -e block ]]; then
    echo "between $id" >>add.attempts
    for _ in $(seq 3000); do [[ -e block ]] || break; sleep 0.02; done
    [[ ! -e block ]] || { echo "add: still blocked after 60s" >&2; exit 1; }
  fi
  after=$((before + n))
  fnbridge state set count "$after" || exit
  printf '{"key":"%s","before":%d,"after":%d,"runtime":"bash"}\n' "$key" "$before" "$after"
}

get() {
  local count
  count=$(fnbridge state get count) || count=0
  printf '{"key":"%s","count":%s}\n' "$(fnbridge key)" "$count"
}

whoami() {
  local err rc
  err=$(fnbridge state get count 2>&1 >/dev/null)
  rc=$?
  printf '{"env":"%s","command":"%s","state_status":%d,"state_error":"%s"}\n' "$FNBRIDGE_KEY" "$(fnbridge key)" "$rc" "${err//\"/\'}"
}
true
