#!/usr/bin/env bash
# SIGUSR1 and SIGUSR2 to the head reach every worker on every host through the rendezvous, each
# delivery once, and the job goes on to exit 0; an agent that gets one itself (Slurm signals
# every task) passes it to its own workers only; listed in --signals_to_handle, SIGUSR1 stops the
# job on every host.
source "$(dirname "$0")/multinode_lib.sh"
write_worker worker.sh '
trap "echo USR1 >>\"$T/got.\$RANK\"" USR1
trap "echo USR2 >>\"$T/got.\$RANK\"" USR2
trap "echo TERM >>\"$T/got.\$RANK\"; exit 0" TERM
touch "$T/up.$RANK"
while [ ! -e "$T/stop" ]; do "$T/sleep" 0.05; done
exit 0'

# lines_are N WANT: each of the 6 workers recorded N signals, the last WANT.
lines_are() {
  local r
  for r in 0 1 2 3 4 5; do
    [ "$(cat "$T/got.$r" 2>/dev/null | wc -l)" = "$1" ] && [ "$(tail -n 1 "$T/got.$r")" = "$2" ] || return 1
  done
}
records() { for r in 0 1 2 3 4 5; do echo "rank $r: $(paste -sd, "$T/got.$r" 2>/dev/null)"; done; }

start_mlrun -H host1:2,host2:2,host3:2 "$T/worker.sh"
wait_until 120 files_at_least "$T/up.*" 6 || fail "the 6 workers did not start"
n=0
for sig in USR1 USR2 USR1; do
  n=$((n + 1))
  kill -s "$sig" "$MLRUN_PID"
  wait_until 30 lines_are "$n" "$sig" || fail "delivery $n ($sig) did not reach every worker once:"$'\n'"$(records)"
done
# An agent's own SIGUSR2 (host2's: ranks 2 and 3) reaches its workers and no one else's.
agent=
for p in $(agent_pids); do
  if [ "$(host_of_pid "$p")" = host2 ]; then agent=$p; fi
done
[ -n "$agent" ] || fail "no agent on host2"
kill -USR2 "$agent"
wait_until 30 eval '[ "$(tail -n 1 "$T/got.2")" = USR2 ] && [ "$(tail -n 1 "$T/got.3")" = USR2 ]' ||
  fail "host2's agent did not pass its SIGUSR2 on:"$'\n'"$(records)"
sleep 1
for r in 0 1 2 3 4 5; do
  want=3
  case $r in 2 | 3) want=4 ;; esac
  [ "$(wc -l <"$T/got.$r")" = "$want" ] || fail "rank $r recorded $(wc -l <"$T/got.$r") signals, not $want:"$'\n'"$(records)"
done
touch "$T/stop"
wait_mlrun 60
expect_rc 0
assert_no_job_left 15

# A head that runs workers itself (localhost listed) passes the signal to its own workers and
# publishes it for the others; its own watcher skips it, so its workers get it once too.
rm -f "$T"/up.* "$T"/got.* "$T/stop"
start_mlrun -H localhost:2,host1:2,host2:2 "$T/worker.sh"
wait_until 120 files_at_least "$T/up.*" 6 || fail "the 6 workers did not start (local head)"
kill -USR2 "$MLRUN_PID"
wait_until 30 lines_are 1 USR2 || fail "local head: SIGUSR2 did not reach every worker once:"$'\n'"$(records)"
sleep 1
lines_are 1 USR2 || fail "local head: a worker got SIGUSR2 twice:"$'\n'"$(records)"
touch "$T/stop"
wait_mlrun 60
expect_rc 0
assert_no_job_left 15

# A stop signal: the head aborts the job and every node stops its workers as for any abort
# (SIGTERM, the grace period, SIGKILL); the job ends 128+10.
rm -f "$T"/up.* "$T"/got.* "$T/stop"
start_mlrun -H host1:2,host2:2,host3:2 --grace_period=2 --signals_to_handle=SIGUSR1 "$T/worker.sh"
wait_until 120 files_at_least "$T/up.*" 6 || fail "the 6 workers did not start (stop case)"
kill -USR1 "$MLRUN_PID"
wait_mlrun 60
expect_rc 138
expect_grep "$T/err" 'job aborted: interrupted: SIGUSR1 on the head'
wait_until 10 lines_are 1 TERM || fail "SIGUSR1 as a stop signal did not stop every worker:"$'\n'"$(records)"
assert_no_job_left 15
echo "ok: SIGUSR1/SIGUSR2 forwarded to 6 workers on 3 hosts once per delivery; stop signal honoured"
