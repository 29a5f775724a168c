# The Bash side of the Signup workflow of TestKeyed (shared handlers of
# the workflow, durability: steps): approve resolves the promise "approval"
# that the workflow's run waits on with its input; deny rejects it with a
# reason.

approve() {
  fnbridge promise resolve approval "$1" || exit
  echo '{"resolved":true}'
}

deny() {
  fnbridge promise reject approval "not on the guest list" || exit
  echo '{"rejected":true}'
}
true
