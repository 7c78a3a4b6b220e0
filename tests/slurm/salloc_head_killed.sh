#!/usr/bin/env bash
# SIGKILL of mlrun in salloc: srun dies with it (PR_SET_PDEATHSIG, SIGTERM, which srun turns into
# the end of the step), so every agent and worker on every node is gone within 15 s, and Slurm
# has no step of the job left.
source "$(dirname "$0")/lib.sh"
cat >"$T/worker.sh" <<'SH'
touch "$T/started.$RANK"
while :; do "$T/sleep" 0.1; done
SH
export T
# The salloc shell waits on mlrun; mlrun's pid is found by its argv.
start_salloc sh -c 'exec "$0" "$@"' "$MLRUN" --nproc_per_node=2 sh "$T/worker.sh"
wait_files 60 "$T/started.*" 6
head=$(pgrep -f -- "^$MLRUN --nproc_per_node=2 sh $T/worker.sh" | head -1)
[ -n "$head" ] || fail "no mlrun head found"
kill -KILL "$head"
assert_no_job_left 15
steps() { [ -z "$(squeue -h -s -j "$JOB" 2>/dev/null | grep -v '\.extern' || true)" ]; }
wait_until 15 steps || fail "job $JOB still has steps: $(squeue -s -j "$JOB")"
echo "ok: agents and workers gone after SIGKILL of mlrun"
