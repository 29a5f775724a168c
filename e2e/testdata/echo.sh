respond() { printf '{"echo":%s}\n' "$1"; }
