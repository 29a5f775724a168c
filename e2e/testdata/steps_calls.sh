# Durable calls between handlers (durability: steps). The input names the
# peer service ("peer") where a handler calls another one.
_field() { # _field NAME JSON: a string or number field of flat JSON
  [[ $2 =~ \"$1\":\"?([A-Za-z0-9_.-]+) ]] && printf '%s' "${BASH_REMATCH[1]}"
}

double() {
  local n d
  n=$(_field n "$1")
  d=$(fnbridge run double -- bash -c 'echo "double $1" >>calls_sh.log; echo $(($1 * 2))' _ "$n") || exit
  printf '{"double":%s,"lang":"bash"}\n' "$d"
}

call_py() {
  local peer n r
  peer=$(_field peer "$1")
  n=$(_field n "$1")
  r=$(fnbridge call "$peer/square" "{\"n\":$n}") || exit
  printf '{"from_python":%s}\n' "$r"
}

refuse() {
  echo refuse >>calls_sh.log
  echo "bash refuses order $(_field order "$1")" >&2
  exit 100
}

through() {
  local peer
  peer=$(_field peer "$1")
  # fnbridge exits 100 when the callee failed terminally; || exit passes
  # that on, so this invocation ends terminally too.
  fnbridge call "$peer/refuse" "$1" || exit
  echo '{"unexpected":"the call returned"}'
}

fanout() {
  local peer h1 h2 any all
  peer=$(_field peer "$1")
  h1=$(fnbridge call --async "$peer/square" '{"n":6}') || exit
  h2=$(fnbridge sleep --async 60s) || exit
  any=$(fnbridge await --any "$h2" "$h1") || exit
  all=$(fnbridge await "$h1") || exit
  local first=timer
  [[ ${any%%$'\n'*} == "$h1" ]] && first=call
  printf '{"first":"%s","first_value":%s,"all":%s}\n' "$first" "${any#*$'\n'}" "$all"
}

stale() {
  # A background process that outlives this invocation tries a context
  # call with the invocation's token once the test creates stale-go.
  (
    for _ in $(seq 1500); do [ -e stale-go ] && break; sleep 0.02; done
    fnbridge random >stale.out 2>&1
    echo "exit=$?" >>stale.out
  ) </dev/null >/dev/null 2>&1 &
  fnbridge run first -- echo '"one"' >/dev/null || exit
  echo '{"ok":true}'
}
true
