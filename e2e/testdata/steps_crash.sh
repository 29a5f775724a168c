# A 4-step durable function (durability: steps). Each step appends a line
# to steps_sh.log when it executes; step 3 then blocks until the file
# "release" exists (the e2e test SIGKILLs the bridge meanwhile). A recorded
# step is replayed, not executed, so its line is never written again.
four() {
  local s1 s2 s3 s4
  s1=$(fnbridge run step1 -- bash -c 'echo "step1 $$" >>steps_sh.log; echo "\"one-$$\""') || exit
  s2=$(fnbridge run step2 -- bash -c 'echo "step2 $$" >>steps_sh.log; echo "\"two-$$\""') || exit
  s3=$(fnbridge run step3 -- bash -c '
    echo "step3 $$" >>steps_sh.log
    for _ in $(seq 3000); do [ -e release ] && break; sleep 0.02; done
    [ -e release ] || { echo "step 3: no release file" >&2; exit 1; }
    echo "\"three-$$\""') || exit
  s4=$(fnbridge run step4 -- bash -c 'echo "step4 $$" >>steps_sh.log; echo "\"four-$$\""') || exit
  printf '{"input":%s,"steps":[%s,%s,%s,%s]}\n' "$1" "$s1" "$s2" "$s3" "$s4"
}
true
