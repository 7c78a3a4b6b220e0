#!/usr/bin/env bash
# `mlrun doctor` in `salloc -N3` with no host flags: the job, its nodes and Slurm's version and
# KillWait, and each node's own report probed through srun (GPUs, interfaces, the rendezvous
# port reached from the node).
source "$(dirname "$0")/lib.sh"
rc=0
in_t salloc -N3 -J "$MARKER" -Q timeout 120 "$MLRUN" doctor --python-timeout 0 >"$T/out" 2>&1 ||
  rc=$?
[ $rc -eq 0 ] || fail "mlrun doctor exited $rc: $(cat "$T/out")"
expect_grep "$T/out" '^remote checks \(Slurm job [0-9]+: 3 nodes sn\[01-03\]; Slurm 22\.05\.[0-9]+, KillWait 5 s\): through one srun step'
for n in 1 2 3; do
  expect_grep "$T/out" "^host sn0$n \(through srun\)$"
done
[ "$(grep -c '^  Rendezvous  reaches 10\.78\.0\.1:' "$T/out")" -eq 3 ] ||
  fail "not every node reached the rendezvous port: $(cat "$T/out")"
[ "$(grep -c '^  GPUs ' "$T/out")" -eq 4 ] || fail "a GPU line per host is missing"
assert_no_job_left 15
echo "ok: doctor through srun on sn01..sn03"
