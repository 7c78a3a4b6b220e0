# Teardown reaches processes that left their worker's process group: a `setsid` daemon and a
# double-forked one (`setsid -f`) are gone after the job fails, after it succeeds, before a
# restart attempt begins, after mlrun is SIGKILLed (the lifeline), on a node started by an
# agent (--launcher sim), and where clone3 is refused (MLRUN_NO_CLONE3, a seccomp wrapper). No job cgroup is left behind. Where this machine allows no job cgroup
# (no cgroup2, no write access, MLRUN_CGROUP=off) it skips, saying why.
source "$(dirname "$0")/common.sh"

teardown=$("$MLRUN" --dry-run --no_python /bin/true 2>&1 | sed -n 's/^teardown: //p')
# mlrun doctor says the same, wherever it runs (its JSON and its text).
"$MLRUN" doctor --json --python-timeout 0 >"$T/doctor.json" 2>/dev/null
doctor=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["hosts"][0]["teardown"])' "$T/doctor.json") ||
  fail "mlrun doctor --json has no teardown: $(head -c 300 "$T/doctor.json")"
[ -n "$teardown" ] && [ "$doctor" = "$teardown" ] || fail "doctor says teardown '$doctor', --dry-run '$teardown'"
MLRUN_CGROUP=off "$MLRUN" doctor --python-timeout 0 >"$T/doctor.txt" 2>/dev/null
expect_grep "$T/doctor.txt" '^  Teardown    process groups: turned off \(MLRUN_CGROUP=off\)$'
case "$teardown" in
  "cgroup v2 at "*) PARENT=${teardown#cgroup v2 at } ;;
  "process groups: "*)
    echo "SKIP: no job cgroup on this machine: $teardown"
    exit 77
    ;;
  *) fail "--dry-run printed no teardown line: $("$MLRUN" --dry-run --no_python /bin/true 2>&1)" ;;
esac
off=$(MLRUN_CGROUP=off "$MLRUN" --dry-run --no_python /bin/true 2>&1 | sed -n 's/^teardown: //p')
[ "$off" = "process groups: turned off (MLRUN_CGROUP=off)" ] || fail "MLRUN_CGROUP=off: '$off'"

# Rank 0 of attempt A starts two daemons that leave its process group, records their pids and
# its own cgroup, then does what $T/then.A says (exit with a code, or sleep); the other ranks
# sleep until teardown unless that is 0.
write_worker worker.sh '
A=$TORCHELASTIC_RESTART_COUNT
if [ "$RANK" = 0 ]; then
  if [ -s "$T/daemons.$((A - 1))" ]; then
    # A restart: the previous attempt'"'"'s daemons must be gone already.
    for p in $(cat "$T/daemons.$((A - 1))"); do
      kill -0 "$p" 2>/dev/null && ! grep -q "^State:.*Z" /proc/$p/status && echo "alive $p"
    done >"$T/before_restart.$A"
    touch "$T/checked.$A"
  fi
  setsid "$T/sleep" 700$A </dev/null >/dev/null 2>&1 &
  echo $! >"$T/daemons.$A"
  setsid -f "$T/sleep" 800$A </dev/null >/dev/null 2>&1
  for i in $(seq 100); do p=$(pgrep -f -- "$T/sleep 800$A\$") && break; sleep 0.05; done
  echo "$p" >>"$T/daemons.$A"
  cat /proc/self/cgroup >"$T/cgroup.$A"
  touch "$T/up.$A"
fi
then=$(cat "$T/then.$A" 2>/dev/null || echo 0)
# The other ranks run until teardown stops them, or end with the job.
[ "$RANK" != 0 ] && [ "$then" != 0 ] && exec "$T/sleep" 300
[ "$then" = sleep ] && exec "$T/sleep" 300
exit "$then"'

