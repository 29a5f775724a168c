# A function that gives up a durable wait: `timeout 1` around a 3 s
# durable sleep, then a step named after what it saw. Giving the wait up
# suspends the invocation until the sleep completes, so the attempt that
# journals the step is one that saw the wait complete, as every replay
# will: the step is "complete", never "gave-up".
giveup() {
  local branch
  if timeout 1 fnbridge sleep 3; then branch=complete; else branch=gave-up; fi
  fnbridge run "$branch" -- bash -c 'echo "$1" >>giveup.log; printf %s "$1"' _ "$branch" >/dev/null || exit
  printf '{"branch":"%s"}\n' "$branch"
}
true
