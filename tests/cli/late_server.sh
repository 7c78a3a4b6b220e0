# Nodes started one by one whose rendezvous node starts later (a Kubeflow pod scheduled after the
# others, a torchrun-style script started node by node): node 1 waits for node 0 up to
# join_timeout, not the client's default minute, and says so while it waits; the job then runs.
# With nothing to wait for, it ends after join_timeout with the endpoint and the cause.
source "$(dirname "$0")/common.sh"

write_worker hold.sh 'echo "rank $RANK of $WORLD_SIZE"'
port=$(pick_port)
export MLRUN_RDZV_TOKEN=late-server-token-$RANDOM-$RANDOM-$$
node() {
  "$MLRUN" --nnodes=2 --node_rank="$1" --master_addr=127.0.0.1 --master_port=$port \
    --rdzv_conf "join_timeout=$2" --no_python "$T/hold.sh" >"$T/out.$1" 2>"$T/err.$1"
}

# 1. Node 1 first; node 0 seven seconds later: both succeed, node 1 said it was waiting.
node 1 60 &
late=$!
sleep 7
node 0 60 || fail "node 0 exited $?: $(cat "$T/err.0")"
wait "$late" || fail "node 1 exited $?: $(cat "$T/err.1")"
expect_grep "$T/err.1" "^mlrun: waiting for the rendezvous at 127\.0\.0\.1:$port \(Connection refused\): [5-7] s so far, up to 60 s$"
expect_line "$T/out.0" "[0] rank 0 of 2"
expect_line "$T/out.1" "[1] rank 1 of 2"

# 2. No node 0 at all, join_timeout=3: node 1 ends after ~3 s (well before the client's minute).
start=$(date +%s)
rc=0
node 1 3 || rc=$?
took=$(($(date +%s) - start))
[ "$rc" -eq 1 ] || fail "without a server: exit $rc, want 1: $(cat "$T/err.1")"
[ "$took" -le 15 ] || fail "without a server: took $took s with join_timeout=3"
expect_grep "$T/err.1" "^mlrun: error: rendezvous connect at 127\.0\.0\.1:$port: no connection within 3000 ms: Connection refused$"
[ ! -s "$T/out.1" ] || fail "a worker ran without its job: $(cat "$T/out.1")"
assert_no_marker_left
echo PASS
