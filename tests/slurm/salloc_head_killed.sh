#!/usr/bin/env bash
# SIGKILL of mlrun in salloc: srun dies with it (PR_SET_PDEATHSIG, SIGTERM, which srun turns into
# the end of the step), so every agent and worker on every node is gone within 15 s, and Slurm
# has no step of the job left.
source "$(dirname "$0")/lib.sh"
start_loop_job
kill -KILL "$HEAD"
assert_no_job_left 15
steps() { [ -z "$(squeue -h -s -j "$JOB" 2>/dev/null | grep -v '\.extern' || true)" ]; }
wait_until 15 steps || fail "job $JOB still has steps: $(squeue -s -j "$JOB")"
echo "ok: agents and workers gone after SIGKILL of mlrun"
