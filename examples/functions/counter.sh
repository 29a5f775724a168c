# Example virtual object for fnbridge (type: virtual_object): one count per
# key, kept in Restate's durable state. Both handlers use
# durability: steps, which is what gives them the key's state.

# add is exclusive: Restate runs one add per key at a time, so the read and
# the write below never interleave with another add of the same key.
add() {
  local by=${1:-1} count
  [[ $by =~ ^-?[0-9]+$ ]] || { echo "add wants a whole number, got: $by" >&2; exit 100; }
  count=$(fnbridge state get count) || { rc=$?; [ "$rc" -eq 1 ] || exit "$rc"; count=0; }  # 1: absent; else stop as it did
  count=$((count + by))
  fnbridge state set count "$count" || exit
  echo "$count"
}

# get is shared (shared: true): it runs while an add of the same key is in
# flight, and may read the state but not write it.
get() {
  fnbridge state get count || { rc=$?; [ "$rc" -eq 1 ] || exit "$rc"; echo 0; }  # 1: absent
}
