# --backend mpi: the job runs under Open MPI's mpirun with a real MPI world of the planned size;
# output is re-tagged by rank, mlrun's variables reach every rank, the user's NCCL_IB_DISABLE
# wins over mlrun's default, and a failing rank's exit code comes back with a summary.
source "$(dirname "$0")/common.sh"

command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
PROG="$SRC/../build/examples/mpi_allreduce/mpi_allreduce"
[ -x "${MLRUN_MPI_ALLREDUCE:-}" ] && PROG=$MLRUN_MPI_ALLREDUCE
[ -x "$PROG" ] || { echo "SKIP: mpi_allreduce was not built"; exit 77; }
no_leak_check_for_mpi

# 1. Four ranks, one MPI world: every rank sees size 4 and the right sum.
"$MLRUN" --backend mpi -np 4 "$PROG" 4 >"$T/out" 2>"$T/err" || fail "exit $? for a good MPI job"
for r in 0 1 2 3; do
  grep -qx "\[$r\] rank $r/4 on .*: allreduce sum 6 == n(n-1)/2 ok" "$T/out" ||
    fail "rank $r's line missing or wrong"
done
[ "$(grep -c . "$T/out")" -eq 4 ] || fail "expected exactly 4 lines"

# 2. mlrun's variables reach every rank through -x; per-rank ones come from Open MPI; a value
#    the user set wins over mlrun's default.
cat >"$T/env.sh" <<'SH'
echo "rank=$OMPI_COMM_WORLD_RANK size=$OMPI_COMM_WORLD_SIZE ws=$WORLD_SIZE backend=$MLRUN_BACKEND ib=$NCCL_IB_DISABLE x=$FOO job=${MLRUN_JOB_ID:+set}"
SH
NCCL_IB_DISABLE=0 "$MLRUN" --backend mpi -np 2 -x FOO=bar --no_python /bin/sh "$T/env.sh" \
  >"$T/out" 2>"$T/err" || fail "exit $? for the environment job"
for r in 0 1; do
  grep -qx "\[$r\] rank=$r size=2 ws=2 backend=mpi ib=0 x=bar job=set" "$T/out" ||
    fail "rank $r environment: $(grep "^\[$r\]" "$T/out")"
done

# 3. A world of the wrong size fails every rank: mpirun's exit code (1) comes back, with a summary
#    that names mpirun and shows its last lines.
"$MLRUN" --backend mpi -np 4 "$PROG" 5 >"$T/out" 2>"$T/err"
code=$?
[ "$code" -eq 1 ] || fail "exit $code for a failing MPI job, want 1"
grep -q "^mlrun: job failed: mpirun (pid [0-9]*) ended with exit code 1" "$T/err" ||
  fail "no summary for the failed MPI job"
assert_no_marker_left 10
