# A 3-step durable function (durability: steps) with a durable sleep
# between steps 1 and 2, run by a remote `bridge runtime serve`. Each step
# runs steps_remote_mark.sh, which appends "<tag> <step> <pid> <ancestor
# pids>" to remote_sh.log when it executes (a replayed step writes nothing).
three() {
  local tag secs s1 s2 s3
  [[ $1 =~ \"tag\":\"([A-Za-z0-9-]+)\" ]] || { echo "no tag in $1" >&2; exit 100; }
  tag=${BASH_REMATCH[1]}
  [[ $1 =~ \"sleep\":\"([0-9a-z]+)\" ]] || { echo "no sleep in $1" >&2; exit 100; }
  secs=${BASH_REMATCH[1]}
  s1=$(fnbridge run step1 -- bash ./steps_remote_mark.sh remote_sh.log "$tag" step1) || exit
  fnbridge sleep "$secs" || exit
  s2=$(fnbridge run step2 -- bash ./steps_remote_mark.sh remote_sh.log "$tag" step2) || exit
  s3=$(fnbridge run step3 -- bash ./steps_remote_mark.sh remote_sh.log "$tag" step3) || exit
  printf '{"tag":"%s","steps":[%s,%s,%s]}\n' "$tag" "$s1" "$s2" "$s3"
}
true
