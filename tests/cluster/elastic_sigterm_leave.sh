#!/usr/bin/env bash
# SIGTERM to one node of an elastic job (a preempted machine): (1) --nnodes=2:3 on 3 hosts, host3
# gets SIGTERM: it stops its workers and leaves with exit code 143, host1 and host2 continue at 2
# nodes in a new round (no restart spent) and finish; (2) 2 nodes of --nnodes=2:3, host2 gets
# SIGTERM: host1 is left below MIN and ends the job naming the node that left.
source "$(dirname "$0")/elastic_lib.sh"
# Each worker records its node's mlrun (its parent) and the round, then runs long in a round of
# 3 nodes (or of 2, for case 2: GOAL) and briefly otherwise.
write_worker seen.sh 'echo "$PPID" >"$T/node.$(hostname)"
echo "seen host=$(hostname) round=$MLRUN_RDZV_ROUND gws=$GROUP_WORLD_SIZE world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT" >>"$T/seen"
[ "$GROUP_WORLD_SIZE" -eq "$GOAL" ] && exec "$T/sleep" 120
exec "$T/sleep" 1'

export GOAL=3
for i in 1 2 3; do start_node "$i" 2:3 --nproc_per_node=1 "$T/seen.sh"; done
round0() { [ -f "$T/seen" ] && [ "$(grep -c 'round=0 .*gws=3' "$T/seen")" -eq 3 ]; }
wait_until 30 round0 || fail "round 0 of 3 nodes did not start"
node3=$(cat "$T/node.host3")
[ "$(host_of_pid "$node3")" = host3 ] || fail "host3's worker's parent lives on $(host_of_pid "$node3")"
kill -TERM "$node3"
term_at=$(now_ms)
wait_node 3 30
[ "$RC" -eq 143 ] || fail "the node on host3 exited $RC after SIGTERM, not 143"
for i in 1 2; do
  wait_node "$i" 40
  [ "$RC" -eq 0 ] || fail "the node on host$i exited $RC after host3 left"
done
took=$(($(now_ms) - term_at))
gather
[ "$(grep -c 'round=1 .*gws=2 world=2 restart=0' "$T/seen")" -eq 2 ] ||
  fail "round 1 did not run on the 2 remaining nodes: $(cat "$T/seen")"
! grep -q 'host=host3 round=1' "$T/seen" || fail "host3 ran in round 1"
expect_grep "$T/node3.out" 'SIGTERM: this node \(host3#[0-9a-f]+, node [0-9]\) leaves the elastic job'
expect_grep "$T/node1.out" 'node [0-9] \(host3#[0-9a-f]+\) lost: it left the job on SIGTERM'
expect_grep "$T/node1.out" 'no restart spent'
expect_no_grep "$T/out" 'job aborted'
assert_no_job_left 15
echo "ok: host3 left on SIGTERM (exit 143); host1 and host2 went on at 2 nodes and finished ${took} ms later"

# (2) Below MIN: 2 nodes of --nnodes=2:3, one leaves.
PORT=$((PORT + 1)); ENDPOINT="$NET.11:$PORT"; JOB="$JOB-b"
rm -f "$T/seen" "$T"/node.host*
export GOAL=2
CONF=last_call_timeout=1,heartbeat_interval=0.5,heartbeat_timeout=4,join_timeout=60
start_node 1 2:3 --nproc_per_node=1 "$T/seen.sh"
start_node 2 2:3 --nproc_per_node=1 "$T/seen.sh"
round0b() { [ -f "$T/seen" ] && [ "$(grep -c 'round=0 .*gws=2' "$T/seen")" -eq 2 ]; }
wait_until 30 round0b || fail "round 0 of 2 nodes did not start"
kill -TERM "$(cat "$T/node.host2")"
wait_node 2 30
[ "$RC" -eq 143 ] || fail "the node on host2 exited $RC after SIGTERM, not 143"
wait_node 1 30
[ "$RC" -ne 0 ] || fail "host1 succeeded alone under --nnodes=2:3"
expect_grep "$T/node1.out" 'node [01] \(host2#[0-9a-f]+\) lost: it left the job on SIGTERM.*1 node left, fewer than the minimum of --nnodes=2:3'
assert_no_job_left 15
echo "ok: below MIN after host2 left on SIGTERM, host1 ended the job (exit $RC): $(grep -m1 -oE 'node [01] \(host2#[0-9a-f]+\) lost: .*' "$T/node1.out" | cut -c1-200)"
