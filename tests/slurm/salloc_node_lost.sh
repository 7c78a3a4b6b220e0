#!/usr/bin/env bash
# A node lost mid-job. Default: sn02 crashes (its slurmd, agent and workers SIGKILLed); the job
# ends with the node named once Slurm declares the node failed (SlurmdTimeout, 10 s on the test
# cluster; bound 45 s). With the argument "agent": only sn02's agent is SIGKILLed (its slurmd
# lives); srun reports the task at once (bound 15 s). Either way nothing of the job is left.
source "$(dirname "$0")/lib.sh"
case="${1:-crash}"
start_loop_job
bound=45
if [ "$case" = crash ]; then
  "$SLURM_CLUSTER" kill-node 2
  trap '"$SLURM_CLUSTER" start-node 2 >/dev/null; cleanup' EXIT
else
  bound=15
  agent=
  for p in $(ip netns pids mlsl-n2); do
    # The agent itself, a child of slurmstepd (not its lifeline fork, which has its argv too).
    if [ "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" = "$MLRUN agent " ] &&
      [ "$(cat "/proc/$(awk '{print $4}' "/proc/$p/stat")/comm" 2>/dev/null)" = slurmstepd ]; then
      agent=$p
      break
    fi
  done
  [ -n "$agent" ] || fail "no agent on sn02"
  kill -KILL "$agent"
fi
began=$(now_ms)
ended() { ! kill -0 "$SALLOC_PID" 2>/dev/null; }
wait_until "$bound" ended || fail "mlrun still runs $bound s after sn02 was lost: $(cat "$T/out")"
echo "ended $(($(now_ms) - began)) ms after the loss"
rc=0
wait "$SALLOC_PID" || rc=$?
[ $rc -ne 0 ] || fail "mlrun exited 0 after losing a node"
expect_grep "$T/out" 'node 1 \(sn02\) lost'
assert_no_job_left 15
echo "ok ($case): $(grep -o 'node 1 (sn02) lost.*' "$T/out" | head -1)"
