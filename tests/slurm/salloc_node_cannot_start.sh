#!/usr/bin/env bash
# A node whose agent cannot start (its --log_dir cannot be made; here on every node) aborts the
# job through the head's rendezvous, named, at once. An agent in a step exits 0 whatever its
# node's result (launcher/agent_command.cc), so before 2026-12-07 the head learned nothing
# until the step had ended and said only "the agents' srun step ended with exit code 0".
source "$(dirname "$0")/lib.sh"
export T MLRUN
rc=0
in_t salloc -N2 -J "$MARKER" -Q timeout 120 "$MLRUN" --log_dir /proc/nonexistent/logs \
  --nproc_per_node=1 hostname >"$T/out" 2>&1 || rc=$?
[ $rc -ne 124 ] || fail "the job did not end within 120 s: $(cat "$T/out")"
[ $rc -eq 1 ] || fail "mlrun exited $rc, want 1: $(cat "$T/out")"
expect_grep "$T/out" "^mlrun: error: node [01] \\(sn0[12]\\): --log_dir /proc/nonexistent/logs: cannot create it"
expect_grep "$T/out" "^mlrun: job aborted: node [01] \(sn0[12]\) cannot start: --log_dir /proc/nonexistent/logs: cannot create it"
expect_no_grep "$T/out" "srun step ended"
expect_no_grep "$T/out" "^sn0[12]"
assert_no_job_left 15
echo "ok: $(grep -m1 '^mlrun: job aborted' "$T/out")"
