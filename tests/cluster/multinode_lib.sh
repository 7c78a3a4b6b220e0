# Shared by the multinode_*.sh tests: multi-host launches of the real mlrun on the namespace
# cluster (3 hosts, the ctest fixture `mlrun_cluster`). Sourced after lib.sh's checks.
#
# Every test gets a unique marker and a scratch directory named after it, $T, which every host
# sees (the namespaces share the file system and the PID space). mlrun is started with $T as its
# working directory, so the agents (which enter the head's directory), the workers and their
# children all have their cwd under $T, and the worker scripts and "$T/sleep" carry the marker in
# their argv. "Is anything of this job left on any host?" is therefore: a process whose argv has
# the marker or whose cwd is under $T. The PID space is shared, so one scan of /proc sees every
# host; job_pids_on I narrows it to host I's network namespace.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/../job_lib.sh"

MLRUN=${MLRUN:-}
[ -n "$MLRUN" ] && [ -x "$MLRUN" ] || fail "MLRUN must name the built mlrun binary"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TEST_NAME=$(basename "$0" .sh)
MARKER="mlrt-${TEST_NAME//_/-}-$$-$RANDOM$RANDOM"
T="${TMPDIR:-/tmp}/$MARKER"
mkdir -p "$T"
chmod 755 "$T"
ln -s "$(command -v sleep)" "$T/sleep"
[ "$MLRUN_CLUSTER_HOSTS" -ge 3 ] || fail "the multinode tests need 3 hosts, the cluster has $MLRUN_CLUSTER_HOSTS"

# What a worker would otherwise inherit from whoever runs the tests.
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK \
  ROLE_WORLD_SIZE ROLE_NAME MASTER_ADDR MASTER_PORT OMP_NUM_THREADS TORCHELASTIC_RESTART_COUNT \
  TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE \
  TORCHELASTIC_ERROR_FILE MLRUN_JOB_ID MLRUN_BACKEND MLRUN_RDZV_ENDPOINT MLRUN_RDZV_TOKEN

# random_port: the rendezvous port of nodes started by hand.
random_port() {
  # Below the kernel's ephemeral range (32768 on): a port picked in it can be some outgoing
  # connection's local port on the host, and then the endpoint's owner cannot listen on it and
  # joins instead: most likely why cluster.elastic_link_down once saw every node wait for a
  # server in CI (nothing listened on the endpoint, its owner included).
  local lo _
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
  if ((lo - 20000 > 1000)); then
    echo $((20000 + (RANDOM * 7 + $$) % (lo - 20000)))
  else
    echo $((20000 + (RANDOM * 7 + $$) % 20000))
  fi
}

# start_mlrun_on I ARGS...: mlrun ARGS on host I (cluster.sh exec), from $T, in the background;
# its output in $T/nodeI.out, its pid in NODE_PIDS[I]. Job control is on around it, as in
# start_mlrun, so that it does not start with SIGINT ignored.
declare -a NODE_PIDS
start_mlrun_on() {
  local i=$1
  shift
  set -m
  "$CLUSTER" exec "$i" sh -c 'cd "$1" && shift && exec "$@"' sh "$T" "$MLRUN" "$@" \
    >"$T/node$i.out" 2>&1 &
  NODE_PIDS[i]=$!
  set +m
}

# wait_nodes WHAT I...: waits for the nodes started on hosts I... (start_mlrun_on); fails naming
# WHAT and the host of the first that exited non-zero.
wait_nodes() {
  local what=$1 i rc
  shift
  for i in "$@"; do
    rc=0
    wait "${NODE_PIDS[i]}" || rc=$?
    [ $rc -eq 0 ] || fail "$what: the node on host$i exited $rc"
  done
}

# need_torch: skips the test (77) unless $PYTHON (default /usr/bin/python3) imports torch; exports
# PYTHON for mlrun.
need_torch() {
  PYTHON=${PYTHON:-/usr/bin/python3}
  "$PYTHON" -c 'import torch, torch.distributed' 2>/dev/null ||
    { echo "SKIP: $PYTHON cannot import torch (apt-get install python3-torch)"; exit 77; }
  export PYTHON
}

