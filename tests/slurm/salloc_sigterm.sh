#!/usr/bin/env bash
# SIGTERM (or Ctrl-C's SIGINT) to mlrun in salloc: the head stops the agents through its own
# channel (the rendezvous), each agent gives its workers SIGTERM and the grace period, and the step
# then ends by itself; srun is never sent TERM/INT (Slurm would SIGKILL every task). Every worker
# got SIGTERM, mlrun exits 143, nothing is left.
source "$(dirname "$0")/lib.sh"
start_loop_job
srun_pid=$(pgrep -P "$HEAD" -x srun | head -1)
[ -n "$srun_pid" ] || fail "no srun under the head"
kill -TERM "$HEAD"
rc=0
wait "$SALLOC_PID" || rc=$?
[ $rc -eq 143 ] || fail "expected exit 143 after SIGTERM, got $rc: $(cat "$T/out")"
for r in 0 1 2 3 4 5; do
  [ -f "$T/term.$r" ] || fail "rank $r got no SIGTERM: $(cat "$T/out")"
done
expect_grep "$T/out" 'job aborted: interrupted: SIGTERM on the head'
expect_no_grep "$T/out" 'sent by Slurm'
# srun ended by itself: Slurm did not cancel the step (it would say so) after a TERM to srun.
expect_no_grep "$T/out" 'Job step aborted|CANCELLED'
assert_no_job_left 15
echo "ok: SIGTERM to mlrun: 6 workers got SIGTERM through the agents, the step ended by itself"
