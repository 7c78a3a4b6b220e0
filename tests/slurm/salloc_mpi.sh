#!/usr/bin/env bash
# --backend mpi in `salloc -N3` with no host flags: mlrun hands the allocation's nodes to Open
# MPI's mpirun, which starts its daemons through Slurm (its plm/slurm, srun); one MPI world of 6,
# 2 ranks a node in node order. Without a rank count per node it is a clear error.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
[ -x "${MLRUN_MPI_ALLREDUCE:-}" ] || { echo "SKIP: mpi_allreduce was not built"; exit 77; }
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 120 "$MLRUN" --backend mpi --nproc_per_node=2 \
  "$MLRUN_MPI_ALLREDUCE" 6 >"$T/out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "mlrun --backend mpi exited $rc: $(cat "$T/out")"
for r in 0 1 2 3 4 5; do
  expect_grep "$T/out" "^\[$r\] rank $r/6 on sn0$((r / 2 + 1)): allreduce sum 15 == n\(n-1\)/2 ok$"
done
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 60 "$MLRUN" --backend mpi "$MLRUN_MPI_ALLREDUCE" 3 \
  >"$T/out2" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "no rank count: expected exit 2, got $rc: $(cat "$T/out2")"
expect_grep "$T/out2" 'mlrun: error: --backend mpi in a Slurm allocation: .*give --nproc_per_node'
assert_no_job_left 15
echo "ok: one MPI world of 6 on sn01..sn03 through mpirun inside the allocation"
