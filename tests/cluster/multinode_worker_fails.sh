#!/usr/bin/env bash
# A worker failing on a remote node: mlrun's exit code is that worker's, the summary names its
# rank, node and host and shows its last stderr lines, every other worker on every host is
# stopped, and nothing is left.
source "$(dirname "$0")/multinode_lib.sh"
write_worker worker.sh '
touch "$T/up.$RANK"
if [ "$RANK" = 4 ]; then
  while [ "$(ls "$T" | grep -c "^up\.")" -lt 6 ]; do sleep 0.1; done
  echo "first words of rank 4" >&2
  echo "last words of rank 4 on $(hostname)" >&2
  exit 7
fi
"$T/sleep" 1000 &
wait'

start_mlrun -H host1:2,host2:2,host3:2 "$T/worker.sh"
wait_mlrun 120
expect_rc 7
# Rank 4 is node 2's first worker, on host3.
expect_grep "$T/err" 'rank 4 .*node 2.*host3'
expect_grep "$T/err" 'last words of rank 4 on host3'
expect_grep "$T/err" 'exit(ed)? (code )?7|code 7|status 7'
assert_no_job_left 15
echo "ok: exit $RC; $(grep -m1 'First failure' "$T/err")"
