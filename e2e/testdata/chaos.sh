work() {
  local re_id='"id":"([A-Za-z0-9_-]+)"' re_n='"n":([0-9]+)' re_s='"sleep":"([0-9.]+)"'
  [[ $1 =~ $re_id ]] || { echo "no id in $1" >&2; exit 100; }
  local id=${BASH_REMATCH[1]}
  [[ $1 =~ $re_n ]] || { echo "no n in $1" >&2; exit 100; }
  local n=${BASH_REMATCH[1]}
  [[ $1 =~ $re_s ]] || { echo "no sleep in $1" >&2; exit 100; }
  local s=${BASH_REMATCH[1]}
  local t=${EPOCHREALTIME/./}000
  local token="$$-$t"
  printf 'start %s %s %s %s\n' "$id" "$$" "$t" "$token" >>"$CHAOS_MARKER"
  sleep "$s"
  printf 'end %s %s %s %s\n' "$id" "$$" "${EPOCHREALTIME/./}000" "$token" >>"$CHAOS_MARKER"
  printf '{"id":"%s","double":%d,"runtime":"bash","exec":"%s"}\n' "$id" $((n * 2)) "$token"
}
