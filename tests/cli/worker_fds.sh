# A worker starts with descriptors 0-2 and nothing else of mlrun's: no listening socket of the
# rendezvous, no client connection, no pipe (a daemon started by a worker would otherwise keep the
# port bound after mlrun exits). The worker lists its own descriptors.
source "$(dirname "$0")/common.sh"

# ls opens the directory it lists: one more descriptor, whose target is /proc/PID/fd itself.
write_worker list_fds.sh 'exec ls -l /proc/self/fd > "$T/fds.$RANK"'

check_fds() {
  local f=$1 extra
  [ -s "$f" ] || fail "no descriptor list in $f"
  extra=$(grep -- '->' "$f" | awk '{print $(NF-2), $NF}' |
    grep -vE '^[012] ' | grep -vE '^[0-9]+ /proc/[0-9]+/fd$' || true)
  [ -z "$extra" ] || fail "$f: the worker inherited descriptors beyond 0-2: $(echo "$extra" | paste -sd';')"
}

# One node (server on loopback, its clients), then -H (the head's server on every address).
run_mlrun --nproc_per_node=3 --no_python "$T/list_fds.sh"
expect_rc 0
for r in 0 1 2; do check_fds "$T/fds.$r"; done
rm -f "$T"/fds.*
run_mlrun -H localhost:2 --no_python "$T/list_fds.sh"
expect_rc 0
for r in 0 1; do check_fds "$T/fds.$r"; done
assert_no_marker_left
echo PASS
