#!/usr/bin/env bash
# mlrun with no host flags inside `salloc -N3`: the allocation's nodes in SLURM_JOB_NODELIST
# order, 2 workers each (--nproc_per_node), ranks 0-1 on sn01, 2-3 on sn02, 4-5 on sn03, every
# worker's MASTER_ADDR the head's address 10.78.0.1, where mlrun's rendezvous server is PyTorch's
# store (--store mlrun, docs/torch-store.md); --dry-run names the transport and why. Without
# --nproc_per_node, one worker per node (no GPUs) and a -v story with no made-up world size.
source "$(dirname "$0")/lib.sh"
cat >"$T/where.sh" <<'SH'
echo "rank $RANK of $WORLD_SIZE on $(hostname) local $LOCAL_RANK node $GROUP_RANK master $MASTER_ADDR"
SH
in_t salloc -N3 -J "$MARKER" -Q timeout 60 "$MLRUN" --dry-run --nproc_per_node=2 sh "$T/where.sh" \
  >"$T/dry" 2>&1 || fail "dry run failed: $(cat "$T/dry")"
expect_grep "$T/dry" '^transport: slurm \(inside Slurm allocation [0-9]+ \(SLURM_JOB_ID\) with no --hostfile/-H'
expect_grep "$T/dry" '^node 1 \(sn02\): ranks 2-3, agent through srun$'
# --exclude, --nnodes and -np apply to the allocation's nodes as to a hostfile's.
in_t salloc -N3 -J "$MARKER" -Q timeout 60 "$MLRUN" --dry-run --nproc_per_node=2 --exclude sn02 \
  sh "$T/where.sh" >"$T/dry2" 2>&1 || fail "dry run --exclude failed: $(cat "$T/dry2")"
expect_grep "$T/dry2" '^node 1 \(sn03\): ranks 2-3, agent through srun$'
in_t salloc -N3 -J "$MARKER" -Q timeout 60 "$MLRUN" --dry-run --nproc_per_node=2 --nnodes=2 \
  -np 3 sh "$T/where.sh" >"$T/dry3" 2>&1 || fail "dry run --nnodes failed: $(cat "$T/dry3")"
expect_grep "$T/dry3" '^node 1 \(sn02\): ranks 2-2, agent through srun$'
expect_no_grep "$T/dry3" 'sn03'
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 60 "$MLRUN" --dry-run --nnodes=4 sh "$T/where.sh" \
  >"$T/dry4" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "--nnodes=4 in 3 nodes: expected exit 2, got $rc"
expect_grep "$T/dry4" '^mlrun: error: --nnodes=4: the allocation has 3 nodes$'
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 120 "$MLRUN" --nproc_per_node=2 sh "$T/where.sh" \
  >"$T/out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "mlrun exited $rc: $(cat "$T/out")"
for r in 0 1 2 3 4 5; do
  node=$((r / 2 + 1))
  expect_grep "$T/out" "^\[$r\] rank $r of 6 on sn0$node local $((r % 2)) node $((node - 1)) master 10\.78\.0\.1$"
done
[ "$(grep -c ' rank ' "$T/out")" -eq 6 ] || fail "not 6 workers: $(cat "$T/out")"
# Without --nproc_per_node each node counts its own GPUs (none here: one worker each): the head
# does not know the world, and its -v story says so instead of a wrong total.
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 120 "$MLRUN" -v sh "$T/where.sh" >"$T/gpus" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "mlrun -v exited $rc: $(cat "$T/gpus")"
expect_grep "$T/gpus" "info: job [0-9a-f]+: 3 nodes, world size from each node's GPUs, backend gloo$"
expect_grep "$T/gpus" 'info: ranks joined 1 so far: 1/3 nodes after [0-9.]+ s$'
expect_grep "$T/gpus" 'info: ranks joined 3: 3/3 nodes after [0-9.]+ s$'
[ "$(grep -c ' rank ' "$T/gpus")" -eq 3 ] || fail "not 3 workers: $(cat "$T/gpus")"
assert_no_job_left 15
echo "ok: 6 ranks on sn01..sn03 as the allocation says; 3 without --nproc_per_node"
