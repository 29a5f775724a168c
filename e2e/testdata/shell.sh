respond() {
  echo respond >> calls_sh.log
  echo "bash got $1" >&2
  printf '{"input":%s,"lang":"bash"}\n' "$1"
}
