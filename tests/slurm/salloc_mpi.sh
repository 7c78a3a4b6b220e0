#!/usr/bin/env bash
# --backend mpi in `salloc -N3` with no host flags: mlrun hands the allocation's nodes to Open
# MPI's mpirun, which starts its daemons through Slurm (its plm/slurm, srun); one MPI world of 6,
# 2 ranks a node in node order. Without a rank count per node it is a clear error.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
[ -x "${MLRUN_MPI_ALLREDUCE:-}" ] || { echo "SKIP: mpi_allreduce was not built"; exit 77; }
no_leak_check_for_mpi
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
# --store mlrun (the default): the ranks on sn01 and sn02 are TCPStore clients of mlrun's server
# (real torch 1.13), reached at the address the allocation's nodes route to.
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  cat >"$T/store.py" <<'PY'
import datetime, os, sys
from torch.distributed import TCPStore
assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True", "not mlrun's store"
rank, world = os.environ["OMPI_COMM_WORLD_RANK"], int(os.environ["WORLD_SIZE"])
s = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
             datetime.timedelta(seconds=30))
s.set(f"rank/{rank}", os.uname().nodename)
s.wait([f"rank/{r}" for r in range(world)])
peers = " ".join(s.get(f"rank/{r}").decode() for r in range(world))
# One write: Open MPI tags each piece of a line written in several.
sys.stdout.write(f"rank {rank} on {os.uname().nodename}: store ok, peers on {peers}\n")
sys.stdout.flush()
PY
  rc=0
  in_t salloc -N2 -J "$MARKER" -Q timeout 120 "$MLRUN" --backend mpi --nproc_per_node=1 \
    --no_python /usr/bin/python3 "$T/store.py" >"$T/out3" 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "--backend mpi through mlrun's store exited $rc: $(cat "$T/out3")"
  for r in 0 1; do
    expect_grep "$T/out3" "^\[$r\] rank $r on sn0$((r + 1)): store ok, peers on sn01 sn02$"
  done
else
  echo "SKIP (store part): /usr/bin/python3 cannot import torch"
fi
assert_no_job_left 15
echo "ok: one MPI world of 6 on sn01..sn03 through mpirun inside the allocation"
