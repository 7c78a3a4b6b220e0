# `mlrun rdzv` against careless and hostile input: a weak token is refused with the reason
# (exit 2); the start line says the address it binds; malformed hellos that carry the right token
# (trailing bytes, a job id over kMaxJobIdBytes) are refused and the token is nowhere in the log.
source "$(dirname "$0")/common.sh"

for weak in x aaaaaaaaaaaaaaaaaaaaaaaa 0123456; do
  echo "$weak" >"$T/weak_token" && chmod 600 "$T/weak_token"
  RC=0
  timeout 5 "$MLRUN" rdzv --port 0 --token-file "$T/weak_token" >"$T/out" 2>"$T/err" || RC=$?
  expect_rc 2
  expect_grep "$T/err" "the token is too weak"
done

start_rdzv --job-id hostile
token=$TOKEN port=$RDZV_PORT server=$RDZV_PID
expect_grep "$T/rdzv.log" "serving on 0\.0\.0\.0:$port \(every interface"

wire_client <<'PY' || fail "the hostile client failed"
import os
import wire
token, endpoint = os.environ["TOKEN"], "127.0.0.1:" + os.environ["PORT"]
cases = {
    "trailing bytes": wire.frame("hello", wire.s(token) + wire.s("hostile") + token.encode()),
    "long job id": wire.hello(token, "j" * 300),
    "wrong token": wire.hello(token[:-1] + "x", "hostile"),
}
for name, data in cases.items():
    sock = wire.connect(endpoint)
    sock.sendall(data)
    reply = wire.read_frame(sock)
    assert reply is not None and reply[1] != 0, f"{name}: no error reply: {reply}"
    assert token.encode() not in reply[2], f"{name}: the token is in the error reply"
    sock.close()
sock = wire.connect(endpoint)
sock.sendall(wire.hello(token, "hostile"))
assert wire.read_frame(sock)[1] == 0, "the right hello was refused"
PY
kill -TERM "$server"
wait "$server"
expect_grep "$T/rdzv.log" "payload bytes, not shown"
! grep -qF "${token:0:12}" "$T/rdzv.log" || fail "the token (or a part of it) is in the server's log"
echo PASS
