# mlrun doctor --json parses (python3's json), with this host's section; --connect-test, the
# probe the remote side of the rendezvous-port check runs, reports a reached port and a closed
# one (refused, exit 1); a bad hostfile is a usage error.
source "$(dirname "$0")/common.sh"
PY=/usr/bin/python3

run_mlrun doctor --json --python-timeout 0
expect_rc 0
$PY -c 'import json, sys
j = json.load(open(sys.argv[1]))
h = j["hosts"][0]
assert h["local"] is True and h["backend"]["name"] in ("gloo", "nccl"), h
assert any(v["name"] == "MLRUN_BACKEND" for v in h["variables"])
assert j["ok"] is True and j["problems"] == [] and j["remote"]["hosts"] is None, j
assert h["rendezvous_port"] is None' "$T/out" || fail "doctor --json is not the expected JSON"

# A listening port is reached; a closed one is refused at once.
$PY -c 'import socket, time, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
open(sys.argv[1], "w").write(str(s.getsockname()[1])); time.sleep(30)' "$T/port" &
LISTENER=$!
wait_until 10 test -s "$T/port" || fail "no listener"
port=$(cat "$T/port")
run_mlrun doctor --json --python-timeout 0 --connect-test "127.0.0.1:$port" --timeout-ms 2000
expect_rc 0
$PY -c 'import json, sys
p = json.load(open(sys.argv[1]))["hosts"][0]["rendezvous_port"]
assert p["ok"] is True and p["target"] == "127.0.0.1:" + sys.argv[2], p' "$T/out" "$port" ||
  fail "the reached port is not reported"
kill $LISTENER
wait $LISTENER 2>/dev/null
run_mlrun doctor --python-timeout 0 --connect-test "127.0.0.1:$port" --timeout-ms 2000
expect_rc 1
expect_grep "$T/out" "^  Rendezvous  cannot reach 127.0.0.1:$port: refused"
expect_grep "$T/out" "^  [^ ]+ cannot reach 127.0.0.1:$port: refused"

# A hostfile that cannot be read: exit 2, nothing probed.
run_mlrun doctor --hostfile "$T/missing-hostfile"
expect_rc 2
expect_grep "$T/err" "^mlrun: error: .*missing-hostfile"
echo PASS
