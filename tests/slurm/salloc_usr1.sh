#!/usr/bin/env bash
# A warning signal means "checkpoint", not "stop": `scancel --signal=USR1` reaches every worker on
# every node exactly once (Slurm signals every process of the step; the agents do not pass their
# own on again) and the job goes on to finish normally (exit 0, no abort).
# With the argument "at": sbatch --signal=USR1@170 -t 3, the warning Slurm sends by itself before
# the time limit (slurmctld looks about once a minute, hence the long bound).
source "$(dirname "$0")/lib.sh"
case="${1:-scancel}"
cat >"$T/worker.sh" <<'SH'
trap 'echo "rank $RANK on $(hostname)" >>"$T/usr1.$RANK"' USR1
touch "$T/started.$RANK"
# Until every rank has its warning: the job ends by itself, as a checkpoint-then-go-on job would.
while [ "$(ls "$T"/usr1.* 2>/dev/null | wc -l)" -lt 6 ]; do "$T/sleep" 0.1 & wait $! || true; done
"$T/sleep" 1
SH
export T
if [ "$case" = scancel ]; then
  start_salloc "$MLRUN" --nproc_per_node=2 sh "$T/worker.sh"
  wait_files 60 "$T/started.*" 6
  scancel --signal=USR1 "$JOB"
  wait_files 30 "$T/usr1.*" 6
  rc=0
  wait "$SALLOC_PID" || rc=$?
else
  cat >"$T/job.sh" <<SH
#!/bin/sh
exec "$MLRUN" --nproc_per_node=2 sh "$T/worker.sh"
SH
  rc=0
  in_t timeout 200 sbatch --wait -N3 -J "$MARKER" -t 3 --signal=USR1@170 -o "$T/out" -D "$T" \
    "$T/job.sh" >/dev/null || rc=$?
fi
[ $rc -eq 0 ] || fail "the job exited $rc after USR1: $(cat "$T/out")"
for r in 0 1 2 3 4 5; do
  [ "$(wc -l <"$T/usr1.$r")" -eq 1 ] || fail "rank $r saw USR1 $(wc -l <"$T/usr1.$r") times"
done
expect_no_grep "$T/out" 'aborted'
assert_no_job_left 15
echo "ok ($case): USR1 once on each of 6 workers, the job went on and ended 0"
