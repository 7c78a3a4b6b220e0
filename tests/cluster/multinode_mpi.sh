#!/usr/bin/env bash
# --backend mpi across the namespace hosts (issue 5): mlrun hands the job to Open MPI's mpirun
# with a generated hostfile; the MPI program sees one world of 4 ranks over 2 hosts, laid out
# host by host, and its output comes back re-tagged by rank.
source "$(dirname "$0")/multinode_lib.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
[ -x "${MLRUN_MPI_ALLREDUCE:-}" ] || { echo "SKIP: mpi_allreduce was not built"; exit 77; }
# Open MPI starts its daemons over OpenSSH, which takes the test cluster's config this way.
export OMPI_MCA_plm_rsh_agent="ssh -F $MLRUN_CLUSTER_SSH_CONFIG"
run_mlrun --backend mpi -H $NET.11:2,$NET.12:2 "$MLRUN_MPI_ALLREDUCE" 4
[ "$RC" -eq 0 ] || fail "exit $RC"
for r in 0 1 2 3; do
  grep -qx "\[$r\] rank $r/4 on host$((r / 2 + 1)): allreduce sum 6 == n(n-1)/2 ok" "$T/out" ||
    fail "rank $r's line is missing or wrong"
done
echo "ok: one MPI world of 4 on host1 and host2 through mlrun --backend mpi"

# --store mlrun (the default): the ranks on host1 and host2 are TCPStore clients of mlrun's
# server on the head (RANK from OMPI_COMM_WORLD_RANK); a real torch 1.13 client on host3,
# outside the job, is refused and logged with its address.
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import torch, torch.distributed' 2>/dev/null; then
  echo "SKIP (store part): $PYTHON cannot import torch (apt-get install python3-torch)"
  exit 0
fi
cp "$(dirname "$0")/store_worker.py" "$T/store_worker.py"
start_mlrun --backend mpi -H $NET.11:1,$NET.12:1 --no_python "$PYTHON" "$T/store_worker.py" "$T"
wait_until 90 eval 'test -e "$T/master" || ! mlrun_running'
test -e "$T/master" || fail "the ranks never met in the store: $(tail -n 5 "$T/err")"
read -r addr port <"$T/master"
expect_store_refuses_host3 "$addr" "$port"
touch "$T/go"
wait_mlrun 120
expect_rc 0
expect_grep "$T/out" '^\[0\] worker 0 on host1 served by the store$'
expect_grep "$T/out" '^\[1\] worker 1 on host2 served by the store$'
echo "ok: mpirun's ranks on host1 and host2 served by mlrun's store; host3 refused"
