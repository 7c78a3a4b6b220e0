#!/usr/bin/env bash
# `mlrun -v` on a 3-host launch tells its story on stderr, each line tagged with the host that
# wrote it (the agents' lines reach the head through its relay): hosts connected n/N, the
# rendezvous, agents started and up, ranks joined n/N as they join (at the head) and per node,
# the job's end. -vv adds every step (each SSH connect, each join, each spawn, each signal of a
# teardown). Without either, none of it: the default output stays as it was.
source "$(dirname "$0")/multinode_lib.sh"
write_worker ok.sh 'echo "rank $RANK on $(hostname)"'
write_worker fails.sh '
if [ "$RANK" = 3 ]; then sleep 0.5; exit 3; fi
exec "$T/sleep" 1000'

# expect_story FILE PATTERN...: every pattern matches a line of FILE.
expect_story() {
  local f=$1 p
  shift
  for p in "$@"; do expect_grep "$f" "$p"; done
}

run_mlrun -v -H host1:2,host2:2,host3:2 "$T/ok.sh"
expect_rc 0
head=$(hostname)
expect_story "$T/err" \
  "mlrun $head info: job .*: 3 nodes, world size 6" \
  "mlrun $head info: hosts connected 1/3" \
  "mlrun $head info: hosts connected 3/3: host[123] in [0-9.]+ s" \
  "mlrun $head info: rendezvous serving at " \
  "mlrun $head info: agents started on 3 hosts" \
  "mlrun $head info: ranks joined 2/6: 1/3 nodes after [0-9.]+ s" \
  "mlrun $head info: ranks joined 4/6: 2/3 nodes after [0-9.]+ s" \
  "mlrun $head info: ranks joined 6/6: 3/3 nodes after [0-9.]+ s" \
  "mlrun $head info: job over with exit code 0 after [0-9.]+ s"
for i in 1 2 3; do
  node=$((i - 1))
  expect_story "$T/err" \
    "^\[[0-9:.]+\] mlrun host$i info: agent up: node $node of 3, 2 workers" \
    "mlrun host$i info: attempt 0: ranks joined 6/6 \(3 nodes\) in [0-9.]+ s; this is node $node, ranks $((2 * node))-$((2 * node + 1))" \
    "mlrun host$i info: attempt 0: every node succeeded"
done
expect_no_grep "$T/err" " debug: "
[ "$(grep -c '^\[[0-5]\] rank' "$T/out")" -eq 6 ] || fail "not every rank's line reached stdout"
story=$(grep -c ' info: ' "$T/err")

# -vv: a failure's teardown, signal by signal, on the hosts that sent them.
run_mlrun -vv -H host1:2,host2:2,host3:2 --grace_period 2 "$T/fails.sh"
expect_rc 3
expect_story "$T/err" \
  "mlrun $head debug: ssh host2: connecting" \
  "mlrun $head debug: ssh host3: starting the agent of node 2" \
  "mlrun host1 debug: attempt 0: joining the rendezvous at " \
  "mlrun host2 debug: attempt 0: spawned rank 3 \(local rank 1\) as pid [0-9]+" \
  "mlrun host2 debug: attempt 0: rank 3 \(pid [0-9]+\) ended: exit code 3" \
  "mlrun host1 debug: attempt 0: signal 15 \(TERM\) to rank 0, process group [0-9]+" \
  "mlrun host3 debug: attempt 0: signal 15 \(TERM\) to rank 5, process group [0-9]+" \
  "mlrun host[123] info: attempt 0: failed \(exit code 3\)"
assert_no_job_left 15

# The default: nothing of the story.
run_mlrun -H host1:2,host2:2,host3:2 "$T/ok.sh"
expect_rc 0
expect_no_grep "$T/err" "mlrun [^ ]+ (info|debug): "
echo "ok: -v told the story in $story lines; -vv showed the teardown's signals; default quiet"
