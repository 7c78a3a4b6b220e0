#!/usr/bin/env bash
# `scancel` of a batch job mid-run: Slurm's SIGTERM reaches every agent (and, through the step's
# process tracking, every worker) at once; each agent stops its workers within KillWait (5 s on
# the test cluster, so a grace of 3 s), every one of the 6 workers got SIGTERM, nothing of the job
# is left on any node, and mlrun's summary says Slurm stopped it.
# With the argument "timelimit" the same for a job that runs out of time (-t 0:05; slurmctld
# looks at time limits about once a minute, hence the long bound).
source "$(dirname "$0")/lib.sh"
case="${1:-scancel}"
cat >"$T/worker.sh" <<'SH'
trap 'echo "rank $RANK on $(hostname) got SIGTERM" >"$T/term.$RANK"; exit 0' TERM
touch "$T/started.$RANK"
while :; do "$T/sleep" 0.1; done
SH
cat >"$T/job.sh" <<SH
#!/bin/sh
export T="$T"
exec "$MLRUN" --nproc_per_node=2 --grace_period=20 sh "$T/worker.sh"
SH
limit=10
[ "$case" = timelimit ] && limit=0:05
job=$(in_t sbatch --parsable -N3 -J "$MARKER" -t "$limit" -o "$T/out" -D "$T" "$T/job.sh")
started() { [ "$(ls "$T"/started.* 2>/dev/null | wc -l)" -eq 6 ]; }
wait_until 60 started || fail "6 workers did not start within 60 s: $(cat "$T/out")"
if [ "$case" = scancel ]; then
  scancel "$job"
  bound=30
else
  bound=150
fi
job_over() { [ -z "$(squeue -h -j "$job" 2>/dev/null)" ]; }
wait_until "$bound" job_over || fail "job $job still in the queue $bound s later: $(cat "$T/out")"
for r in 0 1 2 3 4 5; do
  [ -f "$T/term.$r" ] || fail "rank $r got no SIGTERM: $(cat "$T/out")"
done
assert_no_job_left 15
expect_grep "$T/out" 'job aborted: interrupted: SIGTERM on .*Slurm'
echo "ok ($case): 6 workers got SIGTERM, nothing left; $(grep -o 'job aborted.*' "$T/out" | head -1)"
