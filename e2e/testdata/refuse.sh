refuse() {
  echo call >> calls_sh.log
  echo "order refused by bash" >&2
  exit 100
}
