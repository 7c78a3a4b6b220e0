#!/usr/bin/env bash
# --nnodes=2:3: two hosts start the job (round 0, after the last call), a third arrives later;
# the running nodes notice it and re-rendezvous (round 1) without spending a restart; the two
# first nodes keep their node ranks; the job finishes at 3 nodes.
source "$(dirname "$0")/elastic_lib.sh"
write_worker seen.sh 'echo "seen host=$(hostname) round=$MLRUN_RDZV_ROUND group=$GROUP_RANK gws=$GROUP_WORLD_SIZE world=$WORLD_SIZE rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT" >>"$T/seen"
# Wait for the third node (stopped by the new round), then finish.
[ "$GROUP_WORLD_SIZE" -lt 3 ] && exec "$T/sleep" 120
exit 0'

start_node 1 2:3 --nproc_per_node=2 "$T/seen.sh"
start_node 2 2:3 --nproc_per_node=2 "$T/seen.sh"
round0() { [ -f "$T/seen" ] && [ "$(grep -c 'round=0 .*gws=2 world=4' "$T/seen")" -eq 4 ]; }
wait_until 30 round0 || fail "round 0 of 2 nodes (4 ranks) did not start"
start_node 3 2:3 --nproc_per_node=2 "$T/seen.sh"
for i in 1 2 3; do
  wait_node "$i" 60
  [ "$RC" -eq 0 ] || fail "the node on host$i exited $RC"
done
gather
# Round 1: 3 nodes, 6 ranks, no restart spent.
[ "$(grep -c 'round=1 .*gws=3 world=6 .*restart=0' "$T/seen")" -eq 6 ] ||
  fail "round 1 did not run 6 ranks on 3 nodes with restart 0: $(cat "$T/seen")"
! grep -q 'round=2' "$T/seen" || fail "a third round ran: $(cat "$T/seen")"
expect_grep "$T/out" 'membership changed in round 0 \(host3#[0-9a-f]+ is waiting to join\).*no restart spent'
# Stable node ranks: host1 and host2 keep theirs; host3 takes the next one.
for h in host1 host2; do
  g0=$(grep "host=$h round=0" "$T/seen" | head -n1 | sed -E 's/.* group=([0-9]+) .*/\1/')
  g1=$(grep "host=$h round=1" "$T/seen" | head -n1 | sed -E 's/.* group=([0-9]+) .*/\1/')
  [ "$g0" = "$g1" ] || fail "$h was node $g0 in round 0 and node $g1 in round 1"
done
grep -q 'host=host3 round=1 group=2 ' "$T/seen" || fail "host3 is not node 2 in round 1"
# Ranks of round 1 are contiguous per node (docs/design.md §4).
for g in 0 1 2; do
  r=$(grep "round=1 group=$g " "$T/seen" | sed -E 's/.* rank=([0-9]+) .*/\1/' | sort -n | paste -sd' ')
  [ "$r" = "$((2 * g)) $((2 * g + 1))" ] || fail "node $g of round 1 ran ranks '$r'"
done
assert_no_job_left 15
echo "ok: 2:3 elastic job took in a third node without spending a restart"
