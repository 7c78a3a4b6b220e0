# SIGKILL of mlrun itself: every worker and every worker's child is gone within 2 s, and so is its
# temporary run directory (/dev/shm/mlrun-*) and its lifeline. Round 1: the lifeline is the
# mlrun-lifeline program beside mlrun (worker/lifeline.h); round 2: mlrun copied alone into a
# directory of its own, where the lifeline is a fork of mlrun.
source "$(dirname "$0")/common.sh"

mkdir "$T/alone"
cp "$MLRUN" "$T/alone/mlrun"
[ -x "$(dirname "$MLRUN")/mlrun-lifeline" ] || fail "no mlrun-lifeline beside $MLRUN"

# Each worker starts two children of its own, one of them in the background of a subshell.
write_worker worker.sh '
"$T/sleep" 1000 &
( "$T/sleep" 1001 & wait ) &
echo "$TORCHELASTIC_ERROR_FILE" >"$T/error_file.$RANK"
touch "$T/up.$RANK"
wait'

all_up() { [ "$(count_files "$T/up.*")" -eq 4 ]; }
children_up() { [ "$(pgrep -fc -- "$T/sleep 100[01]")" -eq 8 ]; }

# The lifeline: the launcher's one child that is not a worker.
lifeline_pid() { pgrep -P "$MLRUN_PID" -x mlrun-lifeline; }

for round in 1 2; do
  rm -f "$T"/up.*
  if [ "$round" = 1 ]; then
    expected_exe=$(readlink -f "$(dirname "$MLRUN")/mlrun-lifeline")
  else
    MLRUN=$T/alone/mlrun
    expected_exe=$MLRUN
  fi
  start_mlrun --nproc_per_node=4 "$T/worker.sh"
  wait_until 60 all_up || fail "the workers did not start"
  wait_until 30 children_up || fail "expected 8 children of workers, pgrep sees $(pgrep -fc -- "$T/sleep")"
  lifeline=$(lifeline_pid) || fail "round $round: no lifeline among mlrun's children"
  exe=$(readlink "/proc/$lifeline/exe")
  [ "$exe" = "$expected_exe" ] || fail "round $round: the lifeline runs $exe, not $expected_exe"
  kill -KILL "$MLRUN_PID"
  start=$(now_ms)
  wait "$MLRUN_PID" 2>/dev/null
  # The issue's bound: everything gone within 2 s of the SIGKILL.
  while ! no_marker_left && [ $(($(now_ms) - start)) -lt 2000 ]; do sleep 0.02; done
  took=$(($(now_ms) - start))
  no_marker_left ||
    fail "round $round: still running ${took} ms after SIGKILL: $(ps -o pid=,args= -p "$(marker_pids | paste -sd, -)")"
  echo "round $round: everything gone ${took} ms after SIGKILL"
  # The run directory (on /dev/shm where there is one) goes with it: the lifeline removes it.
  run_dir=$(dirname "$(cat "$T/error_file.0")")
  case "$run_dir" in */mlrun-*) ;; *) fail "unexpected run directory '$run_dir'" ;; esac
  wait_until 2 test ! -e "$run_dir" || fail "round $round: $run_dir is still there after SIGKILL"
  wait_until 2 test ! -e "/proc/$lifeline" || fail "round $round: the lifeline ($lifeline) is still running"
done
echo PASS
