#!/usr/bin/env bash
# mlrun doctor -H host1,host2,host3 (issue 5 item 4): host2's sshd is stopped and host3 cannot
# reach the rendezvous port on the head; each is reported by name, host1 is reported in full,
# the exit code says there are problems, and --json parses. A rejected connection reads
# "refused", a dropped one "timed out ... (a firewall?)".
#
# Why not `cluster.sh block-port 3 PORT`: it drops TCP *to* port PORT *on* host3 (inbound), and
# the check is host3 connecting *out* to the head's port, whose replies come from PORT and are
# not matched. So host3's egress to the head's port is blocked here, in host3's namespace, in a
# table of this test's own that the cleanup removes.
source "$(dirname "$0")/lib.sh"
MLRUN=${MLRUN:?MLRUN must name the built mlrun}
PY=/usr/bin/python3
command -v nft >/dev/null || { echo "SKIP: nft not found: apt-get install nftables" >&2; exit 77; }
TABLE=mlrun_doctor_test
PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
OUT=$(mktemp -d "${TMPDIR:-/tmp}/mlrt-doctor.XXXXXX")
cleanup() {
  "$CLUSTER" start-sshd 2 || true
  "$CLUSTER" exec 3 nft delete table inet $TABLE 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
block_egress() { block_head_port "$1" $TABLE "$PORT" "$2"; }  # block_egress I VERDICT

"$CLUSTER" stop-sshd 2
block_egress 3 drop

# 1. Text.
start=$(now_ms)
rc=0
"$MLRUN" doctor -H host1,host2,host3 --port "$PORT" --timeout-ms 1500 --python-timeout 0 \
  >"$OUT/text" 2>"$OUT/err" || rc=$?
elapsed=$(($(now_ms) - start))
text=$(cat "$OUT/text")
echo "$text"
[ "$rc" -eq 1 ] || fail "exit code $rc, expected 1 (problems); stderr: $(cat "$OUT/err")"
expect_in "$text" "host host2 (over SSH)
  SSH         unreachable: host2: cannot connect to $NET.12: Connection refused"
expect_in "$text" "host host3 (over SSH; this host is $NET.1 to it)
  SSH         ok
  Rendezvous  cannot reach $NET.1:$PORT: timed out after 1500 ms (a firewall?)"
expect_in "$text" "host host1 (over SSH; this host is $NET.1 to it)
  SSH         ok
  Rendezvous  reaches $NET.1:$PORT"
# host1 in full: libraries, interfaces with kind/speed/address, backend and variables.
host1=$(sed -n '/^host host1 /,/^host host2 /p' <<<"$text")
for needle in "  GPUs        0 NVIDIA GPUs" "  NCCL        " "  Gloo        " "  Open MPI    " \
  "eth0" "$NET.11/24" "  Backend     gloo: " "  Interface   eth0" \
  "GLOO_SOCKET_IFNAME=eth0" "NCCL_SOCKET_IFNAME=eth0" "OMPI_MCA_btl_tcp_if_include=$NET.0/24" \
  "MLRUN_BACKEND=gloo"; do
  expect_in "$host1" "$needle" "host1's section"
done
expect_in "$text" "2 problems:
  host2 is unreachable over SSH: host2: cannot connect to $NET.12: Connection refused"
expect_in "$text" "
  host3 cannot reach $NET.1:$PORT: timed out after 1500 ms (a firewall?)"
# Parallel: one 1.5 s timeout and a refused connect, not the sum of sequential checks.
[ $elapsed -lt 15000 ] || fail "doctor took $elapsed ms"

# 2. JSON: one object per host, parsed by Python.
rc=0
"$MLRUN" doctor --json -H host1,host2,host3 --port "$PORT" --timeout-ms 1500 \
  --python-timeout 0 >"$OUT/json" 2>"$OUT/err" || rc=$?
[ "$rc" -eq 1 ] || fail "--json exit code $rc, expected 1"
$PY - "$OUT/json" "$PORT" "$NET" <<'PYEOF' || fail "the JSON is not what was expected: $(cat "$OUT/json")"
import json, sys
j = json.load(open(sys.argv[1]))
port = int(sys.argv[2])
net = sys.argv[3]
hosts = {h["host"]: h for h in j["hosts"]}
assert j["ok"] is False and len(j["problems"]) == 2, j["problems"]
assert j["remote"]["rendezvous_port"] == port
h1, h2, h3 = hosts["host1"], hosts["host2"], hosts["host3"]
assert h1["ssh"]["ok"] and h1["rendezvous_port"]["ok"], h1
assert h1["rendezvous_port"]["target"] == "%s.1:%d" % (net, port)
assert h1["backend"]["name"] == "gloo" and h1["interface"]["name"] == "eth0", h1["interface"]
assert any(i["name"] == "eth0" and net + ".11/24" in i["addresses"] for i in h1["interfaces"])
assert h1["problems"] == []
assert h2["reachable"] is False and "Connection refused" in h2["ssh"]["error"], h2
assert "gpus" not in h2
assert h3["ssh"]["ok"] and h3["rendezvous_port"]["ok"] is False, h3
assert "timed out after 1500 ms" in h3["rendezvous_port"]["error"]
assert h3["problems"] == ["host3 cannot reach %s.1:%d: timed out after 1500 ms (a firewall?)" % (net, port)]
print("json ok:", [(h["host"], h["problems"]) for h in j["hosts"]])
PYEOF

# 3. A rejecting firewall reads "refused"; with every sshd up and nothing blocked, exit 0.
"$CLUSTER" start-sshd 2
block_egress 3 "reject with tcp reset"
rc=0
"$MLRUN" doctor -H host2,host3 --port "$PORT" --python-timeout 0 >"$OUT/text" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "exit code $rc with host3 rejected; $(cat "$OUT/text")"
expect_in "$(cat "$OUT/text")" "  host3 cannot reach $NET.1:$PORT: refused"
"$CLUSTER" exec 3 nft delete table inet $TABLE
rc=0
"$MLRUN" doctor -H host1,host2,host3 --python-timeout 0 >"$OUT/text" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || fail "exit code $rc with every host healthy; $(cat "$OUT/text")"
expect_in "$(cat "$OUT/text")" "no problems found"
echo "ok: doctor reported host2 (sshd down) and host3 (port blocked) by name in $elapsed ms"
