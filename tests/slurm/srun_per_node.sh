#!/usr/bin/env bash
# The per-node mode: `srun -N3 --ntasks-per-node=1 mlrun --nproc_per_node=2 ...` with no other
# flag. Node count, node rank, the rendezvous on the step's first node and its port, and the job
# id come from Slurm: ranks in node order, one rendezvous for all. A step with two tasks on a node
# is refused.
source "$(dirname "$0")/lib.sh"
cat >"$T/where.sh" <<'SH'
echo "rank $RANK of $WORLD_SIZE on $(hostname) node $GROUP_RANK rdzv $MLRUN_RDZV_ENDPOINT job $MLRUN_JOB_ID"
SH
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 120 srun -N3 --ntasks-per-node=1 "$MLRUN" \
  --nproc_per_node=2 sh "$T/where.sh" >"$T/out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "srun mlrun exited $rc: $(cat "$T/out")"
for r in 0 1 2 3 4 5; do
  expect_grep "$T/out" "^\[$r\] rank $r of 6 on sn0$((r / 2 + 1)) node $((r / 2)) rdzv 10\.78\.0\.11:[0-9]+ job slurm-[0-9]+\.0$"
done
[ "$(grep -o 'rdzv [0-9.:]*' "$T/out" | sort -u | wc -l)" -eq 1 ] || fail "more than one rendezvous"
# Explicit flags win: a port of the user's.
port=$((20000 + RANDOM % 10000))
rc=0
in_t salloc -N2 -J "$MARKER" -Q timeout 120 srun -N2 --ntasks-per-node=1 "$MLRUN" \
  --nproc_per_node=1 --master_port="$port" sh "$T/where.sh" >"$T/out2" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "srun mlrun --master_port exited $rc: $(cat "$T/out2")"
expect_grep "$T/out2" "^\[1\] rank 1 of 2 on sn02 node 1 rdzv 10\.78\.0\.11:$port "
# One task per GPU (`srun -n3`, two of them on sn01) is refused on every task, at once, with
# the variable, the node and the command to use; no worker runs.
rc=0
in_t salloc -N2 -J "$MARKER" -Q timeout 60 srun -N2 -n3 "$MLRUN" --nproc_per_node=1 \
  sh "$T/where.sh" >"$T/out3" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "srun -n3 mlrun exited $rc, not 2: $(cat "$T/out3")"
[ "$(grep -c "^mlrun: error: SLURM_STEP_TASKS_PER_NODE=2,1: this srun step runs 2 tasks on a node (sn01), .*srun --ntasks-per-node=1 mlrun" "$T/out3")" -eq 3 ] ||
  fail "not one error per task naming sn01: $(cat "$T/out3")"
if grep -q "^\[.*\] rank" "$T/out3"; then fail "a worker ran: $(cat "$T/out3")"; fi
assert_no_job_left 15
echo "ok: per-node mode, 6 ranks, one rendezvous; several tasks on a node refused"
