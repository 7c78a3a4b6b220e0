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

# mlrun started with stdout and stderr closed: /dev/null holds both places, so no pipe or eventfd
# of mlrun's takes them (a worker's lines went into the lifeline's pipe).
write_worker wait_go.sh 'touch "$T/up.$RANK"; for _ in $(seq 200); do [ -e "$T/go" ] && exit 0; "$T/sleep" 0.05; done'
"$MLRUN" --nproc_per_node=1 --no_python "$T/wait_go.sh" >&- 2>&- &
MLRUN_PID=$!
wait_until 30 test -e "$T/up.0" || fail "the worker of mlrun >&- 2>&- did not start"
for fd in 1 2; do
  target=$(readlink "/proc/$MLRUN_PID/fd/$fd" || true)
  [ "$target" = /dev/null ] || fail "mlrun >&- 2>&-: its fd $fd is '$target', not /dev/null"
done
touch "$T/go"
wait_mlrun 30
expect_rc 0
assert_no_marker_left
echo PASS
