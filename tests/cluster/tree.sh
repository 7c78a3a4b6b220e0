#!/usr/bin/env bash
# The launch tree (docs/multinode.md "The launch tree") on 24 hosts, --tree_width 4: the head
# starts agents on host1-4, they on host5-20, host5 on host21-24 (three levels). One case per
# ctest entry:
#   ddp              the DDP example (Gloo), one rank per host: every rank agrees, exit 0
#   leaf_fails       a worker on a third-level leaf (host24) exits 7: mlrun exits 7 naming it
#   interior_killed  host1's agent (node 0, above host5-8 and host21-24) SIGKILLed: the job ends
#                    non-zero, the reason names node 0, host1 and every agent below it
#   interior_stopped host1's agent SIGSTOPped: the server names it after heartbeat_timeout, the
#                    job ends, the workers below it are stopped; nothing left once its lifeline
#                    has SIGKILLed it
#   sigint           Ctrl-C on the head: every worker on every level is signalled, exit 130
#   head_killed      the head SIGKILLed: nothing of the job left on any host within 15 s
#   child_unreachable  host24's sshd stopped: the head reaches its own children, host5 cannot
#                    reach host24 and aborts the job naming it; nothing is left running
# After each: nothing of the job is left on any host.
set -euo pipefail
CASE=${1:?usage: tree.sh ddp|leaf_fails|interior_killed|interior_stopped|sigint|head_killed|child_unreachable}
HERE="$(cd "$(dirname "$0")" && pwd)"
"$HERE/cluster.sh" can-run || exit 77
"$HERE/cluster.sh" up 24 >/dev/null
source "$HERE/multinode_lib.sh"
TEST_NAME="tree_$CASE"
[ "$MLRUN_CLUSTER_HOSTS" -ge 24 ] || fail "the tree tests need 24 hosts, the cluster has $MLRUN_CLUSTER_HOSTS"

HOSTS=$(for i in $(seq 1 24); do printf 'host%d:1,' "$i"; done)
HOSTS=${HOSTS%,}
TREE=(--tree_width 4 -H "$HOSTS")

# Every rank's worker started and its child running.
wait_workers() {
  wait_until 180 files_at_least "$T/up.*" 24 ||
    fail "only $(count_files "$T/up.*") of the 24 workers started"
  wait_until 60 eval '[ "$(pgrep -fc -- "$T/sleep 1000")" -eq 24 ]' ||
    fail "the workers' children did not all start"
}

# signal_node0_agent SIG [MLRUN OPTIONS]: runs the job (each worker records a SIGTERM in
# $T/got.RANK), waits for every worker, sends SIG to node 0's agent (on host1, above host5-8 and,
# below host5, host21-24) and waits for mlrun's non-zero end; took: ms from the signal to it.
signal_node0_agent() {
  local sig=$1
  shift
  write_worker worker.sh '
trap "echo TERM >\"$T/got.\$RANK\"; exit 0" TERM
echo "$$ $PPID $(hostname)" >"$T/up.$RANK"
"$T/sleep" 1000 &
wait'
  start_mlrun "${TREE[@]}" "$@" "$T/worker.sh"
  wait_workers
  # Rank 0 is node 0's only worker, on host1: its parent is node 0's agent.
  check_agent_of 0 host1
  start=$(now_ms)
  kill "-$sig" "$AGENT"
  wait_mlrun 90
  took=$(($(now_ms) - start))
  expect_rc_nonzero
}

case "$CASE" in
  ddp)
    need_torch
    cp "$SRC/examples/torch_ddp.py" "$T/torch_ddp.py"
    run_mlrun "${TREE[@]}" -v "$T/torch_ddp.py" --steps 3
    expect_rc 0
    expect_grep "$T/out" '^\[0\] ddp ok: 24 ranks, 3 steps'
    expect_grep "$T/err" 'launch tree: 24 nodes, 4 wide, 3 levels'
    # The head started 4 agents; host1 and host5 started 4 each (their lines come up the tree).
    [ "$(grep -c 'agents started on 4 hosts' "$T/err")" -ge 6 ] ||
      fail "expected the head and 5 interior agents to say 'agents started on 4 hosts'"
    ;;
  leaf_fails)
    write_worker worker.sh '
echo "$$ $PPID $(hostname)" >"$T/up.$RANK"
if [ "$RANK" = 23 ]; then
  while [ "$(ls "$T" | grep -c "^up\.")" -lt 24 ]; do sleep 0.1; done
  echo "last words of rank 23 on $(hostname)" >&2
  exit 7
