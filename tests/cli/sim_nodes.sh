# --launcher sim (transport/local.h): a job of many simulated nodes on this machine, each a real
# `mlrun agent` with its own node name, through the head's real relay and rendezvous server
# (through the launch tree past 32 nodes, and flat with --tree_width 16384; sim_tree.sh tests the
# tree's own cases).
# Every worker starts on its own node; a failure on one node stops every worker on every node
# with the failed worker's exit code and node named; Ctrl-C on the head stops everything; nothing
# is left after either (agents, their lifelines and workers all carry the node names of this
# test in MLRUN_NODE_NAME); a descriptor limit too low for the job is refused before anything
# starts; and no simulated node's name is looked up in DNS.
# MLRUN_SIM_TEST_NODES sets the size (default 256).
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/sim_lib.sh"

nodes=$(sim_size "${MLRUN_SIM_TEST_NODES:-}" 256)
fail_rank=$((nodes / 2 + 5))
for ((i = 0; i < nodes; i++)); do echo "$MARKER-n$i slots=1"; done >"$T/hostfile"

write_worker worker.sh '
echo "$MLRUN_NODE_NAME $GROUP_RANK" >"$T/up.$RANK"
if [ "$RANK" = "$FAIL_RANK" ]; then
  while [ ! -e "$T/fail" ]; do "$T/sleep" 0.2; done
  exit 3
fi
exec "$T/sleep" 1000'

# Each worker ran on its own simulated node, named after its hostfile line.
check_nodes() {
  local r
  for ((r = 0; r < nodes; r++)); do
    [ "$(cat "$T/up.$r")" = "$MARKER-n$r $r" ] || fail "rank $r ran as '$(cat "$T/up.$r")'"
  done
}

# 1. A failure on one node stops every worker on every node.
start_mlrun --launcher sim --hostfile "$T/hostfile" -x "FAIL_RANK=$fail_rank" "$T/worker.sh"
wait_all_up
check_nodes
touch "$T/fail"
wait_mlrun 120
expect_rc 3
expect_grep "$T/err" "First failure: rank $fail_rank .*node $fail_rank \($MARKER-n$fail_rank\)"
wait_until 30 nothing_left || fail "left after the failure: $(job_pids | head -5 | paste -sd' ')"
echo "failure: $nodes nodes stopped, nothing left"

# 2. Ctrl-C on the head, every agent started by the head itself (case 1's went through the
# launch tree, 32 wide: two levels).
rm -f "$T"/up.* "$T/fail"
start_mlrun --launcher sim --hostfile "$T/hostfile" --tree_width 16384 -x "FAIL_RANK=-1" \
  "$T/worker.sh"
wait_all_up
kill -INT "$MLRUN_PID"
wait_mlrun 120
expect_rc 130
wait_until 30 nothing_left || fail "left after SIGINT: $(job_pids | head -5 | paste -sd' ')"
echo "SIGINT: $nodes nodes stopped, nothing left"

# 3. The flag says what it needs.
run_mlrun --launcher sim /bin/true
expect_rc 2
expect_grep "$T/err" "--launcher sim needs the simulated nodes: give --hostfile or -H"

# 4. A descriptor limit too low for the job (the head holds ~8 per simulated node): refused at
# once, naming the need and the limit, before anything starts. It ran out midway before: the
# server evicted agents' connections and the head waited forever for agents without pipes.
rm -f "$T"/up.*
RC=0
(ulimit -n 256 && exec timeout 60 "$MLRUN" --launcher sim --hostfile "$T/hostfile" \
  -x "FAIL_RANK=-1" "$T/worker.sh") >"$T/out" 2>"$T/err" || RC=$?
expect_rc 2
expect_grep "$T/err" "^mlrun: error: $nodes nodes need about [0-9]+ open descriptors .* its limit is 256"
[ "$(count_files "$T/up.*")" -eq 0 ] || fail "workers started: $(count_files "$T/up.*")"
wait_until 30 nothing_left || fail "left after the refusal: $(job_pids | head -5 | paste -sd' ')"
# So is node 0 of a job started node by node, which serves the others' connections.
RC=0
(ulimit -n 256 && exec timeout 60 "$MLRUN" --nnodes=100 --node_rank=0 --master_addr=127.0.0.1 \
  --master_port="$(pick_port)" "$T/worker.sh") >"$T/out" 2>"$T/err" || RC=$?
expect_rc 1
expect_grep "$T/err" "^mlrun: error: 100 nodes need about [0-9]+ open descriptors .* its limit is 256"
[ "$(count_files "$T/up.*")" -eq 0 ] || fail "node 0 started workers: $(count_files "$T/up.*")"
echo "descriptors: refused under ulimit -n 256, nothing started"

# 5. No simulated node's name is looked up: a lookup waits for the name server (~6 s where it
# does not answer). In a network and mount namespace of its own, the job's resolver is a
# recorder on 127.0.0.1:53 that answers every query "no such name"; a lookup made on purpose
# first shows that the recorder sees them.
cat >"$T/dns.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
open(sys.argv[2], "w").close()  # Listening.
while True:
    q, peer = s.recvfrom(512)
    i, labels = 12, []
    while i < len(q) and q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode("ascii", "replace"))
        i += 1 + q[i]
    with open(sys.argv[1], "a") as f:
        f.write(".".join(labels) + "\n")
    s.sendto(q[:2] + bytes([0x81, 0x83]) + q[4:6] + b"\0\0\0\0\0\0" + q[12:i + 5], peer)
PY
for ((i = 0; i < 3; i++)); do echo "$MARKER-dns$i slots=1"; done >"$T/hostfile3"
echo "nameserver 127.0.0.1" >"$T/resolv.conf"
echo "hosts: files dns" >"$T/nsswitch.conf"
if unshare -mn true 2>/dev/null && command -v python3 >/dev/null; then
  RC=0
  # shellcheck disable=SC2016
  unshare -mn bash -c '
    T=$1 MLRUN=$2 MARKER=$3 PY3=$4
    ip link set lo up && mount --bind "$T/resolv.conf" /etc/resolv.conf &&
      mount --bind "$T/nsswitch.conf" /etc/nsswitch.conf || exit 9
    # A running nscd would answer instead of the recorder.
    if [ -d /run/nscd ]; then mount -t tmpfs none /run/nscd || exit 9; fi
    "$PY3" "$T/dns.py" "$T/queries" "$T/dns.up" & dns=$!
    for ((k = 0; k < 300; k++)); do [ -e "$T/dns.up" ] && break; sleep 0.1; done
    getent hosts "$MARKER-probe" >/dev/null
    "$MLRUN" --launcher sim --hostfile "$T/hostfile3" /bin/true >"$T/out" 2>"$T/err"
    rc=$?
    kill $dns
    exit $rc' _ "$T" "$MLRUN" "$MARKER" "$PY3" || RC=$?
  [ "$RC" -ne 9 ] || fail "could not set up the namespace's resolver (ip, mount)"
  expect_rc 0
  grep -q -- "$MARKER-probe" "$T/queries" ||
    fail "the recorder saw no lookup, not even getent's: $(cat "$T/queries" 2>/dev/null)"
  if grep -q -- "$MARKER-dns" "$T/queries"; then
    fail "simulated nodes' names were looked up: $(grep -- "$MARKER-dns" "$T/queries" | sort -u)"
  fi
  echo "names: none of 3 simulated nodes looked up"
else
  echo "SKIP case 5: needs unshare -mn (root) and python3"
fi
echo PASS
