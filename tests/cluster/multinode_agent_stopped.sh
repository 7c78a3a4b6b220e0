#!/usr/bin/env bash
# A node's agent SIGSTOPped mid-job (a hung node: its TCP connections stay open, the kernel still
# answers keepalive): its heartbeats stop, the server aborts the job naming the node within
# heartbeat_timeout (3 s here), every node stops its workers and mlrun exits non-zero; once the
# head closes the stopped agent's SSH channel, the agent's lifeline SIGKILLs it (the grace period
# and 10 s later) and its workers with it: nothing of the job is left on any host.
source "$(dirname "$0")/multinode_lib.sh"
write_worker worker.sh '
echo "$$ $PPID $(hostname)" >"$T/pid.$RANK"
"$T/sleep" 1000 &
wait'

start_mlrun -H host1:2,host2:2,host3:2 --grace_period=2 \
  --rdzv_conf heartbeat_interval=0.5,heartbeat_timeout=3 "$T/worker.sh"
wait_until 120 files_at_least "$T/pid.*" 6 || fail "the 6 workers did not start"
wait_until 30 eval '[ "$(pgrep -fc -- "$T/sleep 1000")" -eq 6 ]' || fail "the workers' children did not start"
# Node 1 is host2 (ranks 2 and 3): its agent is rank 2's parent.
check_agent_of 2 host2
agent=$AGENT
start=$(now_ms)
kill -STOP "$agent"
wait_mlrun 60
took=$(($(now_ms) - start))
expect_rc_nonzero
expect_grep "$T/err" 'node 1 \(host2\) lost: no heartbeat for [0-9.]+ s \(heartbeat_timeout 3\.0 s\), last heard from at [0-9:]+'
grep -q '^State:.*T' "/proc/$agent/status" 2>/dev/null || echo "note: the agent was gone when the head ended"
# The stopped agent and everything under it: gone once its lifeline has given it the grace
# period and 10 s after the head closed its channel.
assert_no_job_left 40
# Killed: gone, or a zombie its parent (sshd, or whoever adopted it) has not reaped yet.
state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$agent/status" 2>/dev/null || true)
[ -z "$state" ] || [ "$state" = Z ] || fail "the stopped agent (pid $agent) still exists, state $state"
left=$(($(now_ms) - start))
echo "ok: agent of node 1 stopped; mlrun exited $RC after ${took} ms, nothing left after ${left} ms: $(grep -m1 -E 'node 1 \(host2\) lost' "$T/err")"
