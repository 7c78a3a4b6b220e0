# mlrun doctor --bandwidth with 2 ranks on this host: the all-reduce sweep runs through mlrun,
# rank 0 prints an all_reduce_perf table (no "[0] " tags), every value is checked, and the link
# comparison says that one host crosses no link. Usage errors come before anything starts.
source "$(dirname "$0")/common.sh"

run_mlrun doctor --bandwidth --nproc_per_node 2 -b 8 -e 64K -f 2 -n 3 -w 1
cat "$T/out"
expect_rc 0
expect_grep "$T/out" '^# mlrun doctor --bandwidth: Gloo all-reduce \(ring\), 2 ranks on 1 node,'
expect_grep "$T/out" '^#       size         count      type   redop      time   algbw   busbw  #wrong$'
# 8 B .. 64 KiB doubling: 14 rows of numbers, 0 wrong each.
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum +[0-9]+\.[0-9] +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +0$' "$T/out")
[ "$rows" -eq 14 ] || fail "expected 14 table rows, found $rows"
expect_grep "$T/out" '^           8             2     float     sum '
expect_grep "$T/out" '^       65536         16384     float     sum '
expect_line "$T/out" "# Out of bounds values : 0 OK"
expect_grep "$T/out" '^# Peak bus bandwidth   : [0-9.]+ GB/s at '
expect_grep "$T/out" '^# every rank ran on one host: the data crossed no network link'
! grep -q '^\[' "$T/out" || fail "rank tags left in the table"

# Usage errors: every one reported, nothing launched.
run_mlrun doctor --bandwidth -b 1M -e 8 -f 1
expect_rc 2
expect_grep "$T/err" '^mlrun: error: doctor: -f 1: expected a factor'
expect_grep "$T/err" '^mlrun: error: doctor: -b 1 MiB is larger than -e 8 B'
expect_grep "$T/err" '^mlrun: error: doctor: --bandwidth needs at least 2 ranks'
run_mlrun doctor -e 1M
expect_rc 2
expect_grep "$T/err" 'go with --bandwidth'

# One rank is too few for Gloo (it is allowed for NCCL, whose path doctor_bandwidth_nccl tests).
run_mlrun doctor --bandwidth --backend gloo
expect_rc 2
expect_grep "$T/err" '^mlrun: error: doctor: --bandwidth needs at least 2 ranks \(1 with --backend nccl\)'
echo PASS
