#!/usr/bin/env bash
# mlrun doctor -H host1,host2 --probe-timeout 5 (issue 5): host2 accepts SSH, but its probe
# hangs (its connect test to the head's port is dropped, and --timeout-ms gives it 120 s). doctor
# ends within the bound, names host2 ("host2: no report within 5 s"), still prints host1's full
# report, exits 1, and leaves no probe running on host2 (its stdin lifeline ends it).
#
# The hang is undone by the cleanup: host2's egress rule lives in a table of this test's own.
source "$(dirname "$0")/lib.sh"
MLRUN=${MLRUN:?MLRUN must name the built mlrun}
PY=/usr/bin/python3
command -v nft >/dev/null || { echo "SKIP: nft not found: apt-get install nftables" >&2; exit 77; }
TABLE=mlrun_doctor_probe_test
PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
OUT=$(mktemp -d "${TMPDIR:-/tmp}/mlrt-doctor-probe.XXXXXX")
cleanup() {
  "$CLUSTER" exec 2 nft delete table inet $TABLE 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
block_head_port 2 $TABLE "$PORT" drop

# Probes of mlrun doctor still running on host2 (in its namespace), one "pid args" line each.
probes_on_host2() {
  local pid
  for pid in $(ip netns pids "$MLRUN_CLUSTER_PREFIX-h2" 2>/dev/null); do
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- ' doctor --json' &&
      echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline")"
  done
  true
}
# expect_no_probe_left SECONDS: every probe on host2 is gone within the bound.
expect_no_probe_left() {
  local deadline=$(($(now_ms) + $1 * 1000))
  while [ -n "$(probes_on_host2)" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "probes left on host2: $(probes_on_host2)"
    sleep 0.1
  done
}

# 1. Text.
start=$(now_ms)
rc=0
"$MLRUN" doctor -H host1,host2 --port "$PORT" --timeout-ms 120000 --python-timeout 0 \
  --probe-timeout 5 >"$OUT/text" 2>"$OUT/err" || rc=$?
elapsed=$(($(now_ms) - start))
text=$(cat "$OUT/text")
echo "$text"
[ "$rc" -eq 1 ] || fail "exit code $rc, expected 1 (problems); stderr: $(cat "$OUT/err")"
# The bound (5 s) plus this host's own probe (mpirun --version) and SSH, on a loaded machine.
[ $elapsed -lt 20000 ] || fail "doctor took $elapsed ms with --probe-timeout 5"
[ $elapsed -ge 4500 ] || fail "doctor took $elapsed ms: host2's probe cannot have answered"
expect_in "$text" "host host2 (over SSH; this host is $NET.1 to it)
  SSH         ok
  Probe       no report within 5 s (--probe-timeout;"
expect_in "$text" "1 problem:
  host2: no report within 5 s"
host1=$(sed -n '/^host host1 /,/^host host2 /p' <<<"$text")
for needle in "  Rendezvous  reaches $NET.1:$PORT" "  GPUs        0 NVIDIA GPUs" \
  "$NET.11/24" "  Backend     gloo: " "GLOO_SOCKET_IFNAME=eth0"; do
  expect_in "$host1" "$needle" "host1's section"
done
expect_in "$text" "each probed there within 5 s"
# Nothing left running there: closing the connection ended the probe (stdin lifeline).
expect_no_probe_left 5

# 2. JSON: host2 is marked as timed out, host1 is complete.
rc=0
"$MLRUN" doctor --json -H host1,host2 --port "$PORT" --timeout-ms 120000 --python-timeout 0 \
  --probe-timeout 5 >"$OUT/json" 2>"$OUT/err" || rc=$?
[ "$rc" -eq 1 ] || fail "--json exit code $rc, expected 1"
$PY - "$OUT/json" <<'PYEOF' || fail "the JSON is not what was expected: $(cat "$OUT/json")"
import json, sys
j = json.load(open(sys.argv[1]))
hosts = {h["host"]: h for h in j["hosts"]}
h1, h2 = hosts["host1"], hosts["host2"]
assert j["problems"] == [h2["problems"][0]], j["problems"]
assert h2["problems"][0].startswith("host2: no report within 5 s"), h2
assert h2["probe_timed_out"] is True and h2["ssh"]["ok"] is True and "gpus" not in h2, h2
assert h1["probe_timed_out"] is False and h1["rendezvous_port"]["ok"] and h1["problems"] == [], h1
print("json ok:", h2["problems"])
PYEOF
expect_no_probe_left 5

# 3. Undone: with host2's port open again, the same bound is met and nothing is reported.
"$CLUSTER" exec 2 nft delete table inet $TABLE
rc=0
"$MLRUN" doctor -H host1,host2 --port "$PORT" --python-timeout 0 --probe-timeout 30 \
  >"$OUT/text" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || fail "exit code $rc with every host healthy; $(cat "$OUT/text")"
expect_in "$(cat "$OUT/text")" "no problems found"
echo "ok: host2's hung probe reported by name after $elapsed ms; host1 reported; nothing left"
