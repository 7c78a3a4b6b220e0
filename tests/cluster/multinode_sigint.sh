#!/usr/bin/env bash
# Ctrl-C (SIGINT) on the head stops every worker on every host; mlrun exits 130.
source "$(dirname "$0")/multinode_lib.sh"
write_worker worker.sh '
trap "echo INT >\"$T/got.\$RANK\"; exit 0" INT
trap "echo TERM >\"$T/got.\$RANK\"; exit 0" TERM
"$T/sleep" 1000 &
touch "$T/up.$RANK"
wait'

start_mlrun -H host1:2,host2:2,host3:2 "$T/worker.sh"
wait_until 120 files_at_least "$T/up.*" 6 || fail "the 6 workers did not start"
wait_until 30 eval '[ "$(pgrep -fc -- "$T/sleep 1000")" -eq 6 ]' || fail "the workers' children did not start"
start=$(now_ms)
kill -INT "$MLRUN_PID"
wait_mlrun 60
took=$(($(now_ms) - start))
expect_rc 130
# The head (its own host is not listed: it runs no workers) handled the signal itself: it
# aborted the job and waited for the nodes. A head that died of SIGINT's default action would
# also read as 130 here, before its agents had stopped every worker.
expect_grep "$T/err" 'job aborted: interrupted: SIGINT on the head'
for r in 0 1 2 3 4 5; do
  [ -s "$T/got.$r" ] || fail "rank $r was not signalled"
done
assert_no_job_left 15
echo "ok: SIGINT stopped 6 workers on 3 hosts in ${took} ms, exit 130"
