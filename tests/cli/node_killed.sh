# Nodes started one by one (torchrun style, Kubeflow pods): a node killed by SIGKILL (OOM killer,
# a crash, a pod deleted with no grace) closes its connections like one that ended, and no head
# is there to say it died. The server takes its heartbeats' connection closing before the node
# said it was done for its loss (node_watch, docs/protocol.md): the others end at once, naming
# it, instead of waiting for its result for ever. A node that ends normally says nothing of the
# kind (the other cli tests of nodes one by one); nothing of the job is left.
source "$(dirname "$0")/common.sh"

write_worker hold.sh 'touch "$T/up.$RANK"; exec "$T/sleep" 1000'
port=$(pick_port)
export MLRUN_RDZV_TOKEN=node-killed-token-$RANDOM-$RANDOM-$$
all_up() { [ "$(count_files "$T/up.*")" -eq 2 ]; }
# ended PID: the background process has exited (a zombie until waited for, or gone).
ended() { ! kill -0 "$1" 2>/dev/null || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
for victim in 1 0; do
  rm -f "$T"/up.*
  "$MLRUN" --nnodes=2 --node_rank=0 --master_addr=127.0.0.1 --master_port=$port --no_python \
    "$T/hold.sh" >"$T/out.0" 2>"$T/err.0" &
  n0=$!
  "$MLRUN" --nnodes=2 --node_rank=1 --master_addr=127.0.0.1 --master_port=$port --no_python \
    "$T/hold.sh" >"$T/out.1" 2>"$T/err.1" &
  n1=$!
  wait_until 60 all_up || fail "the workers did not start: $(cat "$T/err.0" "$T/err.1")"
  if [ "$victim" = 1 ]; then
    # Node 1 killed: node 0, which serves, ends the job naming it.
    kill -KILL "$n1"
    start=$(now_ms)
    wait_until 60 ended "$n0" || fail "node 0 still runs 60 s after node 1's SIGKILL"
    rc=0
    wait "$n0" || rc=$?
    took=$(($(now_ms) - start))
    [ "$rc" -eq 1 ] || fail "node 0 exited $rc after node 1's SIGKILL, want 1: $(cat "$T/err.0")"
    expect_grep "$T/err.0" "job aborted: node 1 \(.*\) lost: its connection to the rendezvous closed while the job ran"
    # At once, not after heartbeat_timeout (30 s) or the workers' 1000 s.
    [ "$took" -lt 20000 ] || fail "node 0 took $took ms to end after node 1's SIGKILL"
    wait "$n1" 2>/dev/null
  else
    # Node 0, the server, killed: node 1 loses the rendezvous and ends (as before).
    kill -KILL "$n0"
    wait_until 60 ended "$n1" || fail "node 1 still runs 60 s after node 0's SIGKILL"
    rc=0
    wait "$n1" || rc=$?
    [ "$rc" -ne 0 ] || fail "node 1 exited 0 after node 0's SIGKILL"
    expect_grep "$T/err.1" "this node lost the rendezvous at 127\.0\.0\.1:$port"
    wait "$n0" 2>/dev/null
  fi
  assert_no_marker_left 10
done
echo PASS
