#!/usr/bin/env bash
# A node's agent SIGKILLed mid-job: every node stops, mlrun exits non-zero, and the summary names
# the lost node and its host. The agent killed is the worker's parent (not its lifeline, a fork
# that names itself `mlrun-lifeline`).
source "$(dirname "$0")/multinode_lib.sh"
write_worker worker.sh '
echo "$$ $PPID $(hostname)" >"$T/pid.$RANK"
"$T/sleep" 1000 &
wait'

start_mlrun -H host1:2,host2:2,host3:2 "$T/worker.sh"
wait_until 120 files_at_least "$T/pid.*" 6 || fail "the 6 workers did not start"
wait_until 30 eval '[ "$(pgrep -fc -- "$T/sleep 1000")" -eq 6 ]' || fail "the workers' children did not start"
# Node 1 is host2 (ranks 2 and 3): its agent is rank 2's parent.
check_agent_of 2 host2
start=$(now_ms)
kill -KILL "$AGENT"
wait_mlrun 60
took=$(($(now_ms) - start))
expect_rc_nonzero
expect_grep "$T/err" 'node 1'
expect_grep "$T/err" 'host2'
assert_no_job_left 15
echo "ok: agent of node 1 killed; mlrun exited $RC after ${took} ms: $(grep -m1 -E 'node 1' "$T/err")"
