# A rendezvous server whose memory cap is reached (a worker filled the store) cannot take a
# node's failure or result: the job is aborted with that reason on every node, instead of each
# waiting for a result that will never come (docs/errors.md). Nodes started one by one against
# a standalone `mlrun rdzv --max-memory 1`; rank 0 fills it through the wire, then fails.
source "$(dirname "$0")/common.sh"

start_rdzv --max-memory 1
export MLRUN_RDZV_TOKEN=$TOKEN
cat >"$T/fill.py" <<PY
import os, socket, struct, sys, time
sys.path.insert(0, "$SRC/tests/rendezvous")
import wire
if os.environ["RANK"] != "0":
    time.sleep(1000)
host, port = os.environ["MLRUN_RDZV_ENDPOINT"].rsplit(":", 1)
sock = wire.connect(f"{host}:{port}", timeout=30)
sock.sendall(wire.hello(os.environ["MLRUN_RDZV_TOKEN"]))
assert wire.read_frame(sock)[1] == 0, "hello refused"
# Large values, then smaller ones into what is left: no failure record fits after.
n = 0
for size in (16384, 1024, 64, 1):
    while True:
        n += 1
        sock.sendall(wire.frame("set", wire.s(f"f/{n}") + wire.s(b"x" * size), n + 1))
        if wire.read_frame(sock)[1] != 0:
            break
print(f"store full after {n} values", flush=True)
sys.exit(1)
PY
node() {
  PYTHON=$PY3 "$MLRUN" --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:$RDZV_PORT \
    --rdzv_id=full --rdzv_conf join_timeout=60 "$T/fill.py" >"$T/out.$1" 2>"$T/err.$1"
}
ended() { ! kill -0 "$1" 2>/dev/null || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
node 0 &
n0=$!
node 1 &
n1=$!
wait_until 90 ended "$n0" || fail "node 0 still runs after 90 s: $(cat "$T/err.0")"
wait_until 30 ended "$n1" || fail "node 1 still runs after node 0 ended: $(cat "$T/err.1")"
for n in 0 1; do
  rc=0
  wait "$(eval echo "\$n$n")" || rc=$?
  [ "$rc" -eq 1 ] || fail "node $n exited $rc, want 1: $(cat "$T/err.$n")"
  expect_grep "$T/err.$n" "job aborted: .* could not (tell the other nodes about the failure|report its result): .*memory cap"
done
# Rank 0 is on whichever node joined first.
cat "$T/out.0" "$T/out.1" >"$T/out"
expect_grep "$T/out" "store full after"
kill "$RDZV_PID"
wait "$RDZV_PID" 2>/dev/null
assert_no_marker_left
echo PASS
