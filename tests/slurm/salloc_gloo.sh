#!/usr/bin/env bash
# The Gloo example (mlrun's rendezvous as Gloo's store, a ring allreduce) in `salloc -N3` with no
# host flags and no --nproc_per_node: one worker a node (the nodes have no GPUs), 3 ranks, each
# allreduce correct.
source "$(dirname "$0")/lib.sh"
[ -n "${MLRUN_GLOO_ALLREDUCE:-}" ] || { echo "SKIP: the Gloo example was not built"; exit 77; }
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 120 "$MLRUN" --no_python "$MLRUN_GLOO_ALLREDUCE" \
  >"$T/out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "mlrun exited $rc: $(cat "$T/out")"
for r in 0 1 2; do
  expect_grep "$T/out" "^\[$r\] gloo_allreduce: rank $r of 3: allreduce of [0-9]+ elements correct"
done
assert_no_job_left 15
echo "ok: 3 ranks, one a node, allreduce correct"
