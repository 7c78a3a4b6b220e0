#!/usr/bin/env bash
# mlrun missing on one host (not installed there, or not at the head's path): that host's shell
# cannot run the agent's `exec` and exits 127. The head says so at once, naming the node, the
# host and the path, instead of calling the node lost 5 s later with "its agent exited with code
# 127"; the other nodes stop before starting a worker, and nothing is left on any host. The same
# for a host below an interior agent of the launch tree, whose parent says it.
source "$(dirname "$0")/multinode_lib.sh"

# This mlrun lives in $T/bin, which every host sees (one file system) but the one hidden from,
# where a tmpfs mounted in that host's own mount namespace (its sshd's, which every session
# inherits) covers it.
mkdir -p "$T/bin"
cp "$MLRUN" "$(dirname "$MLRUN")/mlrun-lifeline" "$T/bin/"
MLRUN=$T/bin/mlrun
HIDDEN_ON=
sshd_of() { cat "$MLRUN_CLUSTER_DIR/host$1/sshd.pid"; }
hide_on() {
  nsenter -t "$(sshd_of "$1")" -m mount -t tmpfs mlrt-hidden "$T/bin" || fail "cannot hide $T/bin on host$1"
  HIDDEN_ON=$1
  nsenter -t "$(sshd_of "$1")" -m test ! -e "$MLRUN" || fail "$MLRUN is still visible on host$1"
}
unhide() {
  [ -z "$HIDDEN_ON" ] || nsenter -t "$(sshd_of "$HIDDEN_ON")" -m umount "$T/bin" 2>/dev/null || true
  HIDDEN_ON=
}
trap 'unhide; cleanup' EXIT
hide_on 2

write_worker worker.sh 'touch "$T/started.$RANK"; exec "$T/sleep" 60'
start=$(now_ms)
run_mlrun -H host1:1,host2:1,host3:1 "$T/worker.sh"
took=$(($(now_ms) - start))
expect_rc 1
expect_grep "$T/err" "$T/bin/mlrun: No such file or directory"
expect_grep "$T/err" "job aborted: node 1 \(host2\) lost: its agent did not start: its shell exited with code 127: $T/bin/mlrun or a library it needs is missing there"
expect_no_grep "$T/err" "exited with code 127$"
[ "$(grep -c "job aborted" "$T/err")" -eq 1 ] || fail "the abort is said more than once"
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "a worker started"
assert_no_job_left 15
echo "ok: mlrun missing on host2: exit $RC after $took ms: $(grep -m1 'job aborted' "$T/err")"

# `mlrun doctor` over the same hosts names host2 and the cause before any job does.
RC=0
(cd "$T" && exec "$MLRUN" doctor -H host1:1,host2:1) >"$T/out" 2>"$T/err" || RC=$?
expect_rc_nonzero
expect_grep "$T/out" "host2: probe failed: \`$T/bin/mlrun doctor --json\` there exited with 127: .*No such file or directory \(every host needs mlrun at this path, with the libraries it links\)"
echo "ok: mlrun doctor: $(grep -m1 'host2: probe failed' "$T/out")"

# The same below an interior agent of the launch tree (--tree_width 2: the head starts host1's
# and host2's agents, host1's agent starts host3's): its parent says it, named.
unhide
hide_on 3
start=$(now_ms)
run_mlrun --tree_width 2 -H host1:1,host2:1,host3:1 "$T/worker.sh"
took=$(($(now_ms) - start))
expect_rc 1
expect_grep "$T/err" "job aborted: node 2 \(host3\) lost: its agent did not start: its shell exited with code 127: $T/bin/mlrun or a library it needs is missing there .* \(seen by host1, its parent\)"
[ "$(count_files "$T/started.*")" -eq 0 ] || fail "a worker started"
assert_no_job_left 15
echo "ok: mlrun missing on host3, below host1: exit $RC after $took ms"
