#!/usr/bin/env bash
# --backend mpi across the namespace hosts (issue 5): mlrun hands the job to Open MPI's mpirun
# with a generated hostfile; the MPI program sees one world of 4 ranks over 2 hosts, laid out
# host by host, and its output comes back re-tagged by rank.
source "$(dirname "$0")/multinode_lib.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
[ -x "${MLRUN_MPI_ALLREDUCE:-}" ] || { echo "SKIP: mpi_allreduce was not built"; exit 77; }
# Open MPI starts its daemons over OpenSSH, which takes the test cluster's config this way.
export OMPI_MCA_plm_rsh_agent="ssh -F $MLRUN_CLUSTER_SSH_CONFIG"
run_mlrun --backend mpi -H 10.77.0.11:2,10.77.0.12:2 "$MLRUN_MPI_ALLREDUCE" 4
[ "$RC" -eq 0 ] || fail "exit $RC"
for r in 0 1 2 3; do
  grep -qx "\[$r\] rank $r/4 on host$((r / 2 + 1)): allreduce sum 6 == n(n-1)/2 ok" "$T/out" ||
    fail "rank $r's line is missing or wrong"
done
echo "ok: one MPI world of 4 on host1 and host2 through mlrun --backend mpi"
