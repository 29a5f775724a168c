# A two-step function whose attempts fail after step 1 while the file
# fail-after-first exists (so step 1 is journaled and the invocation is
# retried). steps_change_renamed.sh is the same function with step 1
# renamed: replaying this invocation's journal with it is a mismatch.
change() {
  fnbridge run first -- bash -c 'echo first >>change.log; echo 1' >/dev/null || exit
  if [ -e fail-after-first ]; then
    echo "failing after step 1 on purpose" >&2
    exit 3
  fi
  fnbridge run second -- bash -c 'echo second >>change.log; echo 2' >/dev/null || exit
  echo '{"done":true}'
}
true
