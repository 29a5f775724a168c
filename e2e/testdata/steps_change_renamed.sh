# steps_change.sh with step 1 renamed (first → renamed-first).
change() {
  fnbridge run renamed-first -- bash -c 'echo renamed-first >>change.log; echo 1' >/dev/null || exit
  fnbridge run second -- bash -c 'echo second >>change.log; echo 2' >/dev/null || exit
  echo '{"done":true}'
}
true
