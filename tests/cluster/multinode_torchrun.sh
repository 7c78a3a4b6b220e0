#!/usr/bin/env bash
# torchrun-style launch, mlrun run on each host by hand (cluster.sh exec), in parallel:
#  - static: --nnodes=3 --node_rank=i --master_addr=host1 --master_port=P; node 0 serves the
#    rendezvous; ranks follow the node ranks exactly;
#  - dynamic: --rdzv_backend=c10d --rdzv_endpoint=host1:P --rdzv_id=J, no node ranks; node
#    ranks in join order, so every rank 0..5 exactly once, each host's two ranks consecutive.
source "$(dirname "$0")/multinode_lib.sh"
write_worker layout.sh "$LAYOUT_LINE"

# Static.
port=$(random_port)
for i in 1 2 3; do
  start_mlrun_on "$i" --nnodes=3 --node_rank=$((i - 1)) --master_addr=$NET.11 \
    --master_port="$port" --nproc_per_node=2 "$T/layout.sh"
done
wait_nodes static 1 2 3
cat "$T"/node*.out >"$T/out"
check_layout host1:2 host2:2 host3:2
assert_no_job_left 15
echo "ok: static torchrun-style launch on 3 hosts"

# Dynamic: node ranks in join order; MASTER_ADDR is the rendezvous endpoint's host (mlrun's store).
rm -f "$T"/rank.* "$T"/node*.out
write_worker layout.sh "$LAYOUT_LINE
echo \"\$MASTER_ADDR\" >\"\$T/master.\$RANK\""
port=$(random_port)
job="mlrt-$RANDOM$RANDOM"
for i in 1 2 3; do
  start_mlrun_on "$i" --rdzv_backend=c10d --rdzv_endpoint="$NET.11:$port" --rdzv_id="$job" \
    --nnodes=3 --nproc_per_node=2 "$T/layout.sh"
done
wait_nodes dynamic 1 2 3
cat "$T"/node*.out >"$T/out"
# Every rank 0..5 exactly once; each host holds one node's two consecutive ranks.
ranks=$(cat "$T"/rank.* | sed -E 's/.* rank=([0-9]+) .*/\1/' | sort -n | paste -sd' ')
[ "$ranks" = "0 1 2 3 4 5" ] || fail "dynamic: ranks were '$ranks'"
order=()
for g in 0 1 2; do
  h=$(sed -E 's/^host=([^ ]+) .*/\1/' "$T/rank.$((2 * g))")
  order+=("$h:2")
done
hosts_seen=$(printf '%s\n' "${order[@]}" | sort | paste -sd' ')
[ "$hosts_seen" = "host1:2 host2:2 host3:2" ] || fail "dynamic: node order ${order[*]}"
check_layout "${order[@]}"
# With --store mlrun (the default) the store is the rendezvous server at the endpoint, on every
# rank, whichever host is node 0 (as torchrun 2.x shares its c10d rendezvous store).
want_master=$NET.11
masters=$(cat "$T"/master.* | sort -u | paste -sd' ')
[ "$masters" = "$want_master" ] || fail "dynamic: MASTER_ADDR '$masters', want the endpoint's $want_master"
assert_no_job_left 15
echo "ok: dynamic (c10d endpoint) launch on 3 hosts, join order ${order[*]}"
