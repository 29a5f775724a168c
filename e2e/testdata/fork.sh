# The background child outlives the invocation; it prints its PID.
spawn() { sleep 300 & printf '{"child":%d}\n' "$!"; }
