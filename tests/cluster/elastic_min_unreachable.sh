#!/usr/bin/env bash
# MIN not reachable: (1) --nnodes=2:3 with one host only: the join times out naming who joined
# and how many were missing; (2) 2 of --nnodes=2:3 running, one is cut off: the other ends the
# job with a summary naming the lost node and when it was last heard from.
source "$(dirname "$0")/elastic_lib.sh"
restore() { "$CLUSTER" link-up 2 >/dev/null 2>&1 || true; cleanup; }
trap restore EXIT
write_worker w.sh 'exec "$T/sleep" 120'

CONF=last_call_timeout=1,heartbeat_interval=0.5,heartbeat_timeout=4,join_timeout=4
# -vv: its server's line for the abort a client sent (the published reason) is a debug line.
start_node 1 2:3 -vv --nproc_per_node=1 "$T/w.sh"
wait_node 1 30
[ "$RC" -ne 0 ] || fail "a job of one node with --nnodes=2:3 succeeded"
expect_grep "$T/node1.out" '1 joined, at least 2 needed \(at most 3\); joined: "host1#[0-9a-f]+" from '"$NET_RE"'\.11:[0-9]+; waited for: 1 more node'
# The abort it publishes names its host: the rendezvous never gave it a rank.
expect_grep "$T/node1.out" 'job aborted by '"$NET_RE"'\.11:[0-9]+: "host1 \(no rank yet\): rendezvous join'
echo "ok: the lone node's error names who joined and how many were missing"

PORT=$((PORT + 1)); ENDPOINT="$NET.11:$PORT"
CONF=last_call_timeout=1,heartbeat_interval=0.5,heartbeat_timeout=4,join_timeout=60
start_node 1 2:3 --nproc_per_node=1 "$T/w.sh"
start_node 2 2:3 --nproc_per_node=1 "$T/w.sh"
running() { grep -q 'round 0: 2 nodes' "$T/node1.out" 2>/dev/null; }
wait_until 30 running || fail "round 0 of 2 nodes did not start"
sleep 1
"$CLUSTER" link-down 2
wait_node 1 30
[ "$RC" -ne 0 ] || fail "host1 succeeded alone under --nnodes=2:3"
expect_grep "$T/node1.out" 'node [01] \(host2#[0-9a-f]+\) lost: no heartbeat .*last heard from at [0-9]{2}:[0-9]{2}:[0-9]{2}.*1 node left, fewer than the minimum of --nnodes=2:3'
echo "ok: below MIN after a loss, the job ended naming the lost node"
