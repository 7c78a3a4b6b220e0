# Shared helpers for the black-box CLI tests. Each test is `bash TEST.sh MLRUN SOURCE_DIR`.
#
# Every process a test starts carries the test's unique marker in its argv: the scratch
# directory is named after it, worker scripts live in it, and workers' children run as
# "$T/sleep" (a link to sleep). So "is anything of this job left?" is `pgrep -f "$MARKER"`,
# which no other test (ctest -j) and no other user's process can match.

set -u
set -o pipefail

MLRUN=${1:?usage: TEST.sh MLRUN SOURCE_DIR}
SRC=${2:?usage: TEST.sh MLRUN SOURCE_DIR}
TEST_NAME=$(basename "$0" .sh)
MARKER="mlrun-cli-${TEST_NAME//_/-}-$$-$RANDOM$RANDOM"
T="${TMPDIR:-/tmp}/$MARKER"
mkdir -p "$T"
ln -s "$(command -v sleep)" "$T/sleep"

# The variables a worker would otherwise inherit from whoever runs the tests.
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK \
  ROLE_WORLD_SIZE ROLE_NAME MASTER_ADDR MASTER_PORT OMP_NUM_THREADS TORCHELASTIC_RESTART_COUNT \
  TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE \
  TORCHELASTIC_ERROR_FILE MLRUN_JOB_ID MLRUN_BACKEND MLRUN_RDZV_ENDPOINT MLRUN_RDZV_TOKEN

# Processes of this test that are still alive (pgrep excludes itself).
marker_pids() { pgrep -f -- "$MARKER"; }

cleanup() {
  local pids
  pids=$(marker_pids)
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

fail() {
  echo "FAIL ($TEST_NAME): $*" >&2
  for f in "$T"/out "$T"/err; do
    [ -s "$f" ] && { echo "--- $f (first 10 lines)" >&2; head -n 10 "$f" | cut -c1-200 >&2; }
  done
  exit 1
}

# now_ms, wait_until.
source "$(dirname "${BASH_SOURCE[0]}")/../job_lib.sh"

no_marker_left() { [ -z "$(marker_pids)" ]; }

# assert_no_marker_left [SECONDS]: the job has left no process behind (within a bound).
assert_no_marker_left() {
  if ! wait_until "${1:-10}" no_marker_left; then
    fail "processes of the job are still running: $(ps -o pid=,args= -p "$(marker_pids | paste -sd, -)")"
  fi
}

# run_mlrun ARGS...: runs mlrun to completion, stdout in $T/out, stderr in $T/err, code in $RC.
run_mlrun() {
  RC=0
  "$MLRUN" "$@" >"$T/out" 2>"$T/err" || RC=$?
}

# start_mlrun ARGS...: runs mlrun in the background; its pid in $MLRUN_PID.
start_mlrun() {
  "$MLRUN" "$@" >"$T/out" 2>"$T/err" &
  MLRUN_PID=$!
}

mlrun_running() { kill -0 "$MLRUN_PID" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$MLRUN_PID/status" 2>/dev/null; }

# wait_mlrun SECONDS: waits for the background mlrun to exit; its code in $RC.
wait_mlrun() {
  if ! wait_until "$1" eval '! mlrun_running'; then
    fail "mlrun (pid $MLRUN_PID) still running after $1 s"
  fi
  RC=0
  wait "$MLRUN_PID" || RC=$?
}

expect_rc() { [ "$RC" -eq "$1" ] || fail "expected exit code $1, got $RC"; }

# expect_line FILE LINE: FILE has exactly this line.
expect_line() { grep -qxF -- "$2" "$1" || fail "$1 has no line '$2'"; }
expect_no_line() { ! grep -qxF -- "$2" "$1" || fail "$1 has the line '$2'"; }
expect_grep() { grep -qE -- "$2" "$1" || fail "$1 has nothing matching /$2/"; }
expect_no_grep() { ! grep -qE -- "$2" "$1" || fail "$1 has a line matching /$2/"; }

# count_files PATTERN: how many files match a glob.
count_files() { local n=0 f; for f in $1; do [ -e "$f" ] && n=$((n + 1)); done; echo "$n"; }

# write_worker NAME BODY: an executable bash script $T/NAME (its argv carries the marker).
write_worker() {
  printf '#!/bin/bash\nT=%q\n%s\n' "$T" "$2" >"$T/$1"
  chmod +x "$T/$1"
}

# pick_port: a random TCP port for a test's node 0 to bind, below the kernel's ephemeral range
# (from 20000), where no process's outgoing connection takes it first (worker/net.cc
# free_tcp_port says why); 20000-39999 where the range leaves no room.
pick_port() {
  local lo _
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
  if ((lo - 20000 > 1000)); then echo $((20000 + RANDOM % (lo - 20000))); else echo $((20000 + RANDOM % 20000)); fi
}

# start_rdzv [ARGS...]: `mlrun rdzv` on a free loopback port with a fresh strong token in
# $T/token (its path in argv carries the marker); sets RDZV_PID, RDZV_PORT and TOKEN, log in
# $T/rdzv.log.
start_rdzv() {
  TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  (umask 077 && echo "$TOKEN" >"$T/token")
  rm -f "$T/endpoint"
  "$MLRUN" rdzv --port 0 --token-file "$T/token" "$@" >"$T/endpoint" 2>"$T/rdzv.log" &
  RDZV_PID=$!
  wait_until 10 test -s "$T/endpoint" || fail "mlrun rdzv printed no endpoint: $(cat "$T/rdzv.log")"
  RDZV_PORT=$(sed 's/.*://' "$T/endpoint")
}

# PY3: Debian's python3 where there is one, for a test's helper processes (a port holder, a DNS
# recorder). A shim before it on PATH (root's pyenv here) took 1-6.5 s to start under a loaded
# -j3 run, past a helper's 5 s wait for its "ready" file.
PY3=$(command -v /usr/bin/python3 || command -v python3 || echo python3)

# wire_client: runs the Python on stdin with tests/rendezvous/wire.py importable and TOKEN,
# PORT and PID (of the server) in its environment.
wire_client() {
  TOKEN=${TOKEN:-} PORT=${RDZV_PORT:-${PORT:-}} PID=${RDZV_PID:-} PYTHONPATH="$SRC/tests/rendezvous" \
    "$PY3" - "$@"
}

# torch_store_setup: PY, Debian's python3 with torch 1.13, and ss, else SKIP (exit 77); the
# --store mlrun test worker in $T/worker.py (tests/cli/torch_store_worker.py).
torch_store_setup() {
  PY=/usr/bin/python3
  if ! "$PY" -c 'import torch, torch.distributed' 2>/dev/null; then
    echo "SKIP: $PY cannot import torch (apt-get install python3-torch)"
    exit 77
  fi
  command -v ss >/dev/null || { echo "SKIP: ss (iproute2) is missing"; exit 77; }
  cp "$SRC/tests/cli/torch_store_worker.py" "$T/worker.py"
}
