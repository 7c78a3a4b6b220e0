# --max_restarts: the whole group restarts with TORCHELASTIC_RESTART_COUNT one higher; exit 0 when
# an attempt succeeds; the failing worker's code when restarts run out.
source "$(dirname "$0")/common.sh"

# Rank 1 fails with code 5 on attempts below $FAIL_UNTIL, once rank 0 of the same attempt runs;
# rank 0 waits for the teardown then (or exits 0 on a good attempt).
write_worker flaky.sh '
a=$TORCHELASTIC_RESTART_COUNT
echo "$RANK $a $TORCHELASTIC_MAX_RESTARTS" >>"$T/attempts"
echo "attempt $a on rank $RANK"
if [ "$a" -lt "$FAIL_UNTIL" ]; then
  if [ "$RANK" = 1 ]; then
    for _ in $(seq 600); do [ -e "$T/up.$a" ] && break; sleep 0.1; done
    echo "rank 1 fails on attempt $a" >&2
    exit 5
  fi
  touch "$T/up.$a"
  "$T/sleep" 1000 &
  wait
fi
exit 0'

# 1. Attempts 0 and 1 fail, attempt 2 succeeds: exit 0.
FAIL_UNTIL=2 run_mlrun --nproc_per_node=2 --max_restarts=2 --log_dir "$T/logs" "$T/flaky.sh"
expect_rc 0
[ "$(sort "$T/attempts" | paste -sd,)" = "0 0 2,0 1 2,0 2 2,1 0 2,1 1 2,1 2 2" ] ||
  fail "attempts (rank, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS): $(paste -sd, "$T/attempts")"
# The restarts are visible: the summary of each failed attempt and the restart count.
expect_grep "$T/err" 'restarting .*\(1 of 2 restarts\)'
expect_grep "$T/err" 'restarting .*\(2 of 2 restarts\)'
[ "$(grep -c 'First failure: rank 1 ' "$T/err")" -eq 2 ] || fail "expected two failure summaries"
for a in 0 1 2; do
  expect_line "$T/out" "[0] attempt $a on rank 0"
  expect_line "$T/logs/attempt_$a/1/stdout.log" "attempt $a on rank 1"
done
expect_line "$T/logs/attempt_1/1/stderr.log" "rank 1 fails on attempt 1"
[ ! -e "$T/logs/attempt_3" ] || fail "a fourth attempt"
assert_no_marker_left

# 2. Every attempt fails: after --max_restarts=1 (two attempts) the failing code, 5.
rm -f "$T/attempts" "$T"/up.*
FAIL_UNTIL=99 run_mlrun --nproc_per_node=2 --max_restarts=1 "$T/flaky.sh"
expect_rc 5
[ "$(sort "$T/attempts" | paste -sd,)" = "0 0 1,0 1 1,1 0 1,1 1 1" ] ||
  fail "attempts: $(paste -sd, "$T/attempts")"
expect_grep "$T/err" 'restarting .*\(1 of 1 restarts\)'
expect_grep "$T/err" 'First failure: rank 1 .*exit code 5'

# 3. No restarts asked for: one attempt.
rm -f "$T/attempts" "$T"/up.*
FAIL_UNTIL=99 run_mlrun --nproc_per_node=2 "$T/flaky.sh"
expect_rc 5
[ "$(sort "$T/attempts" | paste -sd,)" = "0 0 0,1 0 0" ] || fail "attempts: $(paste -sd, "$T/attempts")"
! grep -q restarting "$T/err" || fail "restarted without --max_restarts"
assert_no_marker_left
echo PASS
