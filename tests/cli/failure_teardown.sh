# The first failure stops everyone, children of workers included; the summary names the root
# cause; mlrun exits with the failed worker's code (128+N for signal N).
source "$(dirname "$0")/common.sh"

# Every worker starts a child of its own; rank 1 then fails as told by $HOW, once all are up.
write_worker worker.sh '
"$T/sleep" 1000 &
echo $! >"$T/child.$RANK"
echo $$ >"$T/pid.$RANK"
touch "$T/up.$RANK"
if [ "$RANK" = 1 ]; then
  for _ in $(seq 600); do [ "$(ls "$T" | grep -c "^up\.")" -eq "$WORLD_SIZE" ] && break; sleep 0.1; done
  for i in $(seq 15); do echo "rank 1 stderr line $i" >&2; done
  echo "rank 1 last words" >&2
  case "$HOW" in
    exit) exit 3 ;;
    signal) kill -USR1 $$ ;;
  esac
fi
wait'

all_up() { [ "$(count_files "$T/up.*")" -eq 4 ]; }

# 1. Rank 1 exits 3.
start=$(now_ms)
HOW=exit run_mlrun --nproc_per_node=4 --grace_period=30 "$T/worker.sh"
took=$(($(now_ms) - start))
expect_rc 3
all_up || fail "not every worker started"
# Quickly: the other workers die of SIGTERM, mlrun does not wait out the 30 s grace period.
[ "$took" -lt 20000 ] || fail "mlrun took $took ms to exit after the failure"
pid1=$(cat "$T/pid.1")
expect_grep "$T/err" "First failure: rank 1 \(local rank 1, .*pid $pid1\): exit code 3 at "
expect_grep "$T/err" "last stderr lines of rank 1:"
expect_line "$T/err" "    | rank 1 last words"
expect_line "$T/err" "    | rank 1 stderr line 15"
! grep -qxF "    | rank 1 stderr line 1" "$T/err" || fail "the summary has more than the last lines"
expect_grep "$T/err" "stopped by mlrun: ranks 0,2,3"
[ "$(grep -c 'First failure' "$T/err")" -eq 1 ] || fail "more than one summary"
assert_no_marker_left 10

# 2. Rank 1 is killed by SIGUSR1 (10): exit code 138 and the signal's name in the summary.
rm -f "$T"/up.* "$T"/pid.* "$T"/child.*
HOW=signal run_mlrun --nproc_per_node=4 --grace_period=30 "$T/worker.sh"
expect_rc 138
pid1=$(cat "$T/pid.1")
expect_grep "$T/err" "First failure: rank 1 \(local rank 1, .*pid $pid1\): signal SIGUSR1 \(10\) at "
expect_line "$T/err" "    | rank 1 last words"
assert_no_marker_left 10

# 3. A worker whose child ignores SIGTERM: the child is SIGKILLed after the grace period, and the
#    exit code is still the failed worker's.
write_worker stubborn.sh '
trap "" TERM
"$T/sleep" 1000 &
touch "$T/up.$RANK"
if [ "$RANK" = 1 ]; then
  for _ in $(seq 600); do [ "$(ls "$T" | grep -c "^up\.")" -eq "$WORLD_SIZE" ] && break; sleep 0.1; done
  exit 7
fi
wait'
rm -f "$T"/up.*
run_mlrun --nproc_per_node=2 --grace_period=1 "$T/stubborn.sh"
expect_rc 7
expect_grep "$T/err" "First failure: rank 1 .*exit code 7"
assert_no_marker_left 10
echo PASS
