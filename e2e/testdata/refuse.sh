refuse() {
  echo call >> calls_sh.log
  echo "order refused by bash" >&2
  exit 100
}

# A terminal failure with a code (the caller's HTTP status at the ingress).
refuse_code() {
  echo call >> calls_sh_code.log
  local order=
  [[ $1 =~ \"order\":\"([^\"]*)\" ]] && order=${BASH_REMATCH[1]}
  fnbridge fail --code 410 "order $order is gone (bash)"
}
