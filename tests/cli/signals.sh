# SIGINT, SIGTERM and SIGHUP to mlrun reach every worker; mlrun exits 128+N (130 after Ctrl-C);
# a second SIGINT kills workers that ignore the first; nothing of the job is left.
source "$(dirname "$0")/common.sh"

# Each worker records the signal it gets in $T/got.RANK, then exits 0 (a clean shutdown); its
# child sleeps until its group is signalled.
write_worker polite.sh '
for s in INT TERM HUP; do trap "echo $s >>\"$T/got.\$RANK\"; exit 0" $s; done
"$T/sleep" 1000 &
touch "$T/up.$RANK"
wait'

all_up() { [ "$(count_files "$T/up.*")" -eq "$1" ]; }

# workers_running N: the N workers and their children are running (pgrep sees the marker).
workers_running() {
  local n
  n=$(pgrep -fc -- "$T/sleep 1000")
  [ "$n" -eq "$1" ] || fail "expected $1 worker children, pgrep sees $n"
}

for sig in INT TERM HUP; do
  rm -f "$T"/up.* "$T"/got.*
  start_mlrun --nproc_per_node=3 "$T/polite.sh"
  wait_until 60 all_up 3 || fail "SIG$sig: the workers did not start"
  workers_running 3
  kill -s "$sig" "$MLRUN_PID"
  wait_mlrun 60
  case $sig in INT) want=130 ;; TERM) want=143 ;; HUP) want=129 ;; esac
  expect_rc "$want"
  for r in 0 1 2; do
    [ "$(cat "$T/got.$r" 2>/dev/null)" = "$sig" ] || fail "SIG$sig: rank $r recorded '$(cat "$T/got.$r" 2>/dev/null)'"
  done
  expect_grep "$T/err" "interrupted by SIG$sig"
  assert_no_marker_left 10
done

# Workers that ignore SIGINT: the first SIGINT leaves them running (the grace period is long),
# the second kills them and their children at once.
write_worker deaf.sh '
trap "" INT
"$T/sleep" 1000 &
touch "$T/up.$RANK"
wait'
rm -f "$T"/up.*
start_mlrun --nproc_per_node=2 --grace_period=300 "$T/deaf.sh"
wait_until 60 all_up 2 || fail "the deaf workers did not start"
kill -INT "$MLRUN_PID"
sleep 1
mlrun_running || fail "mlrun ended after the first SIGINT, though its workers ignore it"
workers_running 2
kill -INT "$MLRUN_PID"
start=$(now_ms)
wait_mlrun 60
took=$(($(now_ms) - start))
expect_rc 130
# "At once": far sooner than the 300 s grace period.
[ "$took" -lt 30000 ] || fail "the second SIGINT took $took ms"
assert_no_marker_left 10

# One Ctrl-C delivered twice, 50 ms apart (the terminal's and a wrapper's, as `timeout
# --foreground` passes it on), is one: the workers' handlers get their grace period and finish.
write_worker slow.sh '
trap "\"\$T/sleep\" 1; echo clean >>\"\$T/got.\$RANK\"; exit 0" INT
"$T/sleep" 1000 &
touch "$T/up.$RANK"
wait'
rm -f "$T"/up.* "$T"/got.*
start_mlrun --nproc_per_node=2 --grace_period=30 "$T/slow.sh"
wait_until 60 all_up 2 || fail "the slow workers did not start"
kill -INT "$MLRUN_PID"
# 50 ms without a fork (an external sleep could take past 200 ms to start on a loaded machine,
# and the second would then be a real second SIGINT): two deliveries, not merged by the kernel.
start_us=${EPOCHREALTIME/./}
while ((${EPOCHREALTIME/./} - start_us < 50000)); do :; done
kill -INT "$MLRUN_PID"
wait_mlrun 60
expect_rc 130
for r in 0 1; do
  [ "$(cat "$T/got.$r" 2>/dev/null)" = clean ] ||
    fail "one SIGINT twice, 50 ms apart: rank $r did not finish its handler (SIGKILLed?)"
done
assert_no_marker_left 10

# nohup: SIGHUP stays ignored, the job goes on to its end.
write_worker brief.sh '
trap "echo HUP >>\"\$T/got.\$RANK\"" HUP
touch "$T/up.$RANK"
"$T/sleep" 2'
rm -f "$T"/up.* "$T"/got.*
nohup "$MLRUN" --nproc_per_node=2 "$T/brief.sh" >"$T/out" 2>"$T/err" &
MLRUN_PID=$!
wait_until 60 all_up 2 || fail "nohup: the workers did not start"
kill -HUP "$MLRUN_PID"
wait_mlrun 60
expect_rc 0
[ "$(count_files "$T/got.*")" -eq 0 ] || fail "nohup: a worker got SIGHUP"
assert_no_marker_left 10

# Ctrl-Z (SIGTSTP): the workers, each in a group of its own, stop with mlrun; SIGCONT (fg, bg)
# starts them again and the job ends as it would have.
write_worker ticker.sh '
touch "$T/up.$RANK"
for i in $(seq 30); do echo "$i" >>"$T/tick.$RANK"; "$T/sleep" 0.1; done'
rm -f "$T"/up.* "$T"/tick.*
start_mlrun --nproc_per_node=2 "$T/ticker.sh"
wait_until 60 all_up 2 || fail "the tickers did not start"
kill -TSTP "$MLRUN_PID"
# Every process running ticker.sh (mlrun and both workers) is stopped.
stopped() { ! ps -o stat= -p "$(pgrep -f -- "$T/ticker.sh" | paste -sd, -)" | grep -qv '^T'; }
wait_until 10 stopped || fail "SIGTSTP: the workers did not stop: $(ps -o pid=,stat=,args= -p "$(pgrep -f -- "$T/ticker.sh" | paste -sd, -)")"
grep -q '^T' <(ps -o stat= -p "$MLRUN_PID") || fail "SIGTSTP: mlrun itself did not stop"
before=$(cat "$T/tick.0" | wc -l)
sleep 1
[ "$(cat "$T/tick.0" | wc -l)" -eq "$before" ] || fail "SIGTSTP: rank 0 went on while stopped"
kill -CONT "$MLRUN_PID"
wait_mlrun 60
expect_rc 0
[ "$(cat "$T/tick.0" | wc -l)" -eq 30 ] || fail "after SIGCONT: rank 0 did not finish its 30 ticks"
assert_no_marker_left 10
echo PASS
