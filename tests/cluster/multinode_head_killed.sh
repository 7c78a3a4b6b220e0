#!/usr/bin/env bash
# The head SIGKILLed: within 5 s no process of the job (workers, their children, agents) is left
# on any host.
source "$(dirname "$0")/multinode_lib.sh"
write_worker worker.sh '
"$T/sleep" 1000 &
( "$T/sleep" 1001 & wait ) &
touch "$T/up.$RANK"
wait'

start_mlrun -H host1:2,host2:2,host3:2 "$T/worker.sh"
wait_until 120 files_at_least "$T/up.*" 6 || fail "the 6 workers did not start"
wait_until 30 eval '[ "$(pgrep -fc -- "$T/sleep 100[01]")" -eq 12 ]' ||
  fail "expected 12 children of workers, pgrep sees $(pgrep -fc -- "$T/sleep 100[01]")"
[ "$(agent_pids | wc -l)" -ge 3 ] || fail "expected an agent on each host: $(describe_pids $(agent_pids))"
kill -KILL "$MLRUN_PID"
start=$(now_ms)
wait "$MLRUN_PID" 2>/dev/null || true
while ! no_job_left && [ $(($(now_ms) - start)) -lt 5000 ]; do sleep 0.05; done
took=$(($(now_ms) - start))
no_job_left || fail "still running ${took} ms after the head's SIGKILL:"$'\n'"$(describe_pids $(job_pids))"
echo "ok: everything gone on every host ${took} ms after the head's SIGKILL"
