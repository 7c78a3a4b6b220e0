#!/usr/bin/env bash
# Nodes started one by one (torchrun style, no head watching them over SSH): host3's link is cut
# mid-job. The rendezvous server (on node 0) finds host3's connection silent within 25 s (TCP
# keepalive and user timeout) and aborts the job naming it; the other nodes stop; host3's own
# node finds the server gone within about 45 s and stops too.
source "$(dirname "$0")/multinode_lib.sh"
trap '"$CLUSTER" link-up 3 >/dev/null 2>&1 || true; cleanup' EXIT
write_worker worker.sh '
echo "$(hostname)" >"$T/up.$RANK"
exec "$T/sleep" 1000'
port=$(random_port)
for i in 1 2 3; do
  start_mlrun_on "$i" --nnodes=3 --node_rank=$((i - 1)) --master_addr=$NET.11 \
    --master_port="$port" --nproc_per_node=1 "$T/worker.sh"
done
wait_until 120 files_at_least "$T/up.*" 3 || fail "the 3 workers did not start"
start=$(now_ms)
"$CLUSTER" link-down 3
for i in 1 2; do
  wait_until 60 eval '! kill -0 '"${NODE_PIDS[i]}"' 2>/dev/null' || fail "the node on host$i still runs 60 s after the cut"
  rc=0
  wait "${NODE_PIDS[i]}" || rc=$?
  [ $rc -ne 0 ] || fail "the node on host$i exited 0"
done
took=$(($(now_ms) - start))
grep -q "member 2 of join group .* ($NET.13:[0-9]*) lost: no answer within 25 s" "$T/node1.out" ||
  fail "node 0's output does not name the lost node"
[ -z "$(job_pids_on 1)$(job_pids_on 2)" ] || fail "host1 or host2 still runs processes of the job"
wait_until 70 eval '[ -z "$(job_pids_on 3)" ]' || fail "host3's node outlived the bound"
echo "ok: host3 cut; host1 and host2 stopped after ${took} ms: $(grep -m1 'lost' "$T/node1.out")"
