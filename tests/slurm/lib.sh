# Sourced by every tests/slurm/*.sh test: skips where a Slurm cluster cannot run, makes sure it is
# up (the ctest fixture normally did that), and gives the test a marker and a scratch directory.
#
# As in tests/cluster/multinode_lib.sh: mlrun runs from $T, so the agents (which enter the
# head's directory), the workers and their children have their cwd under $T, and worker scripts
# under $T carry the marker in their argv. The namespaces share the PID space and the file
# system, so one scan of /proc sees every node's processes.
set -euo pipefail
SLURM_CLUSTER="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/slurm_cluster.sh"
"$SLURM_CLUSTER" can-run || exit 77
[ -f "${MLRUN_SLURM_DIR:-/tmp/mlrun-slurm}/env" ] || "$SLURM_CLUSTER" up 3 >/dev/null
eval "$("$SLURM_CLUSTER" env)"
source "$(dirname "${BASH_SOURCE[0]}")/../job_lib.sh"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

MLRUN=${MLRUN:-}
[ -n "$MLRUN" ] && [ -x "$MLRUN" ] || fail "MLRUN must name the built mlrun binary"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TEST_NAME=$(basename "$0" .sh)
MARKER="mlsl-${TEST_NAME//_/-}-$$-$RANDOM$RANDOM"
T="${TMPDIR:-/tmp}/$MARKER"
mkdir -p "$T"
chmod 755 "$T"
ln -s "$(command -v sleep)" "$T/sleep"

# What a job would otherwise inherit from whoever runs the tests (a CI inside Slurm, too).
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE MASTER_ADDR \
  MASTER_PORT MLRUN_JOB_ID MLRUN_RDZV_ENDPOINT MLRUN_RDZV_TOKEN
for v in $(env | grep -o '^SLURM_[A-Z_]*' | grep -v '^SLURM_CONF$' || true); do unset "$v"; done

# in_t COMMAND...: COMMAND with $T as its working directory (never this shell's: the scan for
# leftovers looks for processes whose cwd is under $T).
in_t() { (cd "$T" && exec "$@"); }

expect_grep() {
  grep -qE -- "$2" "$1" || fail "$1 lacks /$2/; it was:"$'\n'"$(cat "$1")"
}

expect_no_grep() {
  ! grep -qE -- "$2" "$1" || fail "$1 has /$2/; it was:"$'\n'"$(cat "$1")"
}

# assert_no_job_left SECONDS: nothing of the job on any node within SECONDS.
assert_no_job_left() {
  if ! wait_until "$1" no_job_left; then
    local p
    for p in $(job_pids); do ps -o pid=,args= -p "$p" || true; done >&2
    fail "processes of the job are left $1 s after its end"
  fi
}

# The test's own Slurm jobs and processes go when it ends, whatever happened.
cleanup() {
  local jobs pids
  jobs=$(squeue -h -o %A -n "$MARKER" 2>/dev/null || true)
  # shellcheck disable=SC2086
  [ -z "$jobs" ] || scancel $jobs 2>/dev/null || true
  pids=$(job_pids)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT

# start_salloc ARGS...: `salloc -N3 -J $MARKER -Q ARGS...` from $T in the background, its output
# in $T/out, its pid in SALLOC_PID, and the allocation's job id in JOB once it is granted.
start_salloc() {
  in_t salloc -N3 -J "$MARKER" -Q "$@" >"$T/out" 2>&1 &
  SALLOC_PID=$!
  granted() { JOB=$(squeue -h -n "$MARKER" -o %A 2>/dev/null | head -1) && [ -n "$JOB" ]; }
  wait_until 30 granted || fail "no allocation within 30 s: $(cat "$T/out")"
}

# count_files PATTERN: how many files match.
count_files() { local n=0 f; for f in $1; do [ -e "$f" ] && n=$((n + 1)); done; echo "$n"; }

# wait_files SECONDS PATTERN N: until N files match PATTERN, or fails naming them.
wait_files() {
  enough() { [ "$(count_files "$2")" -ge "$3" ]; }
  wait_until "$1" enough "$@" || fail "$(count_files "$2") of $3 files $2 after $1 s: $(cat "$T/out")"
}

# start_loop_job: mlrun as the command of `salloc -N3` (start_salloc), 2 workers a node that loop
# until stopped, each leaving $T/started.RANK and, on SIGTERM, $T/term.RANK. Returns once all 6
# run; sets HEAD to mlrun's pid.
start_loop_job() {
  cat >"$T/worker.sh" <<'SH'
trap 'echo "rank $RANK got SIGTERM" >"$T/term.$RANK"; exit 0' TERM
touch "$T/started.$RANK"
while :; do "$T/sleep" 0.1; done
SH
  export T
  start_salloc sh -c 'exec "$0" "$@"' "$MLRUN" --nproc_per_node=2 sh "$T/worker.sh"
  wait_files 60 "$T/started.*" 6
  HEAD=$(pgrep -f -- "^$MLRUN --nproc_per_node=2 sh $T/worker.sh" | head -1)
  [ -n "$HEAD" ] || fail "no mlrun head found"
}
