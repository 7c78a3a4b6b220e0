#!/usr/bin/env bash
# A node lost mid-job (sn02 crashes: its slurmd, its agent and workers SIGKILLed): the job ends
# with the node named once Slurm declares the node failed (SlurmdTimeout, 10 s on the test
# cluster; bound 45 s), and nothing of the job is left on the other nodes.
source "$(dirname "$0")/lib.sh"
start_loop_job
"$SLURM_CLUSTER" kill-node 2
trap '"$SLURM_CLUSTER" start-node 2 >/dev/null; cleanup' EXIT
began=$(now_ms)
ended() { ! kill -0 "$SALLOC_PID" 2>/dev/null; }
wait_until 45 ended || fail "mlrun still runs 45 s after sn02 crashed: $(cat "$T/out")"
echo "ended $(($(now_ms) - began)) ms after the crash"
rc=0
wait "$SALLOC_PID" || rc=$?
[ $rc -ne 0 ] || fail "mlrun exited 0 after losing a node"
expect_grep "$T/out" 'node 1 \(sn02\) lost'
assert_no_job_left 15
echo "ok: $(grep -o 'node 1 (sn02) lost.*' "$T/out" | head -1)"