daemon_gone() { ! kill -0 "$1" 2>/dev/null || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
all_gone() {
  local p
  for p in $(cat "$@"); do daemon_gone "$p" || return 1; done
}
# assert_daemons_gone WHAT FILES...: every pid in FILES gone within 5 s (on process groups alone
# they would live for 700 s).
assert_daemons_gone() {
  local what=$1
  shift
  [ "$(cat "$@" | wc -w)" -ge 2 ] || fail "$what: the worker recorded no daemons ($*)"
  wait_until 5 all_gone "$@" ||
    fail "$what: daemons outlived teardown: $(ps -o pid=,sid=,args= -p "$(cat "$@" | paste -sd, -)")"
}
# No job cgroup of this test's is left under our own cgroup.
assert_no_cgroup_left() {
  local left
  left=$(ls -d "$PARENT"/mlrun-"$MARKER"-* 2>/dev/null)
  [ -z "$left" ] || fail "$1: job cgroups left: $left"
}
in_job_cgroup() { grep -q "^0::.*/mlrun-$MARKER-[0-9]" "$1" || fail "the worker ran outside the job's cgroup: $(cat "$1")"; }
reset() { rm -f "$T"/daemons.* "$T"/then.* "$T"/up.* "$T"/cgroup.* "$T"/before_restart.* "$T"/checked.*; }

# 1. The job fails: rank 0 exits 3, rank 1 is stopped.
reset
echo 3 >"$T/then.0"
run_mlrun --rdzv_id="$MARKER" --nproc_per_node=2 --no_python "$T/worker.sh"
expect_rc 3
in_job_cgroup "$T/cgroup.0"
assert_daemons_gone "a failed job" "$T/daemons.0"
assert_no_cgroup_left "a failed job"

# 2. The job succeeds: its daemons go with it too.
reset
run_mlrun --rdzv_id="$MARKER" --nproc_per_node=1 --no_python "$T/worker.sh"
expect_rc 0
assert_daemons_gone "a job that succeeded" "$T/daemons.0"
assert_no_cgroup_left "a job that succeeded"

# 3. A restart: attempt 0's daemons are gone before attempt 1's workers start.
reset
echo 1 >"$T/then.0"
run_mlrun --rdzv_id="$MARKER" --max_restarts=1 --nproc_per_node=2 --no_python "$T/worker.sh"
expect_rc 0
[ -e "$T/checked.1" ] || fail "attempt 1 did not check attempt 0's daemons"
[ ! -s "$T/before_restart.1" ] || fail "attempt 0's daemons were alive when attempt 1 began: $(cat "$T/before_restart.1")"
assert_daemons_gone "a restarted job" "$T/daemons.0" "$T/daemons.1"
assert_no_cgroup_left "a restarted job"

# 4. mlrun SIGKILLed: the lifeline kills the cgroup and removes it.
reset
echo sleep >"$T/then.0"
start_mlrun --rdzv_id="$MARKER" --nproc_per_node=1 --no_python "$T/worker.sh"
wait_until 60 test -e "$T/up.0" || fail "the worker did not start"
kill -KILL "$MLRUN_PID"
wait "$MLRUN_PID" 2>/dev/null
assert_daemons_gone "mlrun SIGKILLed" "$T/daemons.0"
wait_until 5 eval '[ -z "$(ls -d "$PARENT"/mlrun-"$MARKER"-* 2>/dev/null)" ]' || assert_no_cgroup_left "mlrun SIGKILLed"

# 5. Nodes run by agents (--launcher sim: real `mlrun agent`s, the code SSH and Slurm agents run):
#    rank 0's node fails, rank 1's node is stopped.
reset
echo 5 >"$T/then.0"
printf '%s slots=1\n' "$MARKER-n0" "$MARKER-n1" >"$T/hostfile"
run_mlrun --rdzv_id="$MARKER" --launcher sim --hostfile "$T/hostfile" --no_python "$T/worker.sh"
expect_rc 5
in_job_cgroup "$T/cgroup.0"
assert_daemons_gone "an agent's node" "$T/daemons.0"
wait_until 5 eval '[ -z "$(ls -d "$PARENT"/mlrun-"$MARKER"-* 2>/dev/null)" ]' || assert_no_cgroup_left "agents' nodes"

# 6. MLRUN_CGROUP=off: today's process groups; the daemons are not the job's to end.
reset
echo 0 >"$T/then.0"
MLRUN_CGROUP=off run_mlrun --rdzv_id="$MARKER" --nproc_per_node=1 --no_python "$T/worker.sh"
expect_rc 0
grep -q "^0::.*/mlrun-$MARKER" "$T/cgroup.0" && fail "MLRUN_CGROUP=off: the worker ran in a job cgroup"
for p in $(cat "$T/daemons.0"); do daemon_gone "$p" && fail "MLRUN_CGROUP=off: daemon $p is gone (expected it to stay)"; done
kill -KILL $(cat "$T/daemons.0") 2>/dev/null

# 7. clone3 refused (an older seccomp profile): workers fork and join by writing cgroup.procs;
#    the same teardown, a restart included.
if [ -n "${MLRUN_NO_CLONE3:-}" ]; then
  reset
  echo 1 >"$T/then.0"
  run_mlrun_no_clone3() {
    RC=0
    "$MLRUN_NO_CLONE3" "$MLRUN" "$@" >"$T/out" 2>"$T/err" || RC=$?
  }
  run_mlrun_no_clone3 --rdzv_id="$MARKER" --max_restarts=1 --nproc_per_node=2 --no_python "$T/worker.sh"
  expect_rc 0
  in_job_cgroup "$T/cgroup.1"
  [ ! -s "$T/before_restart.1" ] || fail "without clone3: attempt 0's daemons were alive when attempt 1 began"
  assert_daemons_gone "without clone3" "$T/daemons.0" "$T/daemons.1"
  assert_no_cgroup_left "without clone3"
else
  echo "note: MLRUN_NO_CLONE3 not set (ctest sets it): the fallback without clone3 is not run"
fi

assert_no_marker_left
echo "PASS ($teardown)"
