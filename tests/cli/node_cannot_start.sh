# Nodes started one by one (torchrun style, Kubeflow pods): a node whose own plan fails (its
# program missing on that node) aborts the job through the rendezvous with its error, so node 0,
# which would otherwise wait for it up to join_timeout (600 s), ends at once saying why. When
# there is no rendezvous to tell (node 0 never started), it says so within its bound. Node 0 whose
# own plan fails serves the rendezvous only to answer the others' joins with its error, and ends
# once they all have it (or its bound has passed). Started from one command, a node that cannot
# start aborts the job through the head's rendezvous.
source "$(dirname "$0")/common.sh"

write_worker hold.sh 'echo "rank $RANK of $WORLD_SIZE"; exec sleep 300'
port=$(pick_port)
export MLRUN_RDZV_TOKEN=cannot-start-token-$RANDOM-$RANDOM-$$
node() {
  local rank=$1
  shift
  "$MLRUN" --nnodes=2 --node_rank="$rank" --master_addr=127.0.0.1 --master_port=$port \
    --no_python "$@" >"$T/out.$rank" 2>"$T/err.$rank"
}
# timed_node RANK ARGS...: a node run to its end; its exit code in $rc, its seconds in $took.
timed_node() {
  local start
  start=$(date +%s)
  rc=0
  node "$@" || rc=$?
  took=$(($(date +%s) - start))
}

# 1. Node 0 serves and waits; node 1's program is not there.
node 0 "$T/hold.sh" &
n0=$!
start=$(date +%s)
rc=0
node 1 "$T/missing-on-node-1" || rc=$?
[ "$rc" -eq 2 ] || fail "node 1 exited $rc, want 2: $(cat "$T/err.1")"
expect_grep "$T/err.1" "^mlrun: error: .*missing-on-node-1"
expect_grep "$T/err.1" "^mlrun: aborting the job through the rendezvous at 127\.0\.0\.1:$port, so that the other nodes do not wait for this one$"
rc=0
wait "$n0" || rc=$?
took=$(($(date +%s) - start))
[ "$rc" -eq 1 ] || fail "node 0 exited $rc, want 1: $(cat "$T/err.0")"
[ "$took" -le 20 ] || fail "node 0 took $took s to end after node 1's failure"
expect_grep "$T/err.0" "job aborted: node 1 \(.*\) cannot start: .*missing-on-node-1"
[ ! -s "$T/out.0" ] || fail "a worker ran without its job: $(cat "$T/out.0")"
# Node 0's server does not say it too (`mlrun rdzv: job aborted by ADDR: ...`): that is for -vv.
[ "$(grep -c "node 1 (.*) cannot start" "$T/err.0")" -eq 1 ] || fail "node 0 said the abort $(grep -c "cannot start" "$T/err.0") times: $(cat "$T/err.0")"

# 2. No node 0: node 1 tries for its bound (30 s, or join_timeout if shorter), then says the
#    others may still wait.
timed_node 1 --rdzv_conf join_timeout=4 "$T/missing-on-node-1"
[ "$rc" -eq 2 ] || fail "alone, node 1 exited $rc, want 2: $(cat "$T/err.1")"
[ "$took" -ge 3 ] && [ "$took" -le 15 ] || fail "alone, node 1 took $took s with join_timeout=4"
expect_grep "$T/err.1" "^mlrun: warning: could not abort the job \(.*Connection refused\): the other nodes wait for this one up to the join timeout$"

# 3. A command-line error, the same on every node, tells nobody and ends at once.
timed_node 1 --rdzv_conf join_timeout=soon "$T/hold.sh"
[ "$rc" -eq 2 ] || fail "a bad --rdzv_conf exited $rc, want 2"
[ "$took" -le 5 ] || fail "a bad --rdzv_conf took $took s"
! grep -q "aborting the job" "$T/err.1" || fail "a command-line error aborted the job: $(cat "$T/err.1")"

# 4. Node 1 waits for node 0's rendezvous; node 0's program is not there: node 0 serves only to
#    say so, node 1 ends at once with the reason, and node 0 ends as soon as node 1 has it.
node 1 "$T/hold.sh" &
n1=$!
sleep 0.5  # node 1 is waiting for the server (not needed for the outcome, only for the order)
timed_node 0 "$T/missing-on-node-0"
[ "$rc" -eq 2 ] || fail "node 0 exited $rc, want 2: $(cat "$T/err.0")"
[ "$took" -le 10 ] || fail "node 0 took $took s to tell node 1"
expect_grep "$T/err.0" "^mlrun: error: .*missing-on-node-0"
expect_grep "$T/err.0" "^mlrun: serving the rendezvous on 127\.0\.0\.1:$port up to 30 s only to abort the job"
! grep -q "warning" "$T/err.0" || fail "node 0 warned: $(cat "$T/err.0")"
rc=0
wait "$n1" || rc=$?
[ "$rc" -eq 1 ] || fail "node 1 exited $rc, want 1: $(cat "$T/err.1")"
expect_grep "$T/err.1" "job aborted: node 0 \(.*\) cannot start: .*missing-on-node-0"
[ ! -s "$T/out.1" ] || fail "a worker ran without its job: $(cat "$T/out.1")"

# 5. Node 0 alone: it serves for its bound (join_timeout=3 here), then says who was not told.
timed_node 0 --rdzv_conf join_timeout=3 "$T/missing-on-node-0"
[ "$rc" -eq 2 ] || fail "alone, node 0 exited $rc, want 2: $(cat "$T/err.0")"
[ "$took" -ge 2 ] && [ "$took" -le 10 ] || fail "alone, node 0 took $took s with join_timeout=3"
expect_grep "$T/err.0" "^mlrun: warning: 0 of the 1 other nodes joined in 3 s and were told; the rest wait for this one up to the join timeout$"

# 6. One command, many nodes (--launcher sim: real agents on this machine, as over SSH): a node
#    whose --log_dir cannot be made aborts the job at once, named, instead of the others
#    waiting for its join until the head calls its agent lost 5 s after its exit.
unset MLRUN_RDZV_TOKEN
run_mlrun --launcher sim -H "$MARKER-n0,$MARKER-n1,$MARKER-n2" --log_dir /proc/nonexistent/logs \
  "$T/hold.sh"
expect_rc 1
expect_grep "$T/err" "^mlrun: error: node [0-2] \\($MARKER-n[0-2]\\): --log_dir /proc/nonexistent/logs: cannot create it"
expect_grep "$T/err" "^mlrun: job aborted: node [0-2] \($MARKER-n[0-2]\) cannot start: --log_dir /proc/nonexistent/logs: cannot create it"
! grep -q "lost: its agent exited" "$T/err" || fail "a node that cannot start was lost: $(cat "$T/err")"
! grep -q "job aborted by" "$T/err" || fail "the head's server said the abort too: $(cat "$T/err")"
assert_no_marker_left
echo PASS
