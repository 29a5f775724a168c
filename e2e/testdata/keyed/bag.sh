# The Bash reader of TestKeyed's lazy-state case: read_sh reads two
# entries, reports an absent one (exit 1, nothing printed) and lists the
# keys, one a line.

read_sh() {
  local alpha gamma missing rc keys
  alpha=$(fnbridge state get alpha) || exit
  gamma=$(fnbridge state get gamma) || exit
  missing=$(fnbridge state get missing)
  rc=$?
  [[ $rc == 1 && -z $missing ]] || { echo "state get missing: exit $rc, printed '$missing'" >&2; exit 100; }
  keys=$(fnbridge state keys) || exit
  keys=${keys//$'\n'/\",\"}
  printf '{"alpha":%s,"gamma":%s,"missing_status":%d,"keys":["%s"]}\n' "$alpha" "$gamma" "$rc" "$keys"
}
true
