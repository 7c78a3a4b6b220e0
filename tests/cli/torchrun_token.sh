# Nodes started one by one (torchrun style): node 0 binds the rendezvous to the job's address (not
# every interface) and says where; a derived token is called weak on every node; a token every
# node shares (MLRUN_RDZV_TOKEN or MLRUN_RDZV_TOKEN_FILE) makes it strong: then the derived one
# that anyone could compute is refused. A node with another node's token is refused with the reason.
source "$(dirname "$0")/common.sh"

write_worker hold.sh 'echo "rank $RANK of $WORLD_SIZE"; touch "$T/up.$RANK"; "$T/sleep" 3'
port=$(pick_port)

# start_nodes: both nodes in the background, outputs in $T/out.N and $T/err.N.
start_nodes() {
  rm -f "$T"/up.*
  PIDS=
  for r in 0 1; do
    "$MLRUN" --nnodes=2 --node_rank=$r --master_addr=127.0.0.1 --master_port=$port --no_python \
      "$T/hold.sh" >"$T/out.$r" 2>"$T/err.$r" &
    PIDS="$PIDS $!"
  done
  wait_until 30 test -e "$T/up.1" || fail "the job did not start: $(cat "$T"/err.*)"
}
wait_nodes() {
  for pid in $PIDS; do wait "$pid" || fail "a node exited $?: $(cat "$T"/err.*)"; done
}
derived_hello() {
  PORT=$port wire_client <<'PY'
import os, wire
sock = wire.connect("127.0.0.1:" + os.environ["PORT"])
sock.sendall(wire.hello("mlrun-derived:none@127.0.0.1:" + os.environ["PORT"]))
print("accepted" if wire.read_frame(sock)[1] == 0 else "refused")
PY
}

# 1. A derived token: weak, said on every node; the server listens on 127.0.0.1 only.
start_nodes
ss -ltnH "sport = :$port" | awk '{print $4}' | sort -u >"$T/listen"
[ "$(cat "$T/listen")" = "127.0.0.1:$port" ] || fail "the rendezvous listens on $(paste -sd' ' "$T/listen")"
[ "$(derived_hello)" = accepted ] || fail "the derived token was not the job's token"
wait_nodes
for r in 0 1; do expect_grep "$T/err.$r" "token is derived .*: it is weak"; done
expect_line "$T/err.0" "mlrun: serving the rendezvous on 127.0.0.1:$port"

# 2. A shared token from a file: no warning, and the derived token is refused.
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/job_token")
export MLRUN_RDZV_TOKEN_FILE="$T/job_token"
start_nodes
[ "$(derived_hello)" = refused ] || fail "the derived token was accepted with a shared token set"
wait_nodes
for r in 0 1; do ! grep -q "weak" "$T/err.$r" || fail "node $r: $(cat "$T/err.$r")"; done
expect_line "$T/out.0" "[0] rank 0 of 2"
expect_line "$T/out.1" "[1] rank 1 of 2"
unset MLRUN_RDZV_TOKEN_FILE

# 3. A node with another token than node 0's: refused at once, with the reason, exit 1, and no
#    word of heartbeats (its heartbeat and join connections send their hello unanswered; the
#    control connection's hello, answered first, is the one that says what is wrong).
export MLRUN_RDZV_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
rm -f "$T"/up.*
"$MLRUN" --nnodes=2 --node_rank=0 --master_addr=127.0.0.1 --master_port=$port --no_python \
  "$T/hold.sh" >"$T/out.0" 2>"$T/err.0" &
node0=$!
wait_until 10 grep -q "serving the rendezvous" "$T/err.0" || fail "node 0 did not serve: $(cat "$T/err.0")"
RC=0
MLRUN_RDZV_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" timeout 10 "$MLRUN" \
  --nnodes=2 --node_rank=1 --master_addr=127.0.0.1 --master_port=$port --no_python \
  "$T/hold.sh" >"$T/out.1" 2>"$T/err.1" || RC=$?
expect_rc 1
expect_grep "$T/err.1" "^mlrun: error: rendezvous connect at 127.0.0.1:$port: refused: wrong token$"
! grep -q "heartbeat" "$T/err.1" || fail "node 1 spoke of heartbeats: $(cat "$T/err.1")"
[ ! -e "$T/up.1" ] || fail "node 1 started a worker with a wrong token"
# Node 0, still joining with no worker started, ends on SIGTERM at once with 128+15 (it hung
# here until 2026-12-03: the abort it published for its signal came back and was passed over).
kill -TERM "$node0"
wait_until 10 sh -c "! kill -0 $node0 2>/dev/null" || fail "node 0 did not end on SIGTERM while joining"
RC=0
wait "$node0" || RC=$?
expect_rc 143
unset MLRUN_RDZV_TOKEN

# Derived tokens of nodes that write one server two ways (127.0.0.1, localhost) differ: the
# refused node says why and how to fix it.
"$MLRUN" --nnodes=2 --node_rank=0 --master_addr=127.0.0.1 --master_port=$port --no_python \
  --rdzv_conf join_timeout=20 "$T/hold.sh" >"$T/out.0" 2>"$T/err.0" &
node0=$!
wait_until 10 grep -q "serving the rendezvous" "$T/err.0" || fail "node 0 did not serve: $(cat "$T/err.0")"
RC=0
timeout 10 "$MLRUN" --nnodes=2 --node_rank=1 --master_addr=localhost --master_port=$port \
  --no_python "$T/hold.sh" >"$T/out.1" 2>"$T/err.1" || RC=$?
expect_rc 1
expect_grep "$T/err.1" "refused: wrong token \(this node's token is derived from --rdzv_id and the endpoint as written here, localhost:$port: every node must write both alike"
kill -TERM "$node0"
wait "$node0" 2>/dev/null
assert_no_marker_left
echo PASS
