# The steps-mode Bash function of TestChaos (durability: steps): three
# journaled steps (fnbridge run), each appending "start ID STEP PID NS
# TOKEN" to CHAOS_STEPS_MARKER when it begins and "end ID STEP PID NS TOKEN"
# when its work is done (O_APPEND, one write per line). PID is the worker
# ($$ of the function), passed to the step's process. A step prints
# "PART TOKEN": its journaled value, which a recorded step prints again
# without running, so the output names the execution of each step Restate
# journaled.

# chaos_steps_step ID STEP K N SLEEP WORKER_PID: one step's process.
chaos_steps_step='
t=${EPOCHREALTIME/./}000
token="$6-$t"
printf "start %s %s %s %s %s\n" "$1" "$2" "$6" "$t" "$token" >>"$CHAOS_STEPS_MARKER"
sleep "$5"
printf "end %s %s %s %s %s\n" "$1" "$2" "$6" "${EPOCHREALTIME/./}000" "$token" >>"$CHAOS_STEPS_MARKER"
printf "%d %s\n" $(($3 * $4)) "$token"
'

work() {
  local re_id='"id":"([A-Za-z0-9_-]+)"' re_n='"n":([0-9]+)' re_s='"sleep":"([0-9.]+)"'
  [[ $1 =~ $re_id ]] || { echo "no id in $1" >&2; exit 100; }
  local id=${BASH_REMATCH[1]}
  [[ $1 =~ $re_n ]] || { echo "no n in $1" >&2; exit 100; }
  local n=${BASH_REMATCH[1]}
  [[ $1 =~ $re_s ]] || { echo "no sleep in $1" >&2; exit 100; }
  local s=${BASH_REMATCH[1]}
  # The sleep is split over the three steps (milliseconds, for bash).
  local ms=$(( (10#${s%.*} * 1000 + 10#${s#*.}) / 3 ))
  local step_sleep
  printf -v step_sleep '%d.%03d' $((ms / 1000)) $((ms % 1000))
  local total=0 execs="" k v
  for k in 1 2 3; do
    v=$(fnbridge run "s$k" -- bash -c "$chaos_steps_step" step "$id" "s$k" "$k" "$n" "$step_sleep" "$$") || exit
    total=$((total + ${v%% *}))
    execs+="${execs:+,}\"${v#* }\""
  done
  printf '{"id":"%s","total":%d,"runtime":"bash","steps":[%s]}\n' "$id" "$total" "$execs"
}
