#!/usr/bin/env bash
# Nodes started one by one (torchrun style): host3's mlrun is SIGSTOPped mid-job (hung, its
# connections open). Its heartbeats stop and the rendezvous server (on node 0) aborts the job
# naming it within heartbeat_timeout (3 s here); the other nodes stop and exit non-zero. Nobody
# holds a handle on a hung node started by hand: the test ends it itself.
source "$(dirname "$0")/multinode_lib.sh"
write_worker worker.sh '
echo "$PPID" >"$T/node.$(hostname)"
exec "$T/sleep" 1000'
port=$(random_port)
for i in 1 2 3; do
  start_mlrun_on "$i" --nnodes=3 --node_rank=$((i - 1)) --master_addr=$NET.11 \
    --master_port="$port" --nproc_per_node=1 \
    --rdzv_conf heartbeat_interval=0.5,heartbeat_timeout=3 "$T/worker.sh"
done
wait_until 120 files_at_least "$T/node.*" 3 || fail "the 3 workers did not start"
node3=$(cat "$T/node.host3")
[ "$(host_of_pid "$node3")" = host3 ] || fail "host3's worker's parent lives on $(host_of_pid "$node3")"
start=$(now_ms)
kill -STOP "$node3"
for i in 1 2; do
  wait_until 30 eval '! kill -0 '"${NODE_PIDS[i]}"' 2>/dev/null' || fail "the node on host$i still runs 30 s after host3 hung"
  rc=0
  wait "${NODE_PIDS[i]}" || rc=$?
  [ $rc -ne 0 ] || fail "the node on host$i exited 0"
done
took=$(($(now_ms) - start))
expect_grep "$T/node1.out" 'node 2 \(host3\) lost: no heartbeat for [0-9.]+ s \(heartbeat_timeout 3\.0 s\)'
expect_grep "$T/node2.out" 'job aborted: node 2 \(host3\) lost: no heartbeat'
[ -z "$(job_pids_on 1)$(job_pids_on 2)" ] || fail "host1 or host2 still runs processes of the job"
kill -KILL "$node3"
assert_no_job_left 15
echo "ok: host3's node stopped; host1 and host2 ended after ${took} ms: $(grep -m1 'lost' "$T/node1.out" | cut -c1-160)"