# agent_pids: the `mlrun agent` processes of this job (not their lifelines, forks that name
# themselves `mlrun-lifeline`).
agent_pids() {
  local p
  for p in $(pgrep -fx -- "$MLRUN agent" || true); do
    case "$(readlink "/proc/$p/cwd" 2>/dev/null)" in "$T" | "$T"/*) echo "$p" ;; esac
  done
  true
}

# check_agent_of RANK HOST: sets AGENT to the pid of the agent that runs RANK on HOST, from
# the worker's "$$ $PPID $(hostname)" line in $T/pid.RANK (or $T/up.RANK), and fails unless that
# parent is an mlrun agent living on HOST.
check_agent_of() {
  local f="$T/pid.$1" _w host
  [ -f "$f" ] || f="$T/up.$1"
  read -r _w AGENT host <"$f"
  [ "$host" = "$2" ] || fail "rank $1 ran on $host, not $2"
  [ "$(tr '\0' ' ' <"/proc/$AGENT/cmdline")" = "$MLRUN agent " ] ||
    fail "rank $1's parent is not an mlrun agent: $(tr '\0' ' ' <"/proc/$AGENT/cmdline")"
  [ "$(host_of_pid "$AGENT")" = "$2" ] || fail "rank $1's agent lives on $(host_of_pid "$AGENT")"
}

# host_of_pid PID: the cluster host whose network namespace PID lives in ("head" for the root).
host_of_pid() {
  local ns
  ns=$(ip netns identify "$1" 2>/dev/null || true)
  case "$ns" in "$MLRUN_CLUSTER_PREFIX"-h*) echo "host${ns#"$MLRUN_CLUSTER_PREFIX"-h}" ;; "") echo head ;; *) echo "$ns" ;; esac
}

# job_pids_on I: the job's processes that live in host I's network namespace (`ip netns pids`),
# so that a failure can say which host still runs something.
job_pids_on() {
  local mine p
  mine=$(job_pids)
  for p in $(ip netns pids "$MLRUN_CLUSTER_PREFIX-h$1" 2>/dev/null || true); do
    if grep -qx -- "$p" <<<"$mine"; then echo "$p"; fi
  done
  true
}

describe_pids() {
  local p
  for p in "$@"; do
    echo "  pid $p on $(host_of_pid "$p"): $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-160) (cwd $(readlink "/proc/$p/cwd" 2>/dev/null))"
  done
}

# assert_no_job_left [SECONDS]: nothing of the job on any host (head and hosts) within a bound.
assert_no_job_left() {
  if ! wait_until "${1:-15}" no_job_left; then
    # shellcheck disable=SC2046
    fail "processes of the job are still running after ${1:-15} s:"$'\n'"$(describe_pids $(job_pids))"
  fi
  local i
  for ((i = 1; i <= MLRUN_CLUSTER_HOSTS; i++)); do
    [ -z "$(job_pids_on "$i")" ] || fail "host$i still runs processes of the job"
  done
}

cleanup() {
  local pids
  pids=$(job_pids)
  # shellcheck disable=SC2086
  if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null || true; fi
  rm -rf "$T"
}
trap cleanup EXIT

fail() {
  echo "FAIL ($TEST_NAME): $*" >&2
  local f
  for f in "$T"/out "$T"/err "$T"/node*.out; do
    [ -s "$f" ] && { echo "--- $f (first 30 lines)" >&2; head -n 30 "$f" | cut -c1-300 >&2; }
  done
  exit 1
}

# write_worker NAME BODY: an executable bash script $T/NAME (its path carries the marker).
write_worker() {
  printf '#!/bin/bash\nT=%q\n%s\n' "$T" "$2" >"$T/$1"
  chmod +x "$T/$1"
}

# run_mlrun ARGS...: mlrun from $T to completion; stdout in $T/out, stderr in $T/err, code $RC.
run_mlrun() {
  RC=0
  (cd "$T" && exec "$MLRUN" "$@") >"$T/out" 2>"$T/err" || RC=$?
}

# start_mlrun ARGS...: as run_mlrun, in the background; its pid in $MLRUN_PID. Job control is on
# around it so that the head does not start with SIGINT ignored (bash ignores SIGINT in
# background jobs of a non-interactive shell), as it would not from a terminal.
start_mlrun() {
  set -m
  (cd "$T" && exec "$MLRUN" "$@") >"$T/out" 2>"$T/err" &
  MLRUN_PID=$!
  set +m
}

mlrun_running() {
  kill -0 "$MLRUN_PID" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$MLRUN_PID/status" 2>/dev/null
}

# wait_mlrun SECONDS: waits for the background mlrun; its code in $RC.
wait_mlrun() {
  wait_until "$1" eval '! mlrun_running' || fail "mlrun (pid $MLRUN_PID) still running after $1 s"
  RC=0
  wait "$MLRUN_PID" || RC=$?
}

expect_rc() { [ "$RC" -eq "$1" ] || fail "expected exit code $1, got $RC"; }
expect_rc_nonzero() { [ "$RC" -ne 0 ] || fail "expected a non-zero exit code, got 0"; }
expect_grep() { grep -qE -- "$2" "$1" || fail "$1 has nothing matching /$2/"; }
expect_no_grep() { ! grep -qE -- "$2" "$1" || fail "$1 has a line matching /$2/"; }

count_files() { local n=0 f; for f in $1; do [ -e "$f" ] && n=$((n + 1)); done; echo "$n"; }
files_at_least() { [ "$(count_files "$1")" -ge "$2" ]; }

# The layout worker: one line with what it sees, "host=H rank=R local=L world=W group=G lws=S
# gws=N", on stdout (relayed, tagged) and in $T/rank.RANK.
LAYOUT_LINE='line="host=$(hostname) rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE group=$GROUP_RANK lws=$LOCAL_WORLD_SIZE gws=$GROUP_WORLD_SIZE"
echo "$line"
echo "$line" >"$T/rank.$RANK"'

# expected_layout HOST:N...: the lines the layout workers must print, nodes in the given order,
# ranks in node order (docs/design.md §4), one line per rank.
expected_layout() {
  local world=0 nodes=$# spec host n g=0 offset=0 l
  for spec in "$@"; do world=$((world + ${spec##*:})); done
  for spec in "$@"; do
    host=${spec%:*}
    n=${spec##*:}
    for ((l = 0; l < n; l++)); do
      echo "host=$host rank=$((offset + l)) local=$l world=$world group=$g lws=$n gws=$nodes"
    done
    offset=$((offset + n))
    g=$((g + 1))
  done
}

# check_layout HOST:N...: the workers' own records ($T/rank.*) and the relayed, rank-tagged
# stdout both show exactly the expected layout, and no other rank ran.
check_layout() {
  local want got_files got_out bad_tag f
  want=$(expected_layout "$@")
  got_files=$(for f in $(ls "$T"/rank.* 2>/dev/null | sort -t. -k2 -n); do cat "$f"; done)
  [ "$got_files" = "$want" ] ||
    fail "rank layout: expected"$'\n'"$want"$'\n'"the workers recorded"$'\n'"$got_files"
  # Relayed output: "[R] host=... rank=R ..." for every rank, each tag equal to its rank.
  bad_tag=$(grep -E '^\[[0-9]+\] host=' "$T/out" |
    sed -E 's/^\[([0-9]+)\] host=[^ ]+ rank=([0-9]+) .*/\1 \2/' | awk '$1 != $2' | head -n 1)
  [ -z "$bad_tag" ] || fail "a relayed line's tag is not its rank (tag rank): $bad_tag"
  got_out=$(grep -E '^\[[0-9]+\] host=' "$T/out" | sed -E 's/^\[[0-9]+\] //' |
    awk '{ split($2, a, "="); print a[2] "\t" $0 }' | sort -n | cut -f2-)
  [ "$got_out" = "$want" ] ||
    fail "relayed stdout: expected"$'\n'"$want"$'\n'"got"$'\n'"$got_out"
}

# expect_store_refuses_host3 ADDR PORT: a real torch 1.13 TCPStore client on host3 (outside the
# job) cannot use mlrun's store at ADDR:PORT, and the head logs the refusal with host3's address.
expect_store_refuses_host3() {
  local host3_ip
  host3_ip=$("$CLUSTER" exec 3 hostname -I | awk '{print $1}')
  if "$CLUSTER" exec 3 "$PYTHON" -c "
import datetime
from torch.distributed import TCPStore
s = TCPStore('$1', $2, None, False, datetime.timedelta(seconds=5))
s.set('stranger', 'x')
print(s.get('stranger'))
" >"$T/stranger.out" 2>&1; then
    fail "host3 ($host3_ip), outside the job, used the store: $(cat "$T/stranger.out")"
  fi
  local refused="refused torch 1\.13 TCPStore connection from ${host3_ip//./\\.}:[0-9]+"
  wait_until 10 grep -qE -- "$refused" "$T/err" || fail "no refusal of host3 ($host3_ip) logged"
}
