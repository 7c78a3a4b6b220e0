#!/usr/bin/env bash
# --nnodes=1:2 --max_restarts=2 on 2 hosts: rank 1 fails in the first two attempts; every node
# restarts, the workers see TORCHELASTIC_RESTART_COUNT 0, 1, 2, each attempt is a new round,
# and no round ever sees a previous round's keys or NCCL IDs (the probe checks its keys; the
# test compares the IDs).
source "$(dirname "$0")/elastic_lib.sh"
[ -x "${MLRUN_ELASTIC_PROBE:-}" ] || fail "MLRUN_ELASTIC_PROBE must name the built probe"
ln -s "$MLRUN_ELASTIC_PROBE" "$T/probe"
write_worker w.sh 'out=$("$T/probe") || { echo "$out"; exit 2; }
echo "$out host=$(hostname)" >>"$T/probes"
if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ]; then
  # Rank 0 records this attempt before the failure tears it down (bounded: 5 s).
  for _ in $(seq 100); do grep -q "rank=0 round=$MLRUN_RDZV_ROUND " "$T/probes" && break; sleep 0.05; done
  echo "failing on purpose" >&2
  exit 3
fi
exit 0'
start_node 1 1:2 --nproc_per_node=1 --max_restarts=2 "$T/w.sh"
start_node 2 1:2 --nproc_per_node=1 --max_restarts=2 "$T/w.sh"
for i in 1 2; do
  wait_node "$i" 90
  [ "$RC" -eq 0 ] || fail "the node on host$i exited $RC"
done
gather
cat "$T/probes"
for n in 0 1 2; do
  [ "$(grep -c "restart=$n " "$T/probes")" -eq 2 ] || fail "not 2 ranks with restart count $n"
done
[ "$(grep -c 'restart=3' "$T/probes")" -eq 0 ] || fail "a fourth attempt ran"
# Every attempt its own round, every rank of a round the same NCCL ID, no ID twice.
rounds=$(sed -E 's/.* round=([0-9]+) .*/\1/' "$T/probes" | sort -un | wc -l)
[ "$rounds" -eq 3 ] || fail "3 attempts ran in $rounds rounds"
per_round=$(sed -E 's/.* round=([0-9]+) .* nccl=([^ ]+) .*/\1 \2/' "$T/probes" | sort -u | wc -l)
[ "$per_round" -eq 3 ] || fail "the ranks of a round disagree on the NCCL ID"
ids=$(sed -E 's/.* nccl=([^ ]+) .*/\1/' "$T/probes" | sort -u)
if [ "$ids" != unavailable ]; then
  [ "$(echo "$ids" | wc -l)" -eq 3 ] || fail "an NCCL ID was reused across rounds: $ids"
else
  echo "note: NCCL cannot make IDs here; keys checked, IDs not"
fi
expect_grep "$T/node1.out" 'restarting every node.s workers \(1 of 2 restarts\)'
expect_grep "$T/node1.out" 'restarting every node.s workers \(2 of 2 restarts\)'
assert_no_job_left 15
echo "ok: 2 restarts across 2 elastic nodes, counts 0-2 seen, 3 rounds with fresh keys and IDs"
