# SIGTERM to an elastic node still waiting for its first round (a pod preempted before the job
# started): it leaves at once (exit 143), not after join_timeout, and the others' round forms
# without it. Before, its join went on: it held the other nodes' round open as a member, and a
# round that closed with it started workers on a node that had left.
source "$(dirname "$0")/common.sh"

write_worker w.sh 'echo "rank $RANK of $WORLD_SIZE"'
port=$(pick_port)
export MLRUN_RDZV_TOKEN=elastic-leave-join-token-$RANDOM-$RANDOM-$$
# 3 to 4 nodes: node A (which serves the endpoint) and node B alone cannot close a round. Run in
# the background, so exec: the job is the pid that $! gives.
node() {
  exec "$MLRUN" "${@:2}" --nnodes=3:4 --rdzv_endpoint=127.0.0.1:$port \
    --rdzv_conf last_call_timeout=1,join_timeout=60 --no_python "$T/w.sh" \
    >"$T/out.$1" 2>"$T/err.$1"
}

node a &
a=$!
wait_until 10 grep -q "serving the rendezvous" "$T/err.a" || fail "node A did not serve: $(cat "$T/err.a")"
node b -vv &
b=$!
wait_until 10 grep -q "joining an elastic round" "$T/err.b" || fail "node B did not join: $(cat "$T/err.b")"
sleep 0.5 # its join reaches the server
kill -TERM "$b"
start=$(now_ms)
wait_until 10 eval '! kill -0 "$b" 2>/dev/null' || fail "node B still runs 10 s after SIGTERM (join_timeout is 60 s)"
took=$(($(now_ms) - start))
rc=0
wait "$b" || rc=$?
[ "$rc" -eq 143 ] || fail "node B exited $rc, want 143: $(cat "$T/err.b")"
expect_grep "$T/err.b" "^mlrun: SIGTERM: this node \\(([^ ]+#[0-9a-f]+)\\) leaves the elastic job before its first round; "
member=$(sed -nE 's/^mlrun: SIGTERM: this node \(([^ ]+#[0-9a-f]+)\) leaves.*/\1/p' "$T/err.b")
[ ! -s "$T/out.b" ] || fail "node B ran a worker: $(cat "$T/out.b")"

# Two more nodes: the round of 3 forms from A, C and D, and the job runs.
node c &
c=$!
node d &
d=$!
for n in a c d; do
  rc=0
  wait "${!n}" || rc=$?
  [ "$rc" -eq 0 ] || fail "node ${n^^} exited $rc: $(cat "$T/err.$n")"
done
expect_grep "$T/err.a" "^mlrun: round 0: 3 nodes \\("
! grep "^mlrun: round 0:" "$T/err.a" | grep -qF -- "$member" ||
  fail "node B ($member) is in the round: $(grep '^mlrun: round' "$T/err.a")"
expect_line "$T/out.a" "[0] rank 0 of 3"
assert_no_marker_left
echo "ok: node B left in $took ms; the round formed without it"
echo PASS
