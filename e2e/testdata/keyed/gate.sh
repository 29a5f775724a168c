# The Bash gate object of TestKeyed (type: virtual_object, durability:
# steps): hold (exclusive) writes "phase" and the id of an awakeable it
# then waits on to the key's state; peek (shared) reads both while hold
# waits; poke (shared) tries to write state and answers how that failed.

_json_string() { # _json_string TEXT: TEXT as a JSON string
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  printf '"%s"' "$s"
}

hold() {
  local id value
  fnbridge state set phase '"holding"' || exit
  id=$(fnbridge awakeable) || exit
  fnbridge state set gate "$(_json_string "$id")" || exit
  value=$(fnbridge await "$id") || exit
  fnbridge state set phase '"released"' || exit
  printf '{"released_with":%s}\n' "$value"
}

peek() {
  local phase gate
  phase=$(fnbridge state get phase) || phase=null
  gate=$(fnbridge state get gate) || gate=null
  printf '{"phase":%s,"gate":%s}\n' "$phase" "$gate"
}

poke() {
  local err rc
  err=$(fnbridge state set phase '"poked"' 2>&1 >/dev/null)
  rc=$?
  printf '{"status":%d,"message":%s}\n' "$rc" "$(_json_string "$err")"
}
true