fi
"$T/sleep" 1000 &
wait'
    run_mlrun "${TREE[@]}" "$T/worker.sh"
    expect_rc 7
    expect_grep "$T/err" 'rank 23 .*node 23.*host24'
    expect_grep "$T/err" 'last words of rank 23 on host24'
    ;;
  interior_killed)
    signal_node0_agent KILL
    expect_grep "$T/err" 'job aborted: node 0 \(host1\) lost: its agent was killed by SIGKILL'
    # Every agent below host1: host5-8 (nodes 4-7) and host21-24 (nodes 20-23), below host5.
    for n in 4 5 6 7 20 21 22 23; do
      expect_grep "$T/err" "went with it: .*host$((n + 1)) \(node $n\)"
    done
    echo "mlrun exited $RC ${took} ms after the SIGKILL: $(grep -m1 "job aborted" "$T/err")"
    ;;
  interior_stopped)
    # A hung interior agent (SIGSTOP: its connections stay open, its children's SSH channels
    # too): its heartbeats stop and the server aborts the job naming it; every other node,
    # those below it included, hears the abort directly and stops its workers. Its parent
    # (the head) closes its channel after the grace period and 10 s, and its lifeline then
    # SIGKILLs it after as long again; its children have ended by then.
    signal_node0_agent STOP --grace_period=2 --rdzv_conf heartbeat_interval=0.5,heartbeat_timeout=3
    expect_grep "$T/err" 'job aborted: node 0 \(host1\) lost: no heartbeat for [0-9.]+ s \(heartbeat_timeout 3\.0 s\)'
    # Every worker below host1 (host5-8, host21-24) stopped while host1 was still stopped.
    for r in 4 5 6 7 20 21 22 23; do
      [ -s "$T/got.$r" ] || fail "rank $r (below the stopped agent) was not stopped by a signal"
    done
    assert_no_job_left 40
    echo "mlrun exited $RC ${took} ms after the SIGSTOP, nothing left $(($(now_ms) - start)) ms after"
    ;;
  sigint)
    write_worker worker.sh '
trap "echo INT >\"$T/got.\$RANK\"; exit 0" INT
trap "echo TERM >\"$T/got.\$RANK\"; exit 0" TERM
"$T/sleep" 1000 &
touch "$T/up.$RANK"
wait'
    start_mlrun "${TREE[@]}" "$T/worker.sh"
    wait_workers
    kill -INT "$MLRUN_PID"
    wait_mlrun 90
    expect_rc 130
    expect_grep "$T/err" 'job aborted: interrupted: SIGINT on the head'
    for r in $(seq 0 23); do
      [ -s "$T/got.$r" ] || fail "rank $r was not signalled"
    done
    ;;
  head_killed)
    write_worker worker.sh '
"$T/sleep" 1000 &
touch "$T/up.$RANK"
wait'
    start_mlrun "${TREE[@]}" "$T/worker.sh"
    wait_workers
    [ "$(agent_pids | wc -l)" -ge 24 ] || fail "expected an agent on each host"
    kill -KILL "$MLRUN_PID"
    start=$(now_ms)
    RC=0
    wait "$MLRUN_PID" 2>/dev/null || RC=$?
    wait_until 15 no_job_left ||
      fail "still running 15 s after the head's SIGKILL:"$'\n'"$(describe_pids $(job_pids))"
    echo "everything gone on every host $(($(now_ms) - start)) ms after the head's SIGKILL"
    ;;
  child_unreachable)
    trap '"$CLUSTER" start-sshd 24 >/dev/null 2>&1 || true; cleanup' EXIT
    "$CLUSTER" stop-sshd 24
    write_worker worker.sh '
"$T/sleep" 1000 &
touch "$T/up.$RANK"
wait'
    start_mlrun "${TREE[@]}" "$T/worker.sh"
    wait_mlrun 120
    expect_rc_nonzero
    expect_grep "$T/err" 'job aborted: cannot start every agent: node 23 host24: .*\(from host5, its parent in the launch tree\)'
    echo "mlrun exited $RC: $(grep -m1 "job aborted" "$T/err")"
    "$CLUSTER" start-sshd 24
    ;;
  *) fail "no case $CASE" ;;
esac
assert_no_job_left 20
echo "ok: tree $CASE (exit $RC)"
