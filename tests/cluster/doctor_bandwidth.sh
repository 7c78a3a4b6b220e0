#!/usr/bin/env bash
# mlrun doctor --bandwidth on 2 namespace hosts (issue 5 item 5): a Gloo all-reduce sweep with
# small sizes launched through mlrun over SSH; rank 0's table has a row per size with numbers,
# every value checked right, and the link comparison names both hosts' interface.
source "$(dirname "$0")/lib.sh"
MLRUN=${MLRUN:?MLRUN must name the built mlrun}
rc=0
out=$("$MLRUN" doctor --bandwidth -H host1,host2 -b 8 -e 1M -f 4 -n 5 -w 2 2>&1) || rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "exit code $rc"
expect_in "$out" "Gloo all-reduce (ring), 2 ranks on 2 nodes"
expect_in "$out" "#       size         count      type   redop      time   algbw   busbw  #wrong"
# 8, 32, 128, 512, 2K, 8K, 32K, 128K, 512K (x4 up to 1M): 9 rows, each size with its count, float, sum,
# positive numbers and 0 wrong values.
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum +[0-9]+\.[0-9] +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +0$' \
  <<<"$out")
[ "$rows" -eq 9 ] || fail "expected 9 table rows, found $rows"
expect_in "$out" "      524288        131072     float     sum"
expect_in "$out" "# Out of bounds values : 0 OK"
expect_in "$out" "# Peak bus bandwidth   : "
expect_in "$out" "# links: host1 eth0"
expect_in "$out" "; host2 eth0"
echo "ok: sweep on host1 + host2"
