"""The rendezvous wire protocol (docs/protocol.md) in a few lines, for hostile-client tests:
frames are built by hand so that a test can send what no real client would."""
import socket
import struct

MAGIC = 0x5A524C4D
OPS = {"hello": 1, "join": 2, "set": 3, "get": 4, "add": 5, "wait": 7, "barrier": 9}


def s(data):
    """A protocol string: u32 length, then the bytes."""
    if isinstance(data, str):
        data = data.encode()
    return struct.pack("<I", len(data)) + data


def frame(op, payload, request_id=1):
    return struct.pack("<IBBHII", MAGIC, 1, OPS[op], 0, request_id, len(payload)) + payload


def hello(token, job_id=""):
    return frame("hello", s(token) + s(job_id))


def read_frame(sock):
    """(op, status, payload) of the next frame; None at end of stream."""
    head = recv_exact(sock, 16)
    if head is None:
        return None
    magic, _version, op, status, _rid, n = struct.unpack("<IBBHII", head)
    assert magic == MAGIC, "bad magic in a reply"
    return op, status, recv_exact(sock, n)


def recv_exact(sock, n):
    out = bytearray(n)
    view, got = memoryview(out), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return bytes(out)


def connect(endpoint, timeout=10):
    host, port = endpoint.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def silent(port, n):
    """n connections to 127.0.0.1:port that never send anything (non-blocking connects)."""
    out = []
    for _ in range(n):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        out.append(sock)
    return out


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")
