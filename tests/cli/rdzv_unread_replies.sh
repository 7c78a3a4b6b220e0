# A client that sends requests without reading the replies cannot make `mlrun rdzv` buffer them
# all: one 4 MB value, then 256 gets in one write, unread. The server's RSS (from /proc) stays
# within a bound, and other clients are served meanwhile.
source "$(dirname "$0")/common.sh"

start_rdzv
wire_client <<'PY' || fail "the flooding client failed"
import os, socket, struct, time
import wire
token, endpoint, pid = os.environ["TOKEN"], "127.0.0.1:" + os.environ["PORT"], os.environ["PID"]
value_bytes = (4 << 20) - 4160  # kMaxValueBytes

def hello():
    sock = wire.connect(endpoint)
    sock.sendall(wire.hello(token))
    assert wire.read_frame(sock)[1] == 0, "hello refused"
    return sock

setter = hello()
setter.sendall(wire.frame("set", wire.s("big") + wire.s(b"v" * value_bytes)))
assert wire.read_frame(setter)[1] == 0, "set refused"
before = wire.rss_kib(pid)

flood = hello()
get = wire.frame("get", wire.s("big") + struct.pack("<I", 0))
flood.sendall(get * 256)
time.sleep(1.5)
grown = (wire.rss_kib(pid) - before) // 1024
print(f"server RSS grew by {grown} MiB with 256 unread 4 MB replies requested")
# Unbounded, this is 1 GiB; bounded, kMaxUnsentReplyBytes plus a reply and the socket buffers.
assert grown < 64, f"the server buffered unread replies: RSS grew by {grown} MiB"

# Everyone else is still served.
other = hello()
other.sendall(wire.frame("set", wire.s("k") + wire.s("v")))
assert wire.read_frame(other)[1] == 0, "another client was not served"
# The flooding client's replies come once it reads (the first 16 of them: enough to see the
# server resume after each pause).
flood.settimeout(30)
for i in range(16):
    reply = wire.read_frame(flood)
    assert reply is not None and reply[1] == 0 and len(reply[2]) >= value_bytes, f"reply {i}"
print("replies resume once read")
PY
kill -TERM "$RDZV_PID"
wait "$RDZV_PID" || fail "mlrun rdzv exited $?"
echo PASS
