# A legitimate hello queued among a flood of silent connections is answered, in a server whose
# cap of unauthenticated connections comes from a low descriptor limit (half of 4,096): the
# server is stopped while 12,288 silent connections and the hello queue up, the hello in the
# middle, so on resuming it takes thousands in a row and evicts past the cap of 2,048; what it
# has just accepted must still get its first read before the eviction reaches it.
source "$(dirname "$0")/common.sh"

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
# The server starts with 4,096 descriptors: a cap of 2,048 unauthenticated connections (half
# the limit); the client gets the rest.
printf '#!/bin/sh\nulimit -n 4096 && exec "%s" "$@"\n' "$MLRUN" >"$T/mlrun-4096"
chmod +x "$T/mlrun-4096"
MLRUN=$T/mlrun-4096 start_rdzv
wire_client <<'PY' || fail "the client failed: $(tail -n 5 "$T/rdzv.log")"
import os, signal, time
import wire
token, port, pid = os.environ["TOKEN"], int(os.environ["PORT"]), int(os.environ["PID"])
cap = 2048

os.kill(pid, signal.SIGSTOP)
try:
    # The kernel completes these handshakes and queues them (eight listeners, 4,096 each).
    before = wire.silent(port, 3 * cap)
    legit = wire.connect(f"127.0.0.1:{port}", timeout=20)
    legit.sendall(wire.hello(token))
    after = wire.silent(port, 3 * cap)
    time.sleep(0.5)
finally:
    os.kill(pid, signal.SIGCONT)
reply = wire.read_frame(legit)
assert reply is not None, "the server closed the queued legitimate connection (evicted before its hello was read)"
assert reply[1] == 0, f"the legitimate hello was refused: {reply}"
print(f"a hello queued between {len(before)} and {len(after)} silent connections was answered")
for s in before + after:
    s.close()
PY
kill -TERM "$RDZV_PID"
wait "$RDZV_PID" || fail "mlrun rdzv exited $?"
expect_grep "$T/rdzv.log" "evicted \\(too many unauthenticated connections, at most 2048\\)"
echo PASS
