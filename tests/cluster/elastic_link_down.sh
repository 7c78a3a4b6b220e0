#!/usr/bin/env bash
# --nnodes=2:3 on 3 hosts; host3's link goes down mid-job (a TCP connection that never closes).
# The server stops hearing host3's heartbeats, declares it lost, and host1 and host2 continue
# at 2 nodes in a new round (no restart spent) and finish.
source "$(dirname "$0")/elastic_lib.sh"
restore() { "$CLUSTER" link-up 3 >/dev/null 2>&1 || true; cleanup; }
trap restore EXIT
write_worker seen.sh 'echo "seen host=$(hostname) round=$MLRUN_RDZV_ROUND group=$GROUP_RANK gws=$GROUP_WORLD_SIZE world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT" >>"$T/seen"
[ "$GROUP_WORLD_SIZE" -eq 3 ] && exec "$T/sleep" 120
exec "$T/sleep" 1'

for i in 1 2 3; do start_node "$i" 2:3 --nproc_per_node=1 "$T/seen.sh"; done
round0() { [ -f "$T/seen" ] && [ "$(grep -c 'round=0 .*gws=3' "$T/seen")" -eq 3 ]; }
wait_until 30 round0 || fail "round 0 of 3 nodes did not start"
"$CLUSTER" link-down 3
cut_at=$(now_ms)
for i in 1 2; do
  wait_node "$i" 40
  [ "$RC" -eq 0 ] || fail "the node on host$i exited $RC after host3 was cut off"
done
took=$(($(now_ms) - cut_at))
gather
[ "$(grep -c 'round=1 .*gws=2 world=2 restart=0' "$T/seen")" -eq 2 ] ||
  fail "round 1 did not run on the 2 remaining nodes: $(cat "$T/seen")"
! grep -q 'host=host3 round=1' "$T/seen" || fail "host3 ran in round 1"
expect_grep "$T/node1.out" 'node [0-9]+ \(host3#[0-9a-f]+\) lost: no heartbeat for [0-9.]+ s .*last heard from at [0-9:]+'
expect_grep "$T/node1.out" 'no restart spent'
echo "ok: host3 cut off; host1 and host2 went on at 2 nodes and finished ${took} ms later"
