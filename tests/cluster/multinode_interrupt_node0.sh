#!/usr/bin/env bash
# Ctrl-C on a node that runs workers (here node 0 of a torchrun-style job, which also serves the
# rendezvous) reaches every other node's workers at once, not after this node's own grace
# period: node 0's worker ignores SIGTERM, so node 0 needs its whole --grace_period (20 s) to end,
# while node 1's worker must be signalled within a few seconds. Both nodes exit 130.
source "$(dirname "$0")/multinode_lib.sh"
write_worker worker.sh '
if [ "$RANK" = 0 ]; then
  trap "date +%s%3N >\"$T/got.0\"" INT TERM   # noted, then ignored: only SIGKILL ends it
else
  trap "date +%s%3N >\"$T/got.\$RANK\"; exit 0" INT TERM
fi
touch "$T/up.$RANK"
while :; do "$T/sleep" 1 & wait $!; done'

port=$(random_port)
for i in 1 2; do
  start_mlrun_on "$i" --nnodes=2 --node_rank=$((i - 1)) --master_addr=$NET.11 \
    --master_port="$port" --nproc_per_node=1 --grace_period=20 "$T/worker.sh"
done
wait_until 120 files_at_least "$T/up.*" 2 || fail "the 2 workers did not start"
# Node 0's mlrun: the first process running $MLRUN with node rank 0 (the next is its lifeline
# fork, which ignores signals).
node0=
for p in $(pgrep -f -- "--node_rank=0 .*$T/worker.sh" || true); do
  if [ "$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | head -1)" = "$MLRUN" ]; then
    node0=$p
    break
  fi
done
[ -n "$node0" ] || fail "cannot find node 0's mlrun"
start=$(now_ms)
kill -INT "$node0"
wait_until 10 test -s "$T/got.1" ||
  fail "node 1's worker was not signalled within 10 s of SIGINT on node 0 (grace period 20 s)"
took=$(($(cat "$T/got.1") - start))
[ -s "$T/got.0" ] || fail "node 0's worker was not signalled"
for i in 1 2; do
  rc=0
  wait "${NODE_PIDS[i]}" || rc=$?
  [ $rc -eq 130 ] || fail "the node on host$i exited $rc, expected 130"
done
expect_grep "$T/node2.out" "job aborted: interrupted: SIGINT on node 0 "
assert_no_job_left 15
echo "ok: SIGINT on node 0 reached node 1's worker in ${took} ms; both nodes exited 130"
