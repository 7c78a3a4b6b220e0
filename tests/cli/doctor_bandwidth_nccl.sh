# mlrun doctor --bandwidth --backend nccl on a host without a GPU (issue 5): every rank fails at
# once with a line naming its rank, its host and the cause (no GPU, or the CUDA runtime / NCCL
# missing), mlrun prints its failure summary, the exit code is non-zero, and nothing of the job
# is left running. The GPU path itself is tools/gpu-check.sh's, on a machine with one.
source "$(dirname "$0")/common.sh"

if compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
  echo "SKIP: this host has a GPU, where the sweep would run (tools/gpu-check.sh checks that)"
  exit 77
fi
# mlrun and the sweep program from the test's own directory: every process of the job then has
# the marker in its argv, and assert_no_marker_left sees all of them.
cp "$MLRUN" "$T/mlrun"
cp "$(dirname "$MLRUN")/mlrun-allreduce-sweep" "$T/mlrun-allreduce-sweep"
MLRUN="$T/mlrun"

start=$(now_ms)
run_mlrun doctor --bandwidth --backend nccl --nproc_per_node 2 -e 1M
elapsed=$(($(now_ms) - start))
cat "$T/err"
expect_rc 1
host=$(hostname)
cause="NCCL sweep (needs a GPU: cudaGetDeviceCount: .+|: cannot load .+ \(tried .+\): .+)"
expect_grep "$T/err" "^mlrun: job failed. First failure: rank [01] \(local rank [01], node 0 "
expect_grep "$T/err" "^    \| allreduce-sweep: rank [01] on $host: $cause$"
# Not the old refusal, and no table: nothing was measured.
! grep -q "not implemented" "$T/err" || fail "the NCCL sweep still says it is not implemented"
! grep -qE '^ +[0-9]+ +[0-9]+ +float' "$T/out" || fail "a table row without a GPU"
# Bounded: a missing GPU is found at once, not after --op-timeout (300 s).
[ "$elapsed" -lt 20000 ] || fail "took $elapsed ms to fail"
assert_no_marker_left 5
echo "PASS ($elapsed ms)"
