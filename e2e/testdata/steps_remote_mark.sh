# steps_remote_mark.sh LOG TAG STEP: one executed step of steps_remote.sh.
# Appends "TAG STEP PID ANCESTORS" to LOG and prints the step's JSON value.
log=$1 tag=$2 step=$3
anc="" p=$$
while [ "$p" -gt 1 ]; do
  s=$(</proc/"$p"/stat)
  s=${s##*) }
  read -r _ p _ <<<"$s"
  anc="$anc${anc:+,}$p"
done
echo "$tag $step $$ ${anc:--}" >>"$log"
echo "\"$tag-$step-$$\""
